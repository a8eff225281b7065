package store

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DeliveryLease is a claimed (event, route) delivery. It holds no
// connection and no row lock: the claim is a lease in the row
// (lease_owner, lease_until) that every later write of the holder is
// fenced by. While it is live, no other claim takes the pair, and the
// reconciler and `hookrelay retry` leave the pair alone. If the holder
// dies, the lease expires and the next claim takes it over.
type DeliveryLease struct {
	db *DB
	id int64
	// eventID is the pair's event: with id, it finds the row's partition.
	eventID uuid.UUID
	owner   uuid.UUID
	// held is false for a delivered pair or a stale copy: read, not
	// claimed.
	held  bool
	state webhook.DeliveryState
	gen   int64
	// attempts is the pair's attempt count the claim left: a record that
	// finds the lease gone (the claim lost to a crash) goes on only while
	// it is unchanged, that is while no other claim took or recorded the
	// pair since.
	attempts int
	// tries counts Record's calls: a try after the first waits for the
	// first (it may still be in Postgres) before it looks.
	tries int
	// TookOver says the claim took over an expired lease: an attempt of
	// a dispatcher that died mid-POST was recorded as 'lease_expired'.
	TookOver bool
	// again says the claim took a lease its owner held already: a try
	// after one whose answer was lost, which may have been a takeover not
	// flushed yet (flushTakeover).
	again bool
	// route and lane are the pair's when it was claimed in order
	// (DeliveryClaimInOrder) on a lane: Record then frees the lane.
	// skipDead: a dead outcome leaves the lane (on_dead skip).
	route, lane string
	skipDead    bool
	// handOver, when set, asks the record that frees the lane to claim
	// its next head for owner with a lease of this ttl (HandOver); next
	// and nextMsg are that head's lease and message once it committed.
	handOver time.Duration
	next     *DeliveryLease
	nextMsg  webhook.Message
	// outbox is the held outbox row of a lease handed over: its copy,
	// due when the lease runs out. Record deletes it; Release makes it
	// due at once.
	outbox int64
}

// leaseExpiredError is the error recorded for an attempt whose lease
// expired before its holder recorded it.
const leaseExpiredError = "lease expired: the dispatcher making this attempt " +
	"stopped before recording it; outcome unknown"

// DeliveryClaim claims the pair for an attempt numbered attempt of the
// copy of generation gen, with a lease of ttl, in one statement, and
// returns it. It holds nothing after it returns. A pair already delivered,
// or at another generation than gen (the copy is stale), is returned read,
// not claimed (its Release does nothing), whatever its lease. A pair whose
// lease is live fails with a *webhook.LeaseBusyError. A pair whose lease
// expired is taken over: the dead holder's attempt is recorded as
// 'lease_expired' and counted in the pair's attempts, in the same
// statement. The delivery row is created if the event has none; an event
// that is gone fails with webhook.ErrEventMissing and ErrNotFound (and
// webhook.ErrEventPurged too when it was stored once and purged since: its
// dedupe key is kept for retention.dedupe_window, or its day was dropped).
//
// owner names the claimant. A lease owner holds already is taken again (not
// a takeover, not busy): a claim whose deadline passed after Postgres had
// taken the lease, tried again by the same delivery, claims the pair
// instead of waiting out its own lease.
//
// A takeover is flushed before it returns (flushTakeover), whatever pool
// made it.
func (db *DB) DeliveryClaim(ctx context.Context, owner, eventID uuid.UUID, route string, attempt int, gen int64, ttl time.Duration) (*DeliveryLease, error) {
	var (
		l   *DeliveryLease
		err error
	)
	if db.claims != nil {
		l, err = db.claimGrouped(ctx, claimItem{owner: owner, eventID: eventID, route: route, attempt: attempt, gen: gen, ttl: ttl})
	} else {
		l, err = db.claim(ctx, owner, eventID, route, attempt, &gen, ttl)
	}
	if err != nil {
		return nil, err
	}
	if err := l.flushTakeover(ctx); err != nil {
		return nil, err
	}
	return l, nil
}

