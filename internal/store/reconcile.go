package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Reconciled is one pair the reconciler sent again.
type Reconciled struct {
	EventID uuid.UUID
	Route   string
	// Gen is the generation of the new copy.
	Gen int64
	// Overdue is how long past its due time the pair was.
	Overdue time.Duration
}

// DeliveryReconcile finds up to limit pairs of route that are pending or
// retrying more than margin past their due time, not in flight (a pair
// with a live delivery lease, or one that expired less than margin ago, is
// skipped), with nothing of their event still in the outbox, and of a
// route whose deliveries are not held (paused, its circuit not closed, or
// held for its rate limit or a Retry-After less than margin ago: a held
// delivery's message is in a dispatcher's hand, its pair unclaimed), and
// sends each again: in one transaction it moves the pair to a new
// generation, pushes its due time to now, counts the repair, and puts a
// copy addressed to the route's queue in the outbox. A copy of an older generation that turns up later is dropped by
// the dispatcher. Several dispatchers may run it at once: SKIP LOCKED and
// the due time moved to now keep a pair from being sent twice.
//
// The caller runs it only when nothing in the broker can hold a copy of
// such a pair (deliver.Reconciler): with a backlog, an overdue pair may
// simply be waiting in it.
//
// commit, when set, is asked after the statement ran and before the
// transaction commits: its error rolls every re-send back and is returned.
// The caller's reasons to re-send were true when it looked; a statement
// that reached Postgres late (stalled on its socket through an outage)
// runs when they may no longer be.
func (db *DB) DeliveryReconcile(ctx context.Context, route string, margin time.Duration, limit int, commit func() error) ([]Reconciled, error) {
	var out []Reconciled
	err := db.InTx(ctx, func(tx pgx.Tx) (err error) {
		if out, err = reconcileIn(ctx, tx, route, margin, limit); err != nil {
			return err
		}
		if commit != nil && len(out) > 0 {
			return commit()
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// reconcileIn is DeliveryReconcile in tx.
func reconcileIn(ctx context.Context, tx pgx.Tx, route string, margin time.Duration, limit int) ([]Reconciled, error) {
	rows, err := tx.Query(ctx, reconcileSQL, route, margin, limit)
	if err != nil {
		return nil, fmt.Errorf("reconciling %s: %w", route, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Reconciled, error) {
		var r Reconciled
		var overdue float64
		err := row.Scan(&r.EventID, &r.Route, &r.Gen, &overdue)
		r.Overdue = time.Duration(overdue * float64(time.Second))
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("reconciling %s: %w", route, err)
	}
	return out, nil
}

// reconcileSQL sends a route's ($1) overdue pairs again (DeliveryReconcile):
// at most $3, overdue by more than $2.
const reconcileSQL = `
			WITH c AS (
				SELECT d.id, d.event_id, now() - d.due_at AS overdue FROM deliveries d
				WHERE d.route = $1 AND d.state IN ('pending', 'retrying')
				  AND d.due_at < now() - $2::interval
				  -- A lease expired less than a margin ago may be held still:
				  -- its holder waits for Postgres to record, or its copy is
				  -- on its way back to the queue from a dispatcher that died.
				  AND (d.lease_until IS NULL OR d.lease_until < now() - $2::interval)
				  AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.event_id = d.event_id)
				  -- Nor while its route's deliveries are held, or were less
				  -- than a margin ago (paused, circuit not closed, a rate
				  -- limit or Retry-After holding messages in hand).
				  AND NOT EXISTS (SELECT 1 FROM route_state rs WHERE rs.route = d.route
				      AND (rs.paused OR rs.circuit <> 'closed'
				           OR greatest(rs.held_until, rs.slow_until) > now() - $2::interval))
				ORDER BY d.due_at
				LIMIT $3
				FOR UPDATE OF d SKIP LOCKED
			), u AS (
				UPDATE deliveries d SET gen = d.gen + 1, due_at = now(), reconciled = d.reconciled + 1, updated_at = now()
				FROM c WHERE d.id = c.id AND d.id = ANY(ARRAY(SELECT id FROM c)) -- probes (see recordBatch)
				RETURNING d.id, d.event_id, d.route, d.gen, d.series, c.overdue
			), n AS (
				-- The resend carries the series' next attempt number, so the
				-- pair's numbering and its max_attempts count go on.
				SELECT u.*, (SELECT COALESCE(max(a.attempt), 0) + 1 FROM delivery_attempts a
				             WHERE a.delivery_id = u.id AND a.series = u.series) AS attempt
				FROM u
			), o AS (
				INSERT INTO outbox (event_id, routing_key, route, gen, attempt)
				SELECT n.event_id, e.source || '.' || e.event_type, n.route, n.gen, n.attempt
				FROM n CROSS JOIN LATERAL (SELECT e.source, e.event_type FROM events e WHERE e.id = n.event_id OFFSET 0) e
			)
			SELECT event_id, route, gen, EXTRACT(EPOCH FROM overdue)::float8 FROM u`
