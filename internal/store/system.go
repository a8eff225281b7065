package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// SystemEventChannel is notified when hookrelay_emit writes an event of
// the relay's own (migration 0034).
const SystemEventChannel = "hookrelay_system_events"

// SystemEvent is one event of the relay's own, written by the statement
// that made the change it reports (hookrelay_emit), waiting to be stored
// as an event of source RelaySource.
type SystemEvent struct {
	ID int64
	// Kind is its event type (route.circuit_opened, job.failed, ...).
	Kind string
	// Subject is the route or job it is about; Team the team that owns it.
	Subject, Team string
	Body          json.RawMessage
	CreatedAt     time.Time
}

// SystemEventsWaiting returns up to limit events of the relay's own not
// stored as events yet, oldest first.
func (db *DB) SystemEventsWaiting(ctx context.Context, limit int) ([]SystemEvent, error) {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	rows, err := db.pool.Query(ctx, `
		SELECT id, kind, subject, team, body, created_at FROM system_events ORDER BY id LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("reading the relay's own events: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (SystemEvent, error) {
		var e SystemEvent
		err := row.Scan(&e.ID, &e.Kind, &e.Subject, &e.Team, &e.Body, &e.CreatedAt)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading the relay's own events: %w", err)
	}
	return out, nil
}

// SystemEventsDone deletes the events of the relay's own that are stored
// as events now.
func (db *DB) SystemEventsDone(ctx context.Context, ids []int64) error {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	if _, err := db.pool.Exec(ctx, `DELETE FROM system_events WHERE id = ANY($1)`, ids); err != nil {
		return fmt.Errorf("deleting the relay's own events stored: %w", err)
	}
	return nil
}

// SystemEventsCheck writes the relay's own events that no single change
// makes, as of now: route.backlog for each route (not paused, not
// deleted) whose oldest undelivered pair is older than backlogAfter (at
// most one per route every ten minutes), and source.rejections for each
// source that rejected at least rejections requests in a minute (the
// activity counts: this minute or the one before; at most one per source
// a minute). Zero turns either off. It returns how many it wrote.
func (db *DB) SystemEventsCheck(ctx context.Context, backlogAfter time.Duration, rejections int) (int, error) {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	var n int
	err := db.pool.QueryRow(ctx, `
		WITH backlog AS (
			SELECT hookrelay_emit('route.backlog', r.name, r.team, jsonb_build_object('route', r.name,
			           'oldest_undelivered_at', o.oldest, 'oldest_age_seconds', floor(EXTRACT(EPOCH FROM now() - o.oldest))::bigint),
			       interval '10 minutes') AS wrote
			FROM routes r
			CROSS JOIN LATERAL (
				SELECT min(d.created_at) AS oldest FROM deliveries d
				WHERE d.route = r.name AND d.state IN ('pending', 'retrying')) o
			LEFT JOIN route_state s ON s.route = r.name
			WHERE $1 > 0 AND r.deleted_at IS NULL AND NOT COALESCE(s.paused, false)
			  AND o.oldest < now() - $1 * interval '1 millisecond'
		), rejected AS (
			SELECT hookrelay_emit('source.rejections', a.name, s.team, jsonb_build_object('source', a.name,
			           'rejected', a.n, 'minute', a.minute, 'reasons', a.reasons)) AS wrote
			FROM (SELECT name, minute, sum(n) AS n, jsonb_object_agg(reason, n) AS reasons
			      FROM activity_minutes
			      WHERE $2 > 0 AND kind = 'ingest' AND outcome = 'rejected'
			        AND minute >= date_trunc('minute', now()) - interval '1 minute'
			      GROUP BY name, minute HAVING sum(n) >= $2) a
			JOIN sources s ON s.name = a.name
		)
		SELECT (SELECT count(*) FILTER (WHERE wrote) FROM backlog) + (SELECT count(*) FILTER (WHERE wrote) FROM rejected)`,
		backlogAfter.Milliseconds(), rejections).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("checking routes' backlogs and sources' rejections: %w", err)
	}
	return n, nil
}