// flushTakeover makes a claim that took over an expired lease durable, on
// disk and at every synchronous standby, before its holder POSTs. A claim
// commits without waiting for the WAL flush (lax.go); lost, a plain claim
// leaves no lease, which the holder's record accepts, but a lost takeover
// leaves the dead holder's expired lease and the pair's attempts as they
// were, so the record, which finds neither its lease nor the attempts its
// claim left, would be refused as 'lost_lease' and the pair POSTed again
// after a 2xx: after a failover, the promoted standby never received an
// unflushed commit. An update of the lease's own row on the main pool
// (synchronous_commit on) writes WAL after the takeover's, so its commit
// waits until both are flushed and replicated. Takeovers are rare (a
// holder died mid-POST): the extra round trip is theirs alone. A lease no
// longer held (taken again meanwhile, the pair purged) fails the claim:
// the copy goes back to its queue, nothing is POSTed.
func (l *DeliveryLease) flushTakeover(ctx context.Context) error {
	if !(l.TookOver || l.again) || !l.held {
		return nil
	}
	ctx, cancel := l.db.bound(ctx)
	defer cancel()
	tag, err := l.db.pool.Exec(ctx, withDays(`
		UPDATE deliveries SET lease_at = lease_at
		WHERE event_id = $3 AND @day(event_id) AND id = $1 AND lease_owner = $2`, l.eventID), l.id, pgUUID(l.owner), pgUUID(l.eventID))
	if err != nil {
		return fmt.Errorf("flushing a lease takeover: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("flushing a lease takeover: %w", webhook.ErrLeaseLost)
	}
	return nil
}

// claim is DeliveryClaim; a nil gen claims whatever the pair's generation.
// Its statement has a grouped twin in claimBatch: change both.
func (db *DB) claim(ctx context.Context, owner, eventID uuid.UUID, route string, attempt int, copyGen *int64, ttl time.Duration) (*DeliveryLease, error) {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	return db.claimOn(ctx, db.lax, owner, eventID, route, attempt, copyGen, ttl)
}

// claimOn is claim through q.
func (db *DB) claimOn(ctx context.Context, q querier, owner, eventID uuid.UUID, route string, attempt int, copyGen *int64, ttl time.Duration) (*DeliveryLease, error) {
	for range 2 {
		var (
			claimed, tookOver, again bool
			id, gen                  int64
			state                    string
			remaining                float64
			attempts                 int
		)
		// prev locks the row for this statement only (no transaction is
		// held afterwards) and reads the lease as it is now, so the update
		// and the record of an expired lease see the same holder.
		err := q.QueryRow(ctx, withDays(`
			WITH prev AS (
				SELECT id, state, gen, lease_owner, lease_at, lease_until, lease_attempt, attempts
				FROM deliveries WHERE event_id = $1 AND route = $2 AND @day(event_id)
				FOR UPDATE
			), u AS (
				UPDATE deliveries d SET
					lease_owner   = $3,
					lease_at      = now(),
					lease_until   = now() + $4::interval,
					lease_attempt = $5,
					attempts      = d.attempts + CASE WHEN taken.over THEN 1 ELSE 0 END,
					last_status   = CASE WHEN taken.over THEN NULL ELSE d.last_status END,
					last_error    = CASE WHEN taken.over THEN $6 ELSE d.last_error END,
					updated_at    = now()
				FROM prev, LATERAL (SELECT prev.lease_owner IS NOT NULL AND prev.lease_owner <> $3 AS over) taken
				WHERE d.event_id = $1 AND @day(d.event_id) AND d.id = prev.id AND prev.state NOT IN ('delivered', 'stale') AND ($7::bigint IS NULL OR prev.gen = $7)
				  AND (prev.lease_until IS NULL OR prev.lease_until <= now() OR prev.lease_owner = $3)
				RETURNING d.id, d.state, d.gen, d.series, taken.over AS took_over, COALESCE(prev.lease_owner = $3, false) AS again,
				          prev.lease_at, prev.lease_until, prev.lease_attempt, d.attempts
			), expired AS (
				INSERT INTO delivery_attempts (delivery_id, event_id, attempt, started_at, duration_ms, error, outcome, series)
				SELECT id, $1, COALESCE(lease_attempt, 0), COALESCE(lease_at, lease_until), 0, $6, 'lease_expired', series
				FROM u WHERE took_over
			)
			SELECT true, id, state, gen, took_over, again, 0::float8, attempts FROM u
			UNION ALL
			SELECT false, id, state, gen, false, false, COALESCE(EXTRACT(EPOCH FROM lease_until - now()), 0)::float8, attempts
			FROM prev WHERE NOT EXISTS (SELECT 1 FROM u)`, eventID),
			pgUUID(eventID), route, pgUUID(owner), ttl, attempt, leaseExpiredError, copyGen,
		).Scan(&claimed, &id, &state, &gen, &tookOver, &again, &remaining, &attempts)
		if errors.Is(err, pgx.ErrNoRows) {
			// No row for the pair yet: create it, then claim.
			if err := deliveryCreate(ctx, db, q, eventID, route); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("taking delivery lease: %w", err)
		}
		l := &DeliveryLease{db: db, id: id, eventID: eventID, owner: owner, held: claimed, state: webhook.DeliveryState(state), gen: gen, attempts: attempts, TookOver: tookOver, again: again}
		switch {
		case claimed, l.state == webhook.StateDelivered, l.state == webhook.StateStale, copyGen != nil && *copyGen != gen:
			// Claimed; or delivered or recorded stale (both final), or the
			// copy is of another generation: read, not claimed (there is
			// nothing to deliver, so nothing to wait for).
			return l, nil
		case remaining > 0:
			return nil, &webhook.LeaseBusyError{Remaining: time.Duration(remaining * float64(time.Second))}
		}
		// The lease expired between the update and the read: claim again.
	}
	return nil, errors.New("claiming delivery: the pair's lease changed hands twice during the claim")
}

func deliveryCreate(ctx context.Context, db *DB, q querier, eventID uuid.UUID, route string) error {
	// The event's row is locked (KEY SHARE, as a foreign key would) so
	// that a purge cannot delete it, or drop its day, under the new row.
	var found, known bool
	if err := q.QueryRow(ctx, withDays(`
		WITH e AS (
			SELECT id, ordering_resource IS NOT NULL AND ordering_version IS NOT NULL AS versioned, `+laneSQL+` AS lane
			FROM events WHERE id = $1 AND @day(id) FOR KEY SHARE
		), ins AS (
			INSERT INTO deliveries (event_id, route, versioned, lane) SELECT id, $2, versioned, lane FROM e
			ON CONFLICT (event_id, route) DO NOTHING
		)
		SELECT EXISTS (SELECT 1 FROM e), EXISTS (SELECT 1 FROM event_keys k WHERE k.event_id = $1)`, eventID),
		pgUUID(eventID), route).Scan(&found, &known); err != nil {
		return fmt.Errorf("creating delivery: %w", err)
	}
	if !found && !known {
		// Its key may have expired since (retention.dedupe_window): an
		// event of a day older than every day partition left was purged
		// with its day.
		dropped, err := db.dayDropped(ctx, eventID)
		if err != nil {
			return fmt.Errorf("creating delivery: %w", err)
		}
		known = dropped
	}
	switch {
	case !found && known:
		// Purged, its dedupe key kept (retention.dedupe_window): nothing
		// to record against, and nothing was owed (purge keeps an event
		// with a pair still to deliver).
		return fmt.Errorf("%w: %w: event %s: %w: purged", webhook.ErrEventPurged, webhook.ErrEventMissing, eventID, ErrNotFound)
	case !found:
		// Never stored, or purged longer ago than the dedupe window.
		return fmt.Errorf("%w: event %s: %w", webhook.ErrEventMissing, eventID, ErrNotFound)
	}
	return nil
}

// dayDropped reports whether id is a UUIDv7 of a day older than every
// day partition of events: a day purge dropped.
func (db *DB) dayDropped(ctx context.Context, id uuid.UUID) (bool, error) {
	if id.Version() != 7 {
		return false, nil
	}
	days, err := db.dayPartitions(ctx)
	if err != nil || len(days) == 0 {
		return false, err
	}
	var ms int64
	for _, b := range id[:6] {
		ms = ms<<8 | int64(b)
	}
	return time.UnixMilli(ms).UTC().Before(days[0].day), nil
}

// BackfillEvent is an event DeliveryBackfill asks about: Headers and Body
// only when it was asked to read them.
type BackfillEvent struct {
	ID         uuid.UUID
	Source     string
	EventType  string
	ReceivedAt time.Time
	Headers    http.Header
	Body       []byte
}

// DeliveryBackfill makes route's pair (pending) for each event received
// from since (the database's clock) until until (the receiver's: when it
// followed the change) that take accepts and that has none, and returns
// how many it made. A receiver runs it when it follows a route made or
// given patterns: an event it accepted in between, matched with the
// routes it had, got no pair, while the broker may already route its
// message to the route's queue; with its pair, it is owed like any other
// (the reconciler repairs its copy, a purge keeps its day). An event
// received after until was matched with the route as followed, filter and
// all: it has the pair it should have, or none by the route's own word.
// withBody reads each event's headers and body for take (a route with a
// filter). At most backfillLimit events are looked at.
func (db *DB) DeliveryBackfill(ctx context.Context, route string, since, until time.Time, withBody bool, take func(BackfillEvent) bool) (int, error) {
	ctx, cancel := db.boundOps(ctx)
	defer cancel()
	cols := "id, source, event_type, received_at, NULL::jsonb, NULL::bytea"
	if withBody {
		cols = "id, source, event_type, received_at, headers, body"
	}
	// The id range prunes the day partitions (ids begin with the
	// receiver's clock, a minute's slack for clocks apart).
	rows, err := db.pool.Query(ctx, `SELECT `+cols+` FROM events
		WHERE id >= $1 AND received_at >= $2 AND received_at < $3 AND purged_at IS NULL ORDER BY id LIMIT $4`,
		uuid7Floor(since.Add(-time.Minute)), since, until, backfillLimit)
	if err != nil {
		return 0, fmt.Errorf("reading the events since route %q changed: %w", route, err)
	}
	var ids []uuid.UUID
	var ev BackfillEvent
	if _, err := pgx.ForEachRow(rows, []any{&ev.ID, &ev.Source, &ev.EventType, &ev.ReceivedAt, &ev.Headers, &ev.Body}, func() error {
		if take(ev) {
			ids = append(ids, ev.ID)
		}
		return nil
	}); err != nil {
		return 0, fmt.Errorf("reading the events since route %q changed: %w", route, err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	// The events' rows are locked (KEY SHARE, as in deliveryCreate): a
	// purge cannot take one under its new pair.
	var n int
	if err := db.pool.QueryRow(ctx, `
		WITH e AS (
			SELECT id, ordering_resource IS NOT NULL AND ordering_version IS NOT NULL AS versioned, `+laneSQL+` AS lane
			FROM events WHERE id = ANY($1) FOR KEY SHARE
		), ins AS (
			INSERT INTO deliveries (event_id, route, versioned, lane) SELECT id, $2, versioned, lane FROM e
			ON CONFLICT (event_id, route) DO NOTHING
			RETURNING 1
		)
		SELECT count(*) FROM ins`, ids, route).Scan(&n); err != nil {
		return 0, fmt.Errorf("making the pairs of route %q: %w", route, err)
	}
	return n, nil
}

// backfillLimit bounds the events DeliveryBackfill looks at: those of the
// seconds a receiver takes to follow a change.
const backfillLimit = 100000

// State is the delivery's state when it was claimed.
func (l *DeliveryLease) State() webhook.DeliveryState { return l.state }

// Gen is the generation of the pair's current copy: only a message of this
// generation may be delivered.
func (l *DeliveryLease) Gen() int64 { return l.gen }

// Restart starts a new attempt series for a dead pair whose dead letter an
// operator moved back to the route queue: the pair is pending again, in
// its next series, under a new generation (any other copy of the dead
// letter is then stale). It returns the new generation; the lease is still
// held. A lease taken over meanwhile fails with webhook.ErrLeaseLost.
func (l *DeliveryLease) Restart(ctx context.Context) (int64, error) {
	ctx, cancel := l.db.bound(ctx)
	defer cancel()
	return l.restartOn(ctx, l.db.pool)
}

// restartOn is Restart through q.
func (l *DeliveryLease) restartOn(ctx context.Context, q querier) (int64, error) {
	err := q.QueryRow(ctx, withDays(`
		UPDATE deliveries SET state = 'pending', gen = gen + 1, series = series + 1, due_at = now(), updated_at = now()
		WHERE event_id = $3 AND @day(event_id) AND id = $1 AND lease_owner = $2 RETURNING gen`, l.eventID),
		l.id, pgUUID(l.owner), pgUUID(l.eventID)).Scan(&l.gen)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, webhook.ErrLeaseLost
	}
	if err != nil {
		return 0, fmt.Errorf("restarting delivery: %w", err)
	}
	l.state = webhook.StatePending
	return l.gen, nil
}

// Record stores the attempt, moves the delivery to a.Outcome and releases
// the lease, in one statement fenced by the lease: a retrying outcome
// moves the pair to a new generation, the retry copy's, which it returns,
// and puts that copy in the outbox (for the tier of a.RetryIn, attempt
// a.Number+1), so a retry is never recorded without its copy. current says whether the pair was still at a.Gen: if not (a replay moved
// it on while the attempt was in flight), only a success changed its
// state, and the newer copy owns what comes next. If the lease was taken
// over meanwhile (it expired), the attempt is stored with outcome
// 'lost_lease', nothing else of the pair changes, and Record fails with
// webhook.ErrLeaseLost. A pair that is gone (purged) fails with
// webhook.ErrEventMissing and ErrNotFound. Record may be called again
// after an error (its answer was lost: a deadline, a dropped connection):
// if the first call committed, the second answers what it committed and
// changes nothing.
func (l *DeliveryLease) Record(ctx context.Context, a *webhook.Attempt) (gen int64, current bool, err error) {
	ctx, cancel := l.db.bound(ctx)
	defer cancel()
	l.tries++
	switch {
	case l.lane != "":
		gen, current, err = l.recordInOrder(ctx, a)
	case l.tries > 1:
		gen, current, err = l.recordAgain(ctx, a)
	case l.db.records != nil:
		gen, current, err = l.db.recordGrouped(ctx, l.id, l.eventID, l.owner, l.attempts, a)
	default:
		gen, current, err = recordAttempt(ctx, l.db.pool, l.id, l.eventID, l.owner, l.attempts, a)
	}
	if err == nil {
		l.held = false
	}
	return gen, current, err
}

// recordAgain is a try after the first, whose caller gave up on it: the
// first may still be running. It locks the pair's row first, in a
// transaction, so that the record's statement starts after the first
// committed (or rolled back) and sees its attempt row: answered as then,
// not recorded twice.
func (l *DeliveryLease) recordAgain(ctx context.Context, a *webhook.Attempt) (gen int64, current bool, err error) {
	err = pgx.BeginFunc(ctx, l.db.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, withDays(`SELECT 1 FROM deliveries WHERE event_id = $2 AND @day(event_id) AND id = $1 FOR UPDATE`, l.eventID),
			l.id, pgUUID(l.eventID)); err != nil {
			return fmt.Errorf("recording attempt: locking delivery: %w", err)
		}
		gen, current, err = recordAttempt(ctx, tx, l.id, l.eventID, l.owner, l.attempts, a)
		return err
	})
	return gen, current, err
}

