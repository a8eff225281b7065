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

// String encodes the cursor for an API caller to hand back.
func (c ReplayCursor) String() string {
	if c.ReceivedAt.IsZero() {
		return ""
	}
	return c.ReceivedAt.UTC().Format(time.RFC3339Nano) + "_" + c.ID.String()
}

// ParseReplayCursor reads what String wrote; "" is the zero cursor.
func ParseReplayCursor(s string) (ReplayCursor, error) {
	if s == "" {
		return ReplayCursor{}, nil
	}
	at, id, ok := strings.Cut(s, "_")
	if !ok {
		return ReplayCursor{}, errors.New("invalid cursor")
	}
	var c ReplayCursor
	var err error
	if c.ReceivedAt, err = time.Parse(time.RFC3339Nano, at); err != nil {
		return ReplayCursor{}, errors.New("invalid cursor")
	}
	if c.ID, err = uuid.Parse(id); err != nil {
		return ReplayCursor{}, errors.New("invalid cursor")
	}
	return c, nil
}

// afterSQL continues a selection after cursor ($7 received_at, $8 id). The
// first condition lets the received_at index find the start; the row
// comparison breaks ties between events received in the same microsecond.
const afterSQL = `
	AND ($7::timestamptz IS NULL OR (e.received_at >= $7 AND (e.received_at, e.id) > ($7, $8::uuid)))`

func afterArgs(after ReplayCursor) []any {
	var at *time.Time
	if !after.ReceivedAt.IsZero() {
		at = &after.ReceivedAt
	}
	return []any{at, after.ID}
}

// ReplayCandidatesPage returns up to limit events f selects after cursor
// (keyset pagination: each page is one indexed range scan, however far in),
// oldest first, with their delivery states. f.Limit is ignored: the caller
// counts.
func (db *DB) ReplayCandidatesPage(ctx context.Context, f EventFilter, after ReplayCursor, limit int) ([]ReplayCandidate, error) {
	if f.Key != "" {
		return nil, ErrKeyFilter
	}
	ctx, cancel := db.boundOps(ctx)
	defer cancel()
	const candidateSQL = `
		SELECT e.id, e.source, e.event_type, e.received_at, e.purged_at IS NOT NULL,
			COALESCE((SELECT json_object_agg(d.route, d.state) FROM deliveries d WHERE d.event_id = e.id), '{}')
		FROM events e`
	var rows pgx.Rows
	var err error
	if f.Search != nil {
		keys, _, err := db.searchKeys(ctx, f, after, false, limit)
		if err != nil {
			return nil, err
		}
		ids := make([]uuid.UUID, len(keys))
		for i, k := range keys {
			ids[i] = k.ID
		}
		rows, err = db.pool.Query(ctx, candidateSQL+`
		WHERE e.id = ANY($1)
		ORDER BY e.received_at, e.id`, ids)
	} else {
		args := append(append(filterArgs(f), afterArgs(after)...), limit)
		rows, err = db.pool.Query(ctx, candidateSQL+`
		WHERE `+eventFilterSQL+afterSQL+`
		ORDER BY e.received_at, e.id
		LIMIT $9`, args...)
	}
	if err != nil {
		return nil, fmt.Errorf("selecting replay candidates: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (ReplayCandidate, error) {
		var c ReplayCandidate
		err := row.Scan(&c.EventID, &c.Source, &c.EventType, &c.ReceivedAt, &c.Purged, &c.States)
		return c, err
	})
}

// ReplayCandidateCount counts the events f selects after cursor, ignoring
// f.Limit.
func (db *DB) ReplayCandidateCount(ctx context.Context, f EventFilter, after ReplayCursor) (int64, error) {
	if f.Key != "" {
		return 0, ErrKeyFilter
	}
	ctx, cancel := db.boundOps(ctx)
	defer cancel()
	if f.Search != nil {
		return db.searchCount(ctx, f, after, 0)
	}
	var n int64
	err := db.pool.QueryRow(ctx, `SELECT count(*) FROM events e WHERE `+eventFilterSQL+afterSQL,
		append(filterArgs(f), afterArgs(after)...)...).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("counting replay candidates: %w", err)
	}
	return n, nil
}

// ReplayPair is one (event, route) to deliver again.
type ReplayPair struct {
	EventID uuid.UUID
	Route   string
}

