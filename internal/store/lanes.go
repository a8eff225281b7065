package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/jackc/pgx/v5"
)

// Lanes: a route with ordering fifo delivers the events of one resource
// one at a time, in the order their pairs were made (docs/ordering.md).
// A pair's lane is its event's source and resource, set when the pair is
// made (laneSQL). The lane's head is its lowest-id pair still owed:
// pending, retrying, or dead (a dead head blocks its lane until an
// operator requeues or skips it, unless the route's on_dead is skip,
// whose dead pairs leave their lane). Only the head is delivered, and
// only while no other pair of the lane is in flight. A copy of any other
// pair parks it (due_at infinity: the reconciler leaves it alone), in the
// one statement that found it was not its turn, and is acked. The record
// that frees the lane (its head delivered, or dead and skipped) sends the
// new head a copy of a new generation through the outbox, in the
// record's transaction, whether the head is parked or not: a head whose
// copy was on its way meanwhile is parked by nobody, since the park is
// fenced by the generation the copy carries, and the new generation makes
// that copy stale. So no wake-up is lost, without a lock between the two.
//
// Pair ids come from one sequence, taken when the pair is made; an
// event's pair is made in the statement that stores the event, before the
// sender gets its 200. So an event sent after another's 200 has the
// higher id, on every route: the lane's order is the order of acceptance.

// laneSQL is the lane of a pair made for the event whose row is in scope:
// "<source> <resource>", NULL when the event carries no resource. Source
// names are identifiers: no space.
const laneSQL = `CASE WHEN ordering_resource <> '' THEN source || ' ' || ordering_resource END`

// laneLockSQL takes the transaction lock of route $1's lane $2: two
// operators' skips of one lane take turns.
const laneLockSQL = `SELECT pg_advisory_xact_lock(hashtextextended($1 || E'\n' || $2, 41))`

// laneOwed is the condition on a pair of a lane still owed.
const laneOwed = `state IN ('pending', 'retrying', 'dead')`

// parkedAt is the due_at of a parked pair.
const parkedAt = "'infinity'"