// Release gives the lease back without recording anything. It does
// nothing for a lease not held (a delivered pair, read only) or taken over.
func (l *DeliveryLease) Release(ctx context.Context) error {
	if !l.held {
		return nil
	}
	ctx, cancel := l.db.bound(ctx)
	defer cancel()
	return l.releaseOn(ctx, l.db.lax)
}

// releaseOn is Release through q.
func (l *DeliveryLease) releaseOn(ctx context.Context, q querier) error {
	if l.outbox != 0 {
		return l.releaseHanded(ctx, q)
	}
	if _, err := q.Exec(ctx, withDays(`
		UPDATE deliveries SET lease_owner = NULL, lease_at = NULL, lease_until = NULL, lease_attempt = NULL
		WHERE event_id = $3 AND @day(event_id) AND id = $1 AND lease_owner = $2`, l.eventID), l.id, pgUUID(l.owner), pgUUID(l.eventID)); err != nil {
		return fmt.Errorf("releasing delivery lease: %w", err)
	}
	l.held = false
	return nil
}

// AttemptRecord records an attempt made without a claim of its own (by a
// tool, or a test): it claims the pair for a short lease, records a, and
// releases it. current says whether the pair was at a.Gen (only then did
// its state follow a.Outcome, or for a success), gen is the pair's
// generation afterwards. A pair in flight fails with a
// *webhook.LeaseBusyError, a delivered one records nothing and fails.
func (db *DB) AttemptRecord(ctx context.Context, a *webhook.Attempt) (gen int64, current bool, err error) {
	l, err := db.claim(ctx, uuid.New(), a.EventID, a.Route, a.Number, nil, time.Minute)
	if err != nil {
		return 0, false, err
	}
	if !l.held {
		return 0, false, fmt.Errorf("recording attempt: the pair is delivered already")
	}
	if err := l.flushTakeover(ctx); err != nil {
		return 0, false, err
	}
	return l.Record(ctx, a)
}

