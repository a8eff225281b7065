package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// ReplayCandidate is an event that a replay filter selected, with the state
// of each of its deliveries.
type ReplayCandidate struct {
	EventID    uuid.UUID
	Source     string
	EventType  string
	ReceivedAt time.Time
	Purged     bool
	States     map[string]string // route -> state
}

// ReplayCursor is where a page of replay candidates ends: the last
// event's (received_at, id). The zero cursor starts at the beginning.
type ReplayCursor struct {
	ReceivedAt time.Time
	ID         uuid.UUID
}

// ReplayCandidatesPage returns up to limit events f selects after cursor,
// oldest first, with their delivery states. f.Limit is ignored: the caller
// counts.
func (db *DB) ReplayCandidatesPage(ctx context.Context, f EventFilter, after ReplayCursor, limit int) ([]ReplayCandidate, error) {
	var afterAt *time.Time
	if !after.ReceivedAt.IsZero() {
		afterAt = &after.ReceivedAt
	}
	rows, err := db.pool.Query(ctx, `
		SELECT e.id, e.source, e.event_type, e.received_at, e.purged_at IS NOT NULL,
			COALESCE((SELECT json_object_agg(d.route, d.state) FROM deliveries d WHERE d.event_id = e.id), '{}')
		FROM events e
		WHERE `+eventFilterSQL+`
			AND ($7::timestamptz IS NULL OR (e.received_at >= $7 AND (e.received_at, e.id) > ($7, $8)))
		ORDER BY e.received_at, e.id
		LIMIT $9`, append(filterArgs(f), afterAt, after.ID, limit)...)
	if err != nil {
		return nil, fmt.Errorf("selecting replay candidates: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (ReplayCandidate, error) {
		var c ReplayCandidate
		err := row.Scan(&c.EventID, &c.Source, &c.EventType, &c.ReceivedAt, &c.Purged, &c.States)
		return c, err
	})
}

// ReplayPair is one (event, route) to deliver again.
type ReplayPair struct {
	EventID uuid.UUID
	Route   string
}

// ReplayEnqueue resets each pair to pending and puts it in the outbox,
// addressed to its route's queue, in one transaction: a crash leaves all of
// them queued or none. Each becomes a new attempt series; the destination
// sees the same webhook-id. Everything is checked again here, not taken
// from when the caller looked: an event purged meanwhile (no body left to
// send) is skipped, and only a dead pair (or a delivered one, with
// includeDelivered) or one never attempted is replayed, so a pair that
// became delivered or went back in flight meanwhile is left alone. It
// returns the pairs it enqueued.
func (db *DB) ReplayEnqueue(ctx context.Context, pairs []ReplayPair, includeDelivered bool) ([]ReplayPair, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	ids := make([]uuid.UUID, len(pairs))
	routes := make([]string, len(pairs))
	for i, p := range pairs {
		ids[i], routes[i] = p.EventID, p.Route
	}
	var done []ReplayPair
	err := db.InTx(ctx, func(tx pgx.Tx) error {
		// FOR SHARE holds off a purge of these events until this
		// transaction ends (purge skips locked events), and waits for one
		// that holds them now, then sees its result: purged_at is checked
		// on the newest row.
		rows, err := tx.Query(ctx, `SELECT id FROM events WHERE id = ANY($1) AND purged_at IS NULL FOR SHARE`, ids)
		if err != nil {
			return fmt.Errorf("locking events to replay: %w", err)
		}
		live, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			return fmt.Errorf("locking events to replay: %w", err)
		}
		// A new statement, a new snapshot: it sees every purge that
		// committed before the locks were taken.
		rows, err = tx.Query(ctx, `
			WITH reset AS (
				INSERT INTO deliveries (event_id, route)
				SELECT p.event_id, p.route FROM unnest($1::uuid[], $2::text[]) AS p (event_id, route)
				WHERE p.event_id = ANY($4::uuid[])
				ON CONFLICT (event_id, route) DO UPDATE SET
					state = 'pending', delivered_at = NULL, created_at = now(), updated_at = now()
				WHERE deliveries.state = 'dead' OR ($3 AND deliveries.state = 'delivered')
				RETURNING event_id, route
			)
			INSERT INTO outbox (event_id, routing_key, route)
			SELECT r.event_id, e.source || '.' || e.event_type, r.route
			FROM reset r JOIN events e ON e.id = r.event_id AND e.purged_at IS NULL
			RETURNING event_id, route`, ids, routes, includeDelivered, live)
		if err != nil {
			return fmt.Errorf("enqueueing replays: %w", err)
		}
		done, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (ReplayPair, error) {
			var p ReplayPair
			err := row.Scan(&p.EventID, &p.Route)
			return p, err
		})
		if err != nil {
			return fmt.Errorf("enqueueing replays: %w", err)
		}
		return nil
	})
	return done, err
}
