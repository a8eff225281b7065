package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/group"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/jackc/pgx/v5/pgconn"
)

// Grouped claims and records. A dispatcher's concurrent deliveries each
// make two small writes (the claim and the record), and each such write,
// alone, is a statement and a commit: its WAL flush, its round trip, its
// executor start-up. GroupDeliveries gathers the claims of concurrent
// deliveries into one statement, and their records into another (see
// package group for when a batch forms: a lone call goes at once, alone).
//
// A batch changes each pair exactly as the single statement would (the
// SQL below is the single statements' over unnest arrays), with the same
// fences: a claim takes only a free or expired lease, a record writes only
// under its own lease. Rows are locked in id order, so two batches that
// share pairs (a duplicate message meeting a live lease) wait for each
// other instead of deadlocking. When Postgres refuses a batch's statement
// (a deadlock all the same), the
// batch's calls are made again one by one by their callers, so one pair's
// problem is its own; any other failure (Postgres unreachable, the query
// timeout) is every call's, and each caller retries as it would a single
// statement.

// GroupDeliveries makes DeliveryClaim and DeliveryLease.Record group
// concurrent calls, up to size per statement; size 1 leaves every call
// alone. observe, when set, is told the size of each batch ("claim" or
// "record"). Call it once, before the first delivery.
func (db *DB) GroupDeliveries(size int, observe func(kind string, n int)) {
	if size <= 1 {
		return
	}
	obs := func(kind string) func(int) {
		if observe == nil {
			return nil
		}
		return func(n int) { observe(kind, n) }
	}
	// One statement of each kind in Postgres at a time: while it runs, the
	// next batch gathers. (Two at a time, as ingest does, split the same
	// load into smaller batches and measured no faster: the two kinds
	// already overlap each other.) Each batch runs under the query
	// timeout alone, not under a caller's context: a delivery that gives
	// up must not abort the others' writes half-way.
	db.claims = group.New(context.Background(), group.Options{Size: size, Committers: 1, Observe: obs("claim")}, db.claimBatch)
	db.records = group.New(context.Background(), group.Options{Size: size, Committers: 1, Observe: obs("record")}, db.recordBatch)
}

// claimItem is one DeliveryClaim in a batch.
type claimItem struct {
	owner, eventID uuid.UUID
	route          string
	attempt        int
	gen            int64
	ttl            time.Duration
}

// claimOut is its result. alone says the batch did not settle it (no
// delivery row yet, the same pair twice in the batch, the statement
// refused): its caller claims on its own.
type claimOut struct {
	lease *DeliveryLease
	err   error
	alone bool
}

// claimGrouped is DeliveryClaim through the batcher.
func (db *DB) claimGrouped(ctx context.Context, it claimItem) (*DeliveryLease, error) {
	out, err := db.claims.Do(ctx, it)
	if err != nil {
		return nil, err
	}
	if out.alone {
		return db.claim(ctx, it.owner, it.eventID, it.route, it.attempt, &it.gen, it.ttl)
	}
	return out.lease, out.err
}

type pairKey struct {
	eventID uuid.UUID
	route   string
}

// claimBatch claims items in one statement: claim's statement over unnest
// arrays, per row. The two are kept apart on purpose and must change
// together (TestGroupedClaimsSettleEachPairAsAlone holds the grouped one to
// the single one's outcomes): a lone claim through this statement cost
// Postgres about 15% more CPU at 200 events/s (unnest, the sort for the
// lock order), where every claim is alone.
func (db *DB) claimBatch(ctx context.Context, items []claimItem) ([]claimOut, error) {
	out := make([]claimOut, len(items))
	if len(items) == 1 {
		it := items[0]
		out[0].lease, out[0].err = db.claim(ctx, it.owner, it.eventID, it.route, it.attempt, &it.gen, it.ttl)
		return out, nil
	}
	ctx, cancel := db.bound(ctx)
	defer cancel()
	return db.claimBatchOn(ctx, db.lax, items, out)
}