// querier runs statements: a pool, or a transaction (a test counts the
// locks a statement takes inside one).
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// recordAttempt inserts the attempt and, when the pair is still at the
// attempt's generation, moves it to a.Outcome (a retrying outcome to the
// next generation, due when its tier expires, with that generation's
// retry copy put in the outbox), releasing the lease, in one statement
// fenced by owner. It returns the pair's generation afterwards and
// whether the attempt's copy was current (the pair at a.Gen: a replay may
// have moved it on meanwhile). When the fence fails, the attempt is
// inserted as 'lost_lease' and nothing else changes: webhook.ErrLeaseLost;
// unless owner's attempt is recorded already (a try whose answer was
// lost), which is answered again as it was, changing nothing. Its
// statement has a grouped twin in recordBatch: change both.
func recordAttempt(ctx context.Context, q querier, deliveryID int64, eventID, owner uuid.UUID, claimAttempts int, a *webhook.Attempt) (int64, bool, error) {
	sql, args := recordAttemptQuery(deliveryID, eventID, owner, claimAttempts, a)
	return scanRecordAttempt(q.QueryRow(ctx, sql, args...), deliveryID)
}

// recordAttemptQuery is recordAttempt's statement and its arguments, for
// a caller that sends it with others (recordInOrder).
func recordAttemptQuery(deliveryID int64, eventID, owner uuid.UUID, claimAttempts int, a *webhook.Attempt) (string, []any) {
	var status *int
	if a.Status != 0 {
		status = &a.Status
	}
	var errText *string
	if a.Error != "" {
		errText = &a.Error
	}
	headers := a.ResponseHeaders
	if headers == nil && status != nil {
		headers = http.Header{}
	}
	// A delivered pair stays delivered: a late record of a failed duplicate
	// attempt must not make it look undelivered. A copy of another
	// generation (the pair moved on meanwhile: a replay) records its
	// attempt, and a success, but changes nothing else. The attempt belongs
	// to the pair's current series.
	return withDays(`
		WITH old AS (
			-- Locks the row and reads its generation as it is now (a replay
			-- may have moved it since this statement's snapshot); u joins it
			-- so that it runs first.
			SELECT id, gen FROM deliveries WHERE event_id = $16 AND @day(event_id) AND id = $1 FOR UPDATE
		), u AS (
			UPDATE deliveries d SET
				state            = CASE WHEN d.state = 'delivered' THEN 'delivered'
				                        WHEN d.gen = $6 OR $2 = 'delivered' THEN $2 ELSE d.state END,
				attempts         = d.attempts + 1,
				last_status      = $3,
				last_error       = $4,
				first_attempt_at = COALESCE(d.first_attempt_at, $5),
				last_attempt_at  = $5,
				delivered_at     = CASE WHEN $2 = 'delivered' AND d.delivered_at IS NULL THEN now() ELSE d.delivered_at END,
				gen              = CASE WHEN d.gen = $6 AND $2 = 'retrying' THEN d.gen + 1 ELSE d.gen END,
				due_at           = CASE WHEN d.gen = $6 AND $2 = 'retrying' THEN now() + $7::interval ELSE d.due_at END,
				lease_owner = NULL, lease_at = NULL, lease_until = NULL, lease_attempt = NULL,
				updated_at       = now()
			FROM old
			-- The holder's own lease; or none at all, when its claim was
			-- lost (committed without a WAL flush, then a Postgres crash):
			-- nobody else holds the pair, so the attempt is recorded as if
			-- held, not taken for a lost lease and POSTed again. Only while
			-- the pair's attempts are as the claim left them (no other
			-- claim took the pair over or recorded since), and not when this
			-- claim recorded already (done, below).
			WHERE d.event_id = $16 AND @day(d.event_id) AND d.id = old.id AND (d.lease_owner = $8 OR (d.lease_owner IS NULL AND d.attempts = $15 AND NOT EXISTS (
			      SELECT 1 FROM delivery_attempts a WHERE a.event_id = $16 AND @day(a.event_id) AND a.delivery_id = $1 AND a.claim = $8)))
			RETURNING d.gen, d.series, d.event_id, d.route, old.gen = $6 AS current, old.gen = $6 AND $2 = 'retrying' AS moved,
			          d.state AS state_now
		), alert AS (
			-- As recordBatch: a pair sent to the dead letters is reported,
			-- unless its event is the relay's own.
			SELECT hookrelay_emit('delivery.dead_lettered', u.route, NULL, jsonb_strip_nulls(jsonb_build_object(
			           'route', u.route, 'event_id', u.event_id, 'source', e.source, 'event_type', e.event_type,
			           'attempt', $9::int, 'status', $3::int, 'error', $4::text)))
			FROM u JOIN events e ON e.id = u.event_id
			WHERE u.state_now = 'dead' AND $2 = 'dead' AND u.current AND e.source <> '`+RelaySource+`' AND e.id = $16 AND @day(e.id)
		), done AS (
			-- This claim's attempt, recorded by an earlier try whose answer
			-- was lost (its caller gave up, the connection dropped after the
			-- commit): answered as then, nothing changes.
			SELECT a.gen_after AS gen, a.copy_current AS current FROM delivery_attempts a
			WHERE a.event_id = $16 AND @day(a.event_id) AND a.delivery_id = $1 AND a.claim = $8 AND a.outcome <> 'lost_lease'
			  AND NOT EXISTS (SELECT 1 FROM u)
			LIMIT 1
		), i AS (
			-- Not for a pair that is gone (purged): answered ErrNotFound.
			INSERT INTO delivery_attempts
				(delivery_id, event_id, attempt, started_at, duration_ms, status, response_headers, response_body, error, outcome,
				 series, claim, gen_after, copy_current, trace_id, route_version)
			SELECT $1, $16, $9, $5, $10, $3, $11, $12, $4,
			       CASE WHEN EXISTS (SELECT 1 FROM u) THEN $2 ELSE 'lost_lease' END,
			       COALESCE((SELECT series FROM u), (SELECT series FROM deliveries WHERE event_id = $16 AND @day(event_id) AND id = $1), 1),
			       $8, (SELECT gen FROM u), (SELECT current FROM u), NULLIF(substr($17::text, 4, 32), ''), $18::bigint
			WHERE NOT EXISTS (SELECT 1 FROM done) AND EXISTS (SELECT 1 FROM old)
		), r AS (
			-- The retry copy of the new generation, for the next attempt,
			-- commits with the record; the outbox relay publishes it to the
			-- tier of its delay (recordBatch does the same).
			INSERT INTO outbox (event_id, routing_key, route, gen, attempt, retry_ms, first_attempt_at, trace_parent)
			SELECT u.event_id, e.source || '.' || e.event_type, u.route, u.gen, $9 + 1, $13, $14, NULLIF($17::text, '')
			FROM u JOIN events e ON e.id = u.event_id
			WHERE u.moved AND e.id = $16 AND @day(e.id)
		)
		SELECT gen, current, true FROM u CROSS JOIN (SELECT count(*) FROM alert) reported
		UNION ALL SELECT gen, current, true FROM done
		UNION ALL SELECT 0, false, false WHERE NOT EXISTS (SELECT 1 FROM old)`, eventID), []any{
			deliveryID, string(a.Outcome), status, errText, a.StartedAt, a.Gen, a.RetryIn, pgUUID(owner),
			a.Number, a.Duration.Milliseconds(), headers, a.ResponseBody, a.RetryIn.Milliseconds(), seriesStart(a), claimAttempts,
			pgUUID(eventID), a.TraceParent, routeVersion(a)}
}