// laneNextSQL moves route $1's lane $2 on once it is freed (its head
// delivered, or dead and skipped), in that transaction, deleting first the
// held outbox row $5 (0: none) of the lease whose record freed it. The
// new head, when it is pending or retrying:
//
//   - is handed over to owner $3 (HandOver; NULL: no hand-over) when no
//     other holder has it and it is due or parked (laneHand): claimed
//     with a lease of $4 at a new generation (its copy on its way, or the
//     one that parked it, is stale), its copy
//     held in the outbox until that lease runs out, the safety net for a
//     holder that stops before it records. A lease $3 holds already is
//     taken again: a record tried again after its answer was lost hands
//     the same head over again.
//   - else, when parked and not in flight, gets a copy of a new
//     generation, due now (a wake-up);
//   - else, when not in flight, is only touched: a claim that found it was
//     not its turn, and is about to park it, sees the row changed and
//     looks again (laneTurnSQL), so it is never parked after the wake-up
//     that would have sent it a copy. A dead head blocks, and one in
//     flight goes on.
//
// Its copy carries its series' next attempt number. The SET expressions
// run on the row as it is when its lock is taken (a concurrent park that
// committed meanwhile included), so parked is decided on the newest row;
// a wake-up is told from a touch by due_at, which only it sets to this
// transaction's now(). It returns the head handed over, no row otherwise.
const laneNextSQL = `
	WITH del AS (
		DELETE FROM outbox WHERE id = $5 AND $5 <> 0
	), head AS (
		SELECT id, event_id, state, series FROM deliveries
		WHERE route = $1 AND lane = $2 AND ` + laneOwed + `
		ORDER BY id LIMIT 1
	), n AS MATERIALIZED (
		-- (Materialized: its attempt is read once, not per use.)
		-- The head's state is checked here, not on d: a state in d's
		-- conditions lets the planner take an index of undelivered pairs
		-- (with no statistics yet, a fresh day) and read them all.
		SELECT head.id, head.event_id,
		       (SELECT COALESCE(max(a.attempt), 0) + 1 FROM delivery_attempts a
		        WHERE a.event_id = head.event_id AND a.delivery_id = head.id AND a.series = head.series) AS attempt
		FROM head WHERE head.state IN ('pending', 'retrying')
	), u AS (
		UPDATE deliveries d SET
			gen           = CASE WHEN ` + laneHand + ` OR d.due_at = ` + parkedAt + ` THEN d.gen + 1 ELSE d.gen END,
			due_at        = CASE WHEN ` + laneHand + ` OR d.due_at = ` + parkedAt + ` THEN now() ELSE d.due_at END,
			lease_owner   = CASE WHEN ` + laneHand + ` THEN $3 ELSE d.lease_owner END,
			lease_at      = CASE WHEN ` + laneHand + ` THEN now() ELSE d.lease_at END,
			lease_until   = CASE WHEN ` + laneHand + ` THEN now() + $4::interval ELSE d.lease_until END,
			lease_attempt = CASE WHEN ` + laneHand + ` THEN n.attempt ELSE d.lease_attempt END,
			updated_at    = clock_timestamp()
		FROM n
		WHERE d.event_id = n.event_id AND d.route = $1 AND d.id = n.id
		  AND (` + laneHand + ` OR d.lease_owner IS NULL OR d.lease_until <= now())
		RETURNING d.id, d.event_id, d.gen, d.state, d.attempts, n.attempt,
		          COALESCE(d.lease_owner = $3, false) AS hand, d.due_at = now() AS sent
	), e AS (
		SELECT e.id, e.source, e.event_type, e.content_type, e.body, e.received_at, COALESCE(e.trace_parent, '') AS trace_parent
		FROM events e WHERE e.id = (SELECT event_id FROM u WHERE u.sent)
	), o AS (
		INSERT INTO outbox (event_id, routing_key, route, gen, attempt, next_try_at)
		SELECT u.event_id, e.source || '.' || e.event_type, $1, u.gen, u.attempt,
		       CASE WHEN u.hand THEN now() + $4::interval ELSE now() END
		FROM u JOIN e ON e.id = u.event_id
		RETURNING id
	)
	SELECT u.id, u.event_id, u.gen, u.state, u.attempts, u.attempt, (SELECT id FROM o),
	       e.source, e.event_type, e.content_type, e.body, e.received_at, e.trace_parent
	FROM u JOIN e ON e.id = u.event_id
	WHERE u.hand`

// laneHand is laneNextSQL's condition on the head row d (as it was) for a
// hand-over: asked for, no other holder has the head, and it is due or
// parked (a retrying head whose retry copy waits out its backoff in a
// tier, on a route made fifo meanwhile, is left to that copy).
const laneHand = `($3::uuid IS NOT NULL AND (d.lease_owner IS NULL OR d.lease_owner = $3) AND (d.due_at <= now() OR d.due_at = ` + parkedAt + `))`