// claimBatchOn is claimBatch's statement through q, for more than one
// item.
func (db *DB) claimBatchOn(ctx context.Context, q querier, items []claimItem, out []claimOut) ([]claimOut, error) {
	// One row per pair: a second claim of a pair in the same batch would
	// join its row twice. It claims alone, after this one.
	index := make(map[pairKey]int, len(items))
	var (
		eventIDs, owners [][16]byte
		routes           []string
		attempts         []int32
		gens, ttls       []int64
	)
	for i, it := range items {
		k := pairKey{it.eventID, it.route}
		if _, dup := index[k]; dup {
			out[i].alone = true
			continue
		}
		index[k] = i
		eventIDs = append(eventIDs, pgUUID(it.eventID))
		routes = append(routes, it.route)
		owners = append(owners, pgUUID(it.owner))
		attempts = append(attempts, int32(it.attempt))
		gens = append(gens, it.gen)
		ttls = append(ttls, it.ttl.Milliseconds())
	}
	rows, err := q.Query(ctx, withDays(`
		WITH input AS (
			SELECT * FROM unnest($1::uuid[], $2::text[], $3::uuid[], $4::int[], $5::bigint[], $6::bigint[])
			       AS t(event_id, route, owner, attempt, copy_gen, ttl_ms)
		), prev AS (
			SELECT d.id, d.state, d.gen, d.lease_owner, d.lease_at, d.lease_until, d.lease_attempt, d.attempts,
			       i.event_id, i.route, i.owner, i.attempt, i.copy_gen, i.ttl_ms,
			       d.lease_owner IS NOT NULL AND d.lease_owner <> i.owner AS over
			FROM input i JOIN deliveries d ON d.event_id = i.event_id AND d.route = i.route
			WHERE d.event_id = ANY($1::uuid[]) AND @day(d.event_id) -- as recordBatch's old: probes, not scans
			ORDER BY d.id
			FOR UPDATE OF d
		), u AS (
			UPDATE deliveries d SET
				lease_owner   = p.owner,
				lease_at      = now(),
				lease_until   = now() + p.ttl_ms * interval '1 millisecond',
				lease_attempt = p.attempt,
				attempts      = d.attempts + CASE WHEN p.over THEN 1 ELSE 0 END,
				last_status   = CASE WHEN p.over THEN NULL ELSE d.last_status END,
				last_error    = CASE WHEN p.over THEN $7 ELSE d.last_error END,
				updated_at    = now()
			FROM prev p
			WHERE d.event_id = ANY($1::uuid[]) AND @day(d.event_id) AND d.event_id = p.event_id AND d.id = p.id
			  AND p.state NOT IN ('delivered', 'stale') AND p.gen = p.copy_gen
			  AND (p.lease_until IS NULL OR p.lease_until <= now() OR p.lease_owner = p.owner)
			RETURNING d.id, d.event_id, d.state, d.gen, d.series, p.over, COALESCE(p.lease_owner = p.owner, false) AS again,
			          p.lease_at, p.lease_until, p.lease_attempt, d.attempts
		), expired AS (
			INSERT INTO delivery_attempts (delivery_id, event_id, attempt, started_at, duration_ms, error, outcome, series)
			SELECT id, event_id, COALESCE(lease_attempt, 0), COALESCE(lease_at, lease_until), 0, $7, 'lease_expired', series
			FROM u WHERE over
		)
		SELECT p.event_id, p.route, u.id IS NOT NULL, p.id, COALESCE(u.state, p.state), COALESCE(u.gen, p.gen),
		       COALESCE(u.over, false), COALESCE(u.again, false),
		       CASE WHEN u.id IS NULL THEN COALESCE(EXTRACT(EPOCH FROM p.lease_until - now()), 0) ELSE 0 END::float8,
		       COALESCE(u.attempts, p.attempts)
		FROM prev p LEFT JOIN u ON u.id = p.id`, claimIDs(items)...),
		eventIDs, routes, owners, attempts, gens, ttls, leaseExpiredError)
	if err != nil {
		return refusedAlone(out, err, func(o *claimOut) { o.alone = true })
	}
	seen := make([]bool, len(items))
	for rows.Next() {
		var (
			k                        pairKey
			eventID                  [16]byte
			claimed, tookOver, again bool
			id, gen                  int64
			state                    string
			remaining                float64
			attempts                 int
		)
		if err := rows.Scan(&eventID, &k.route, &claimed, &id, &state, &gen, &tookOver, &again, &remaining, &attempts); err != nil {
			rows.Close()
			return nil, fmt.Errorf("taking delivery leases: %w", err)
		}
		k.eventID = eventID
		i, ok := index[k]
		if !ok {
			rows.Close()
			return nil, errors.New("taking delivery leases: postgres answered a pair it was not asked for")
		}
		seen[i] = true
		it := items[i]
		l := &DeliveryLease{db: db, id: id, eventID: it.eventID, owner: it.owner, held: claimed, state: webhook.DeliveryState(state), gen: gen, attempts: attempts, TookOver: tookOver, again: again}
		switch {
		case claimed, l.state == webhook.StateDelivered, l.state == webhook.StateStale, it.gen != gen:
			out[i].lease = l
		case remaining > 0:
			out[i].err = &webhook.LeaseBusyError{Remaining: time.Duration(remaining * float64(time.Second))}
		default:
			out[i].alone = true // the lease expired meanwhile: as claim does, try again
		}
	}
	if err := rows.Err(); err != nil {
		return refusedAlone(out, err, func(o *claimOut) { o.alone = true })
	}
	for i := range items {
		if !seen[i] {
			out[i].alone = true // no delivery row yet (or a duplicate): claim creates it
		}
	}
	return out, nil
}