// scanRecordAttempt reads the answer of recordAttemptQuery's statement.
func scanRecordAttempt(row pgx.Row, deliveryID int64) (int64, bool, error) {
	var (
		gen            int64
		current, found bool
	)
	err := row.Scan(&gen, &current, &found)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, webhook.ErrLeaseLost
	}
	if err != nil {
		return 0, false, fmt.Errorf("recording attempt: %w", err)
	}
	if !found {
		return 0, false, fmt.Errorf("%w: recording attempt: delivery %d: %w", webhook.ErrEventMissing, deliveryID, ErrNotFound)
	}
	return gen, current, nil
}

// routeVersion is the route version an attempt records, nil for none (a
// route of config.yaml).
func routeVersion(a *webhook.Attempt) *int64 {
	if a.RouteVersion == 0 {
		return nil
	}
	v := a.RouteVersion
	return &v
}

// seriesStart is when a's attempt series began, as its retry copy carries
// it.
func seriesStart(a *webhook.Attempt) time.Time {
	if a.FirstAttemptAt.IsZero() {
		return a.StartedAt
	}
	return a.FirstAttemptAt
}

// DeliveryGet returns the state and attempt count of one pair, or
// ErrNotFound.
func (db *DB) DeliveryGet(ctx context.Context, eventID uuid.UUID, route string) (webhook.DeliveryState, int, error) {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	var (
		state    string
		attempts int
	)
	err := db.pool.QueryRow(ctx, `SELECT state, attempts FROM deliveries WHERE event_id = $1 AND route = $2`,
		eventID, route).Scan(&state, &attempts)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", 0, ErrNotFound
	}
	if err != nil {
		return "", 0, fmt.Errorf("reading delivery: %w", err)
	}
	return webhook.DeliveryState(state), attempts, nil
}