// laneTurnSQL reads whether the pair of event $1 on route $2 may go now
// (it has no lane, or it is its lane's head and no other pair of the lane
// is in flight) and, when not, parks it: only while the copy ($3) is of
// its generation, it is owed and not in flight elsewhere, and its row is
// as read. It answers the pair's id and lane, whether it was its turn,
// whether it should have been parked, and whether it is parked now.
var laneTurnSQL = `
	WITH pair AS (
		SELECT d.id, d.lane, d.state, d.gen, d.due_at, d.lease_owner, d.lease_until, d.updated_at, d.attempts,
		       -- Not owed (delivered, stale, or out of its lane): no head
		       -- to wait for; claimOn answers it.
		       -- A stale copy: nothing to wait for either.
		       d.lane IS NULL OR d.gen <> $3 OR NOT d.` + laneOwed + ` OR (
		           (SELECT h.id FROM deliveries h WHERE h.route = $2 AND h.lane = d.lane AND h.` + laneOwed + ` ORDER BY h.id LIMIT 1) = d.id
		           -- In flight: a live lease, whatever the state (no state
		           -- here, so that only the index of leased pairs serves).
		           AND NOT EXISTS (SELECT 1 FROM deliveries o WHERE o.route = $2 AND o.lane = d.lane AND o.lease_owner IS NOT NULL
		                           AND o.id <> d.id AND o.lease_until > now())) AS turn
		FROM deliveries d WHERE d.event_id = $1 AND @day(d.event_id) AND d.route = $2
	), me AS (
		SELECT pair.*, NOT turn AND gen = $3 AND state IN ('pending', 'retrying') AS waits,
		       due_at <> ` + parkedAt + ` AND (lease_owner IS NULL OR lease_until <= now()) AS parkable
		FROM pair
	), park AS (
		-- Only while the row is as read (checked again after a concurrent
		-- change: a wake-up touches it). No state on d: it lets the
		-- planner take an index of undelivered pairs and read them all.
		UPDATE deliveries d SET due_at = ` + parkedAt + `, updated_at = clock_timestamp()
		FROM me
		WHERE d.event_id = $1 AND @day(d.event_id) AND d.route = $2 AND me.waits AND me.parkable
		  AND d.gen = $3 AND d.updated_at = me.updated_at
		RETURNING d.id
	)
	SELECT me.id, me.lane, me.turn, me.waits AND me.parkable, EXISTS (SELECT 1 FROM park) OR (me.waits AND me.due_at = ` + parkedAt + `),
	       me.state, me.gen, me.attempts
	FROM me`

// DeliveryClaimInOrder is DeliveryClaim for a route that delivers in order
// (ordering fifo). A pair whose event has a resource is claimed only when
// it is its lane's head and no other pair of the lane is in flight;
// otherwise it is parked, and the claim fails with webhook.ErrWaiting:
// the copy is done with, and the record that frees the lane sends the
// pair a new one. A pair whose event has no resource, or that left its
// lane, is claimed as by DeliveryClaim, and so is a copy that is stale, of
// a final pair, or of a pair in flight elsewhere (its answer is
// DeliveryClaim's). skipDead says the route's dead pairs leave their
// lane (on_dead skip): Record then frees the lane on a dead outcome too.
//
// A dead pair is claimed whatever its place: its copy is a dead letter an
// operator moved back, which restarts it.
func (db *DB) DeliveryClaimInOrder(ctx context.Context, owner, eventID uuid.UUID, route string, attempt int, gen int64, ttl time.Duration, skipDead bool) (*DeliveryLease, error) {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	for range 5 {
		var (
			id, pairGen         int64
			lane                *string
			turn, waits, parked bool
			state               string
			attempts            int
		)
		err := db.lax.QueryRow(ctx, withDays(laneTurnSQL, eventID), pgUUID(eventID), route, gen).Scan(&id, &lane, &turn, &waits, &parked, &state, &pairGen, &attempts)
		if errors.Is(err, pgx.ErrNoRows) {
			// No row for the pair yet: create it, then look again.
			if err := deliveryCreate(ctx, db, db.lax, eventID, route); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("taking delivery lease: reading the pair's turn: %w", err)
		}
		if parked {
			return nil, webhook.ErrWaiting
		}
		if st := webhook.DeliveryState(state); pairGen != gen || st == webhook.StateDelivered || st == webhook.StateStale {
			// A stale copy, or a final pair: answered as claimOn would,
			// read and not claimed, without its statement.
			return &DeliveryLease{db: db, id: id, eventID: eventID, owner: owner, state: st, gen: pairGen, attempts: attempts}, nil
		}
		if waits && !turn {
			// Not its turn, parkable, yet not parked: the row changed since
			// it was read (a wake-up touched it, its lane freed): look
			// again. (One in flight elsewhere is not parkable: claimOn
			// answers it busy.)
			continue
		}
		l, err := db.claimOn(ctx, db.lax, owner, eventID, route, attempt, &gen, ttl)
		if err != nil {
			return nil, err
		}
		if err := l.flushTakeover(ctx); err != nil {
			return nil, err
		}
		if lane != nil {
			l.route, l.lane, l.skipDead = route, *lane, skipDead
		}
		return l, nil
	}
	return nil, errors.New("claiming delivery: the pair's turn changed under every look")
}