// refusedAlone answers a batch whose statement failed: when Postgres
// refused it (a *pgconn.PgError: a constraint, a deadlock), every call is
// made again alone by its caller, so the one that caused it fails on its
// own; any other failure is the whole batch's.
func refusedAlone[O any](out []O, err error, alone func(*O)) ([]O, error) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return nil, fmt.Errorf("grouped delivery statement: %w", err)
	}
	for i := range out {
		alone(&out[i])
	}
	return out, nil
}

// recordItem is one DeliveryLease.Record in a batch.
type recordItem struct {
	deliveryID int64
	eventID    uuid.UUID
	owner      uuid.UUID
	// claimAttempts is the pair's attempt count the claim left.
	claimAttempts int
	a             *webhook.Attempt
}

// recordOut is its result; alone as for claimOut.
type recordOut struct {
	gen     int64
	current bool
	err     error
	alone   bool
}

// recordGrouped is recordAttempt through the batcher.
func (db *DB) recordGrouped(ctx context.Context, deliveryID int64, eventID, owner uuid.UUID, claimAttempts int, a *webhook.Attempt) (int64, bool, error) {
	out, err := db.records.Do(ctx, recordItem{deliveryID: deliveryID, eventID: eventID, owner: owner, claimAttempts: claimAttempts, a: a})
	if err != nil {
		return 0, false, err
	}
	if out.alone {
		return recordAttempt(ctx, db.pool, deliveryID, eventID, owner, claimAttempts, a)
	}
	return out.gen, out.current, out.err
}

// recordBatch records items in one statement: recordAttempt's over unnest
// arrays, per row; kept apart from it for the same reason as claimBatch
// (TestGroupedRecordsFenceEachLease holds it to the single one's outcomes).
func (db *DB) recordBatch(ctx context.Context, items []recordItem) ([]recordOut, error) {
	out := make([]recordOut, len(items))
	ctx, cancel := db.bound(ctx)
	defer cancel()
	if len(items) == 1 {
		it := items[0]
		o := &out[0]
		o.gen, o.current, o.err = recordAttempt(ctx, db.pool, it.deliveryID, it.eventID, it.owner, it.claimAttempts, it.a)
		return out, nil
	}
	return recordBatchOn(ctx, db.pool, items, out)
}