// RouteStats is what Postgres knows of one route's deliveries.
type RouteStats struct {
	Route string
	// Pending and Retrying count the pairs in those states; Undelivered
	// is their sum.
	Pending, Retrying, Undelivered int64
	// OldestUndelivered is the age of the oldest such pair.
	OldestUndelivered time.Duration
	// Dead counts pairs in the dead-letter state.
	Dead int64
	// Waiting counts the pairs parked behind an earlier event of their
	// resource (a route with ordering fifo), of WaitingResources
	// resources; LongestWait is the age of the oldest of them.
	Waiting, WaitingResources int64
	LongestWait               time.Duration
}

// RouteStatsList reports undelivered and dead pairs per route (the
// dispatcher's gauges and the routes listing). Routes with none are
// absent.
func (db *DB) RouteStatsList(ctx context.Context) ([]RouteStats, error) {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	rows, err := db.pool.Query(ctx, `
		SELECT route,
		       count(*) FILTER (WHERE state = 'pending'),
		       count(*) FILTER (WHERE state = 'retrying'),
		       COALESCE(EXTRACT(EPOCH FROM now() - min(created_at) FILTER (WHERE state IN ('pending', 'retrying'))), 0)::float8,
		       count(*) FILTER (WHERE state = 'dead'),
		       count(*) FILTER (WHERE due_at = `+parkedAt+`),
		       count(DISTINCT lane) FILTER (WHERE due_at = `+parkedAt+`),
		       COALESCE(EXTRACT(EPOCH FROM now() - min(created_at) FILTER (WHERE due_at = `+parkedAt+`)), 0)::float8
		FROM deliveries
		WHERE state IN ('pending', 'retrying', 'dead')
		GROUP BY route`)
	if err != nil {
		return nil, fmt.Errorf("reading route stats: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (RouteStats, error) {
		var s RouteStats
		var age, wait float64
		err := row.Scan(&s.Route, &s.Pending, &s.Retrying, &age, &s.Dead, &s.Waiting, &s.WaitingResources, &wait)
		s.Undelivered = s.Pending + s.Retrying
		s.OldestUndelivered = time.Duration(age * float64(time.Second))
		s.LongestWait = time.Duration(wait * float64(time.Second))
		return s, err
	})
}

// pgUUID passes a uuid as the 16 bytes pgx encodes directly. A uuid.UUID
// is a driver.Valuer: pgx would turn it into its text form and parse that
// back, planning the encoding anew for each call, which showed as several
// per cent of the dispatcher's CPU at low rates.
func pgUUID(id uuid.UUID) [16]byte { return id }
