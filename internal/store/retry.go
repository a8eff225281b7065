package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// RetrySelection selects retrying pairs for DeliveryRetryNow: one event's
// (EventID), one route's (Route), or one event's on one route.
type RetrySelection struct {
	EventID uuid.UUID
	Route   string
	// Events, when set, selects the pairs of these events only (a retry
	// by query: the events a search found).
	Events []uuid.UUID
}

// args are the selection's $1 (the events, NULL for any) and $2.
func (s RetrySelection) args() ([]uuid.UUID, string) {
	switch {
	case s.EventID != uuid.Nil:
		return []uuid.UUID{s.EventID}, s.Route
	case s.Events != nil:
		return s.Events, s.Route
	}
	return nil, s.Route
}

// retrySelectSQL selects the retrying pairs of a selection ($1 event ids or
// NULL, $2 route or ”) that have no copy due now waiting in the outbox. A
// retry copy still in the outbox on its way to its tier does not count:
// the copy brought forward supersedes it, as it does one in the tier.
const retrySelectSQL = `
	d.state = 'retrying' AND ($1::uuid[] IS NULL OR d.event_id = ANY($1)) AND ($2 = '' OR d.route = $2)
	AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.event_id = d.event_id AND o.route = d.route AND o.retry_ms IS NULL)`

// retryNotInFlightSQL leaves out pairs in flight: a live delivery lease.
const retryNotInFlightSQL = ` AND (d.lease_until IS NULL OR d.lease_until <= now())`

// RetriedPair is a retrying pair whose next attempt DeliveryRetryNow
// brought forward.
type RetriedPair struct {
	// ID is the delivery's id: the cursor of the next call.
	ID      int64
	EventID uuid.UUID
	Route   string
	// Gen is the generation of the new copy; Series and Attempt its place
	// in the attempt series.
	Gen     int64
	Series  int
	Attempt int
	// WasDue is when the copy in its retry tier was due.
	WasDue time.Time
}

// DeliveryRetryNow brings forward the next attempt of up to limit
// retrying pairs that sel selects, after the delivery id after (0: from
// the start), in order of delivery id. In one transaction, like
// DeliveryReconcile, each moves to a new generation due now, and a copy
// for its next attempt (the series and attempt number it would have had)
// goes into the outbox addressed to its route's queue: the dispatcher
// delivers it at once, and the copy still waiting in a retry tier is of
// an older generation, dropped (superseded) when it comes back. A pair in
// flight (a dispatcher holds a live delivery lease on it) or with a copy
// due now already in the outbox is left alone.
func (db *DB) DeliveryRetryNow(ctx context.Context, sel RetrySelection, after int64, limit int) ([]RetriedPair, error) {
	ctx, cancel := db.boundOps(ctx)
	defer cancel()
	event, route := sel.args()
	var out []RetriedPair
	err := db.InTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			WITH c AS (
				SELECT d.id, d.event_id, d.due_at FROM deliveries d
				WHERE `+retrySelectSQL+retryNotInFlightSQL+` AND d.id > $3
				ORDER BY d.id
				LIMIT $4
				FOR UPDATE OF d SKIP LOCKED
			), u AS (
				UPDATE deliveries d SET gen = d.gen + 1, due_at = now(), updated_at = now()
				FROM c WHERE d.id = c.id AND d.id = ANY(ARRAY(SELECT id FROM c)) -- probes (see recordBatch)
				RETURNING d.id, d.event_id, d.route, d.gen, d.series, c.due_at AS was_due
			), n AS (
				SELECT u.*, (SELECT COALESCE(max(a.attempt), 0) + 1 FROM delivery_attempts a
				             WHERE a.delivery_id = u.id AND a.series = u.series) AS attempt
				FROM u
			), o AS (
				INSERT INTO outbox (event_id, routing_key, route, gen, attempt)
				SELECT n.event_id, e.source || '.' || e.event_type, n.route, n.gen, n.attempt
				FROM n CROSS JOIN LATERAL (SELECT e.source, e.event_type FROM events e WHERE e.id = n.event_id OFFSET 0) e
			)
			SELECT id, event_id, route, gen, series, attempt, was_due FROM n ORDER BY id`,
			event, route, after, limit)
		if err != nil {
			return fmt.Errorf("retrying now: %w", err)
		}
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (RetriedPair, error) {
			var p RetriedPair
			err := row.Scan(&p.ID, &p.EventID, &p.Route, &p.Gen, &p.Series, &p.Attempt, &p.WasDue)
			return p, err
		})
		if err != nil {
			return fmt.Errorf("retrying now: %w", err)
		}
		return nil
	})
	return out, err
}

// DeliveryRetryCount counts the retrying pairs sel selects that
// DeliveryRetryNow would take, in flight ones included (a lease may be
// gone by the time they are taken).
func (db *DB) DeliveryRetryCount(ctx context.Context, sel RetrySelection) (int64, error) {
	ctx, cancel := db.boundOps(ctx)
	defer cancel()
	event, route := sel.args()
	var n int64
	if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM deliveries d WHERE `+retrySelectSQL, event, route).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting retrying pairs: %w", err)
	}
	return n, nil
}

// DeliveryRetryWaiting counts how many of pairs still wait for the
// attempt DeliveryRetryNow brought forward: retrying at that copy's
// generation.
func (db *DB) DeliveryRetryWaiting(ctx context.Context, pairs []RetriedPair) (int, error) {
	ctx, cancel := db.boundOps(ctx)
	defer cancel()
	ids := make([]int64, len(pairs))
	gens := make([]int64, len(pairs))
	for i, p := range pairs {
		ids[i], gens[i] = p.ID, p.Gen
	}
	var n int
	err := db.pool.QueryRow(ctx, `
		SELECT count(*) FROM unnest($1::bigint[], $2::bigint[]) AS p (id, gen)
		JOIN deliveries d ON d.id = p.id AND d.gen = p.gen AND d.state = 'retrying'`, ids, gens).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("reading retried pairs: %w", err)
	}
	return n, nil
}