// recordBatchOn is recordBatch's statement through q, for more than one
// item.
func recordBatchOn(ctx context.Context, q querier, items []recordItem, out []recordOut) ([]recordOut, error) {
	n := len(items)
	var (
		ids, gens, retryMS, durMS []int64 = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		outcomes                          = make([]string, n)
		statuses                          = make([]*int32, n)
		errTexts, headers                 = make([]*string, n), make([]*string, n)
		started, series                   = make([]time.Time, n), make([]time.Time, n)
		owners, eventIDs                  = make([][16]byte, n), make([][16]byte, n)
		numbers, claimAttempts            = make([]int32, n), make([]int32, n)
		bodies                            = make([][]byte, n)
		traces                            = make([]string, n)
		versions                          = make([]*int64, n)
	)
	for i, it := range items {
		a := it.a
		ids[i], owners[i], outcomes[i] = it.deliveryID, pgUUID(it.owner), string(a.Outcome)
		eventIDs[i] = pgUUID(it.eventID)
		gens[i], retryMS[i], durMS[i] = a.Gen, a.RetryIn.Milliseconds(), a.Duration.Milliseconds()
		started[i], numbers[i], bodies[i], series[i] = a.StartedAt, int32(a.Number), a.ResponseBody, seriesStart(a)
		claimAttempts[i] = int32(it.claimAttempts)
		traces[i] = a.TraceParent
		if a.RouteVersion != 0 {
			v := a.RouteVersion
			versions[i] = &v
		}
		if a.Status != 0 {
			s := int32(a.Status)
			statuses[i] = &s
		}
		if a.Error != "" {
			errTexts[i] = &a.Error
		}
		h := a.ResponseHeaders
		if h == nil && a.Status != 0 {
			h = http.Header{}
		}
		if h != nil {
			b, err := json.Marshal(h)
			if err != nil {
				return nil, fmt.Errorf("encoding response headers: %w", err)
			}
			s := string(b)
			headers[i] = &s
		}
	}
	// As recordAttempt: a delivered pair stays delivered; a copy of
	// another generation records its attempt, and a success, but changes
	// nothing else; a fence that fails stores the attempt as lost_lease,
	// unless the claim's attempt is recorded already.
	rows, err := q.Query(ctx, withDays(`
		WITH input AS (
			SELECT * FROM unnest($1::bigint[], $2::text[], $3::int[], $4::text[], $5::timestamptz[], $6::bigint[],
			                     $7::bigint[], $8::uuid[], $9::int[], $10::bigint[], $11::text[], $12::bytea[], $13::timestamptz[],
			                     $14::int[], $15::uuid[], $16::text[], $17::bigint[])
			       WITH ORDINALITY AS t(id, outcome, status, error, started_at, gen, retry_ms, owner, number, duration_ms, headers, body,
			                            series_start, claim_attempts, event_id, trace_parent, route_version, ord)
		), old AS (
			-- Locks the rows in id order before u changes them, and reads
			-- each one's generation before the change. u joins it so that
			-- it runs first: a row this statement updated already is one
			-- FOR UPDATE no longer returns.
			-- The pairs are found by scan conditions on arrays, not by a
			-- join: a join to a partitioned table may be planned as a
			-- scan of every partition (the planner does not count the
			-- partitions a join would skip); ids are unique per day
			-- (0021), so these are index probes whatever the statistics.
			SELECT d.id, d.gen, d.series FROM deliveries d
			WHERE d.event_id = ANY($15::uuid[]) AND @day(d.event_id) AND d.id = ANY($1::bigint[])
			ORDER BY d.id
			FOR UPDATE
		), u AS (
			UPDATE deliveries d SET
				state            = CASE WHEN d.state = 'delivered' THEN 'delivered'
				                        WHEN d.gen = i.gen OR i.outcome = 'delivered' THEN i.outcome ELSE d.state END,
				attempts         = d.attempts + 1,
				last_status      = i.status,
				last_error       = i.error,
				first_attempt_at = COALESCE(d.first_attempt_at, i.started_at),
				last_attempt_at  = i.started_at,
				delivered_at     = CASE WHEN i.outcome = 'delivered' AND d.delivered_at IS NULL THEN now() ELSE d.delivered_at END,
				gen              = CASE WHEN d.gen = i.gen AND i.outcome = 'retrying' THEN d.gen + 1 ELSE d.gen END,
				due_at           = CASE WHEN d.gen = i.gen AND i.outcome = 'retrying'
				                        THEN now() + i.retry_ms * interval '1 millisecond' ELSE d.due_at END,
				lease_owner = NULL, lease_at = NULL, lease_until = NULL, lease_attempt = NULL,
				updated_at       = now()
			FROM input i JOIN old o ON o.id = i.id
			WHERE d.event_id = ANY($15::uuid[]) AND @day(d.event_id) AND d.id = ANY($1::bigint[])
			  AND d.id = i.id AND (d.lease_owner = i.owner OR (d.lease_owner IS NULL
			      AND d.attempts = i.claim_attempts AND NOT EXISTS (
			      SELECT 1 FROM delivery_attempts a WHERE a.event_id = i.event_id AND @day(a.event_id) AND a.delivery_id = i.id AND a.claim = i.owner)))
			RETURNING i.ord, d.gen, d.series, d.event_id, d.route, o.gen = i.gen AS current,
			          o.gen = i.gen AND i.outcome = 'retrying' AS moved, d.state AS state_now
		), alert AS (
			-- A pair this record sent to the dead letters is reported
			-- (delivery.dead_lettered), unless it is an event of the
			-- relay's own: an alert route's dead letter reports nothing.
			SELECT hookrelay_emit('delivery.dead_lettered', u.route, NULL, jsonb_strip_nulls(jsonb_build_object(
			           'route', u.route, 'event_id', u.event_id, 'source', e.source, 'event_type', e.event_type,
			           'attempt', i.number, 'status', i.status, 'error', i.error)))
			FROM u JOIN input i ON i.ord = u.ord JOIN events e ON e.id = u.event_id
			WHERE u.state_now = 'dead' AND i.outcome = 'dead' AND u.current AND e.source <> '`+RelaySource+`'
			  AND e.id = ANY($15::uuid[]) AND @day(e.id)
		), done AS (
			-- As recordAttempt: a claim whose attempt is recorded already
			-- (an earlier try's answer was lost) is answered as then.
			-- Per item (LATERAL with LIMIT: one partition, one index probe).
			SELECT i.ord, a.gen_after, a.copy_current
			FROM input i CROSS JOIN LATERAL (
				SELECT a.gen_after, a.copy_current FROM delivery_attempts a
				WHERE a.event_id = i.event_id AND @day(a.event_id) AND a.delivery_id = i.id AND a.claim = i.owner AND a.outcome <> 'lost_lease'
				ORDER BY a.id LIMIT 1) a
			WHERE NOT EXISTS (SELECT 1 FROM u WHERE u.ord = i.ord)
		), r AS (
			-- As recordAttempt: each retry copy commits with its record.
			INSERT INTO outbox (event_id, routing_key, route, gen, attempt, retry_ms, first_attempt_at, trace_parent)
			SELECT u.event_id, e.source || '.' || e.event_type, u.route, u.gen, i.number + 1, i.retry_ms, i.series_start,
			       NULLIF(i.trace_parent, '')
			FROM u JOIN input i ON i.ord = u.ord JOIN events e ON e.id = u.event_id
			WHERE u.moved AND e.id = ANY($15::uuid[]) AND @day(e.id)
			ORDER BY u.ord
		), ins AS (
			-- Not for a pair that is gone (purged): answered ErrNotFound.
			INSERT INTO delivery_attempts
				(delivery_id, event_id, attempt, started_at, duration_ms, status, response_headers, response_body, error, outcome,
				 series, claim, gen_after, copy_current, trace_id, route_version)
			SELECT i.id, i.event_id, i.number, i.started_at, i.duration_ms, i.status, i.headers::jsonb, i.body, i.error,
			       CASE WHEN u.ord IS NOT NULL THEN i.outcome ELSE 'lost_lease' END,
			       COALESCE(u.series, o.series, 1),
			       i.owner, u.gen, u.current, NULLIF(substr(i.trace_parent, 4, 32), ''), i.route_version
			FROM input i LEFT JOIN u ON u.ord = i.ord JOIN old o ON o.id = i.id
			WHERE NOT EXISTS (SELECT 1 FROM done WHERE done.ord = i.ord)
		)
		SELECT i.ord, u.ord IS NOT NULL OR done.ord IS NOT NULL, COALESCE(u.gen, done.gen_after, 0),
		       COALESCE(u.current, done.copy_current, false), EXISTS (SELECT 1 FROM old o WHERE o.id = i.id)
		FROM input i LEFT JOIN u ON u.ord = i.ord LEFT JOIN done ON done.ord = i.ord
		CROSS JOIN (SELECT count(*) FROM alert) reported`, recordIDs(items)...),
		ids, outcomes, statuses, errTexts, started, gens, retryMS, owners, numbers, durMS, headers, bodies, series, claimAttempts,
		eventIDs, traces, versions)
	if err != nil {
		return refusedAlone(out, err, func(o *recordOut) { o.alone = true })
	}
	seen := make([]bool, n)
	for rows.Next() {
		var (
			ord                 int64
			fenced, curr, found bool
			gen                 int64
		)
		if err := rows.Scan(&ord, &fenced, &gen, &curr, &found); err != nil {
			rows.Close()
			return nil, fmt.Errorf("recording attempts: %w", err)
		}
		i := int(ord) - 1
		if i < 0 || i >= n || seen[i] {
			rows.Close()
			return nil, errors.New("recording attempts: postgres answered a row it was not asked for")
		}
		seen[i] = true
		switch {
		case !found:
			out[i].err = fmt.Errorf("%w: recording attempt: delivery %d: %w", webhook.ErrEventMissing, items[i].deliveryID, ErrNotFound)
			continue
		case !fenced:
			out[i].err = webhook.ErrLeaseLost
			continue
		}
		out[i].gen, out[i].current = gen, curr
	}
	if err := rows.Err(); err != nil {
		return refusedAlone(out, err, func(o *recordOut) { o.alone = true })
	}
	for i := range items {
		if !seen[i] {
			return nil, errors.New("recording attempts: postgres did not answer every row")
		}
	}
	return out, nil
}

// claimIDs are the events of items.
func claimIDs(items []claimItem) []uuid.UUID {
	ids := make([]uuid.UUID, len(items))
	for i, it := range items {
		ids[i] = it.eventID
	}
	return ids
}

// recordIDs are the events of items.
func recordIDs(items []recordItem) []uuid.UUID {
	ids := make([]uuid.UUID, len(items))
	for i, it := range items {
		ids[i] = it.eventID
	}
	return ids
}