// recordInOrder is Record of a lease claimed in order: in one
// transaction, sent in one round trip, the attempt's record, the pair's
// leaving its lane when it went dead on a route whose dead pairs do not
// block, the deletion of the lease's held copy (a lease handed over), and,
// when the outcome frees the lane, its move on (laneNextSQL): its next
// head handed over to this holder when HandOver asked for it, else sent a
// copy. The statements after the record run whatever it answers: when the
// lease was lost (its attempt stored as lost_lease, the pair unchanged),
// the lane's head is still the pair, held by another, and nothing moves.
func (l *DeliveryLease) recordInOrder(ctx context.Context, a *webhook.Attempt) (gen int64, current bool, err error) {
	conn, err := l.db.pool.Acquire(ctx)
	if err != nil {
		return 0, false, fmt.Errorf("recording attempt: %w", err)
	}
	defer l.db.endTx(ctx, conn)
	freed := a.Outcome == webhook.StateDelivered || a.Outcome == webhook.StateStale
	skip := a.Outcome == webhook.StateDead && l.skipDead
	b := &pgx.Batch{}
	b.Queue(`BEGIN`)
	if l.tries > 1 {
		// As recordAgain: after the first try, if it is still running.
		b.Queue(withDays(`SELECT 1 FROM deliveries WHERE event_id = $2 AND @day(event_id) AND id = $1 FOR UPDATE`, l.eventID),
			l.id, pgUUID(l.eventID))
	}
	sql, args := recordAttemptQuery(l.id, l.eventID, l.owner, l.attempts, a)
	b.Queue(sql, args...)
	if skip {
		b.Queue(withDays(`UPDATE deliveries SET lane = NULL WHERE event_id = $2 AND @day(event_id) AND id = $1 AND state = 'dead'`, l.eventID),
			l.id, pgUUID(l.eventID))
	}
	var owner *[16]byte
	if l.handOver > 0 {
		o := pgUUID(l.owner)
		owner = &o
	}
	if freed || skip {
		b.Queue(laneNextSQL, l.route, l.lane, owner, l.handOver, l.outbox)
	} else if l.outbox != 0 {
		b.Queue(`DELETE FROM outbox WHERE id = $1`, l.outbox)
	}
	b.Queue(`COMMIT`)
	br := conn.SendBatch(ctx, b)
	var (
		recErr error
		next   *DeliveryLease
		msg    webhook.Message
	)
	err = func() error {
		if _, err := br.Exec(); err != nil { // BEGIN
			return fmt.Errorf("recording attempt: %w", err)
		}
		if l.tries > 1 {
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("recording attempt: locking delivery: %w", err)
			}
		}
		gen, current, recErr = scanRecordAttempt(br.QueryRow(), l.id)
		if recErr != nil && !errors.Is(recErr, webhook.ErrLeaseLost) {
			return recErr // the transaction failed: what follows is not run
		}
		if skip {
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("recording attempt: skipping the dead pair: %w", err)
			}
		}
		if freed || skip {
			var err error
			if next, msg, err = l.scanNext(br.QueryRow()); err != nil {
				return err
			}
		} else if l.outbox != 0 {
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("recording attempt: deleting the held copy: %w", err)
			}
		}
		if _, err := br.Exec(); err != nil { // COMMIT
			return fmt.Errorf("recording attempt: committing: %w", err)
		}
		return nil
	}()
	if cerr := br.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("recording attempt: %w", cerr)
	}
	if err != nil {
		return 0, false, err
	}
	// Committed. When the lease was lost, its lost_lease attempt is
	// stored, and a head handed over meanwhile (the pair delivered by its
	// new holder) goes with the error, to be given back.
	l.next, l.nextMsg = next, msg
	return gen, current, recErr
}