// ReplayEnqueue resets each pair to pending and puts it in the outbox,
// addressed to its route's queue, in one transaction: a crash leaves all of
// them queued or none. Each starts a new attempt series (deliveries.series)
// at attempt 1; the destination
// sees the same webhook-id. Everything is checked again here, not taken
// from when the caller looked: an event purged meanwhile (no body left to
// send) is skipped, and only a dead pair (or a delivered one, with
// includeDelivered) or one never attempted is replayed, so a pair that
// became delivered or went back in flight meanwhile is left alone. A
// stale pair is replayed only with includeStale, and its copy is then
// delivered without the stale check (stale_override); every other pair
// replayed is checked again. It returns the pairs it enqueued.
func (db *DB) ReplayEnqueue(ctx context.Context, pairs []ReplayPair, includeDelivered, includeStale bool) ([]ReplayPair, error) {
	return db.ReplayEnqueueBy(ctx, uuid.Nil, pairs, includeDelivered, includeStale)
}

// ReplayEnqueueBy is ReplayEnqueue for the replay by (its first job's
// id; uuid.Nil: none): each pair enqueued is marked as replayed by it,
// and a pair it marked before is left alone, whatever its state is since,
// so that a replay run again for the rest never sends a pair twice.
func (db *DB) ReplayEnqueueBy(ctx context.Context, by uuid.UUID, pairs []ReplayPair, includeDelivered, includeStale bool) ([]ReplayPair, error) {
	ctx, cancel := db.boundOps(ctx)
	defer cancel()
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
				INSERT INTO deliveries (event_id, route, lane, replayed_by)
				SELECT p.event_id, p.route, `+laneSQL+`, $6::uuid FROM unnest($1::uuid[], $2::text[]) AS p (event_id, route)
				JOIN events e ON e.id = p.event_id
				WHERE p.event_id = ANY($4::uuid[])
				ON CONFLICT (event_id, route) DO UPDATE SET
					-- Back in its lane, at its place (an ordered route's pair
					-- that was skipped left it).
					lane = EXCLUDED.lane,
					state = 'pending', delivered_at = NULL, created_at = now(), updated_at = now(),
					-- A new copy: any older one still in a queue is stale.
					gen = deliveries.gen + 1, due_at = now(),
					-- A new attempt series, starting at attempt 1.
					series = deliveries.series + 1,
					-- The operator asked for this stale pair: send it.
					stale_override = deliveries.state = 'stale',
					replayed_by = $6::uuid
				WHERE (deliveries.state = 'dead' OR ($3 AND deliveries.state = 'delivered')
					OR ($5 AND deliveries.state = 'stale'))
					-- Not a second time by the same replay.
					AND ($6::uuid IS NULL OR deliveries.replayed_by IS DISTINCT FROM $6::uuid)
				RETURNING event_id, route, gen
			)
			INSERT INTO outbox (event_id, routing_key, route, gen)
			SELECT r.event_id, e.source || '.' || e.event_type, r.route, r.gen
			FROM reset r JOIN events e ON e.id = r.event_id AND e.purged_at IS NULL
			RETURNING event_id, route`, ids, routes, includeDelivered, live, includeStale, nilUUID(by))
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

// PairStates returns the delivery state of each of pairs that has a
// delivery row; pairs without one (their event purged, or never stored)
// are absent from the map.
func (db *DB) PairStates(ctx context.Context, pairs []ReplayPair) (map[ReplayPair]webhook.DeliveryState, error) {
	ctx, cancel := db.boundOps(ctx)
	defer cancel()
	ids := make([]uuid.UUID, len(pairs))
	routes := make([]string, len(pairs))
	for i, p := range pairs {
		ids[i], routes[i] = p.EventID, p.Route
	}
	rows, err := db.pool.Query(ctx, `
		SELECT d.event_id, d.route, d.state
		FROM unnest($1::uuid[], $2::text[]) AS p (event_id, route)
		JOIN deliveries d ON d.event_id = p.event_id AND d.route = p.route`, ids, routes)
	if err != nil {
		return nil, fmt.Errorf("reading pair states: %w", err)
	}
	out := make(map[ReplayPair]webhook.DeliveryState, len(pairs))
	var p ReplayPair
	var state string
	_, err = pgx.ForEachRow(rows, []any{&p.EventID, &p.Route, &state}, func() error {
		out[p] = webhook.DeliveryState(state)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading pair states: %w", err)
	}
	return out, nil
}