// scanNext reads laneNextSQL's answer: the head handed over to l's
// holder, nil when none was.
func (l *DeliveryLease) scanNext(row pgx.Row) (*DeliveryLease, webhook.Message, error) {
	var (
		n          = &DeliveryLease{db: l.db, owner: l.owner, held: true, route: l.route, lane: l.lane, skipDead: l.skipDead}
		m          = webhook.Message{Route: l.route}
		state      string
		receivedAt time.Time
		eventID    [16]byte
	)
	err := row.Scan(&n.id, &eventID, &n.gen, &state, &n.attempts, &m.Attempt, &n.outbox,
		&m.Source, &m.EventType, &m.ContentType, &m.Body, &receivedAt, &m.EventTraceParent)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, m, nil
	}
	if err != nil {
		return nil, m, fmt.Errorf("recording attempt: moving the resource on: %w", err)
	}
	n.eventID, n.state = eventID, webhook.DeliveryState(state)
	m.EventID, m.Gen, m.OutboxID, m.ReceivedAt = eventID, n.gen, n.outbox, receivedAt
	m.RoutingKey = m.Source + "." + m.EventType
	// The delivery continues its event's trace, as an event's first copy.
	m.TraceParent = m.EventTraceParent
	return n, m, nil
}

// HandOver asks Record, when its outcome frees the lane (a lease claimed
// in order), to claim the lane's next head for the same holder, with a
// lease of ttl, instead of sending it a copy: Next then returns it. The
// head's copy waits in the outbox until that lease runs out, for a holder
// that stops before it records.
func (l *DeliveryLease) HandOver(ttl time.Duration) {
	if l.lane != "" {
		l.handOver = ttl
	}
}

// Next returns the lease and message of the lane's next head that Record
// handed over (HandOver), once: ok is false when it handed none. The
// holder delivers it as if its copy had come (Record it, or Release it:
// its copy then goes at once).
func (l *DeliveryLease) Next() (next *DeliveryLease, msg webhook.Message, ok bool) {
	next, msg = l.next, l.nextMsg
	l.next, l.nextMsg = nil, webhook.Message{}
	return next, msg, next != nil
}

// releaseHanded is Release of a lease handed over: the lease is given back
// and its held copy made due at once, in one statement.
func (l *DeliveryLease) releaseHanded(ctx context.Context, q querier) error {
	if _, err := q.Exec(ctx, withDays(`
		WITH r AS (
			UPDATE deliveries SET lease_owner = NULL, lease_at = NULL, lease_until = NULL, lease_attempt = NULL
			WHERE event_id = $3 AND @day(event_id) AND id = $1 AND lease_owner = $2
		)
		UPDATE outbox SET next_try_at = now() WHERE id = $4 AND attempts = 0 AND next_try_at > now()`, l.eventID),
		l.id, pgUUID(l.owner), pgUUID(l.eventID), l.outbox); err != nil {
		return fmt.Errorf("releasing delivery lease: %w", err)
	}
	l.held = false
	return nil
}

// LaneHead is a resource of a fifo route whose events wait: its head (the
// lowest-id pair still owed, which goes first) and how many wait behind it.
type LaneHead struct {
	// Source and Resource name the lane.
	Source, Resource string
	// Event is the head's event, in State after Attempts attempts.
	Event    uuid.UUID
	State    webhook.DeliveryState
	Attempts int
	// Waiting pairs are parked behind it, the oldest made Since.
	Waiting int64
	Since   time.Time
}

// LaneHeads lists up to limit resources of route that hold events back:
// those with events parked behind their head, and those whose head is
// dead (on_dead block), the longest waiting first.
func (db *DB) LaneHeads(ctx context.Context, route string, limit int) ([]LaneHead, error) {
	ctx, cancel := db.boundOps(ctx)
	defer cancel()
	rows, err := db.pool.Query(ctx, `
		WITH held AS (
			SELECT lane, count(*) FILTER (WHERE due_at = `+parkedAt+`) AS waiting,
			       min(created_at) FILTER (WHERE due_at = `+parkedAt+`) AS since,
			       min(created_at) FILTER (WHERE state = 'dead') AS dead_since
			FROM deliveries
			WHERE route = $1 AND lane IS NOT NULL AND (due_at = `+parkedAt+` OR state = 'dead') AND `+laneOwed+`
			GROUP BY lane
			ORDER BY COALESCE(min(created_at) FILTER (WHERE due_at = `+parkedAt+`), min(created_at))
			LIMIT $2
		)
		SELECT held.lane, h.event_id, h.state, h.attempts, held.waiting, COALESCE(held.since, held.dead_since)
		FROM held CROSS JOIN LATERAL (
			SELECT d.event_id, d.state, d.attempts FROM deliveries d
			WHERE d.route = $1 AND d.lane = held.lane AND d.`+laneOwed+`
			ORDER BY d.id LIMIT 1
		) h
		WHERE held.waiting > 0 OR h.state = 'dead'`, route, limit)
	if err != nil {
		return nil, fmt.Errorf("reading the waiting resources of route %s: %w", route, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (LaneHead, error) {
		var (
			h     LaneHead
			lane  string
			state string
		)
		err := row.Scan(&lane, &h.Event, &state, &h.Attempts, &h.Waiting, &h.Since)
		h.Source, h.Resource, _ = strings.Cut(lane, " ")
		h.State = webhook.DeliveryState(state)
		return h, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading the waiting resources of route %s: %w", route, err)
	}
	return out, nil
}

// LaneSkipAudited takes the dead pair of event on route out of its lane,
// so the resource's next event goes (its dead letter stays, for requeue
// or drop), writing e to the audit log in the same transaction. It fails
// with ErrNotFound when the pair is not dead on a lane.
func (db *DB) LaneSkipAudited(ctx context.Context, route string, event uuid.UUID, e *AuditEntry) (*LaneHead, error) {
	var h *LaneHead
	err := db.audited(ctx, e, func(tx pgx.Tx) (map[string]any, error) {
		var lane *string
		err := tx.QueryRow(ctx, withDays(`SELECT lane FROM deliveries WHERE event_id = $1 AND @day(event_id) AND route = $2`, event),
			pgUUID(event), route).Scan(&lane)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && lane == nil) {
			return nil, fmt.Errorf("event %s on route %s: no pair on a resource's lane: %w", event, route, ErrNotFound)
		}
		if err != nil {
			return nil, fmt.Errorf("skipping a dead event: %w", err)
		}
		if _, err := tx.Exec(ctx, laneLockSQL, route, *lane); err != nil {
			return nil, fmt.Errorf("skipping a dead event: taking the lane's lock: %w", err)
		}
		tag, err := tx.Exec(ctx, withDays(`
			UPDATE deliveries SET lane = NULL, updated_at = now()
			WHERE event_id = $1 AND @day(event_id) AND route = $2 AND state = 'dead' AND lane IS NOT NULL`, event),
			pgUUID(event), route)
		if err != nil {
			return nil, fmt.Errorf("skipping a dead event: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return nil, fmt.Errorf("event %s on route %s is not dead: only a dead event is skipped: %w", event, route, ErrNotFound)
		}
		if _, err := tx.Exec(ctx, laneNextSQL, route, *lane, nil, time.Duration(0), int64(0)); err != nil {
			return nil, fmt.Errorf("skipping a dead event: sending the resource's next event: %w", err)
		}
		h = &LaneHead{Event: event, State: webhook.StateDead}
		h.Source, h.Resource, _ = strings.Cut(*lane, " ")
		return map[string]any{"source": h.Source, "resource": h.Resource}, nil
	})
	return h, err
}

// LanesUnpark makes the parked pairs of routes due again: routes that no
// longer deliver in order (ordering changed, or a deleted route whose
// backlog goes to its dead letters), on which no record will wake them.
// The reconciler then sends them (a margin after). It returns how many.
func (db *DB) LanesUnpark(ctx context.Context, routes []string) (int64, error) {
	if len(routes) == 0 {
		return 0, nil
	}
	ctx, cancel := db.bound(ctx)
	defer cancel()
	tag, err := db.pool.Exec(ctx, `
		UPDATE deliveries SET due_at = now(), updated_at = now()
		WHERE route = ANY($1) AND state IN ('pending', 'retrying') AND due_at = `+parkedAt, routes)
	if err != nil {
		return 0, fmt.Errorf("making the parked pairs of routes no longer in order due: %w", err)
	}
	return tag.RowsAffected(), nil
}
