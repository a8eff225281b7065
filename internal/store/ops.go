package store

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// EventFilter selects events for listing and replay. Zero fields do not
// filter. State and Route select events that have a delivery in that state
// and/or to that route.
type EventFilter struct {
	Source    string    `json:"source,omitempty"`
	EventType string    `json:"event_type,omitempty"`
	State     string    `json:"state,omitempty"`
	Route     string    `json:"route,omitempty"`
	Since     time.Time `json:"since,omitzero"`
	Until     time.Time `json:"until,omitzero"`
	Limit     int       `json:"limit,omitempty"`
}

// DeliverySummary is one route's delivery state of an event.
type DeliverySummary struct {
	Route         string     `json:"route"`
	State         string     `json:"state"`
	Attempts      int        `json:"attempts"`
	LastStatus    *int       `json:"last_status,omitempty"`
	LastError     *string    `json:"last_error,omitempty"`
	LastAttemptAt *time.Time `json:"last_attempt_at,omitempty"`
}

// EventSummary is an event in a listing.
type EventSummary struct {
	ID             uuid.UUID         `json:"id"`
	Source         string            `json:"source"`
	EventType      string            `json:"event_type"`
	IdempotencyKey string            `json:"idempotency_key"`
	ReceivedAt     time.Time         `json:"received_at"`
	Purged         bool              `json:"purged,omitempty"`
	Deliveries     []DeliverySummary `json:"deliveries"`
}

const eventFilterSQL = `
	($1 = '' OR e.source = $1)
	AND ($2 = '' OR e.event_type = $2)
	AND ($3::timestamptz IS NULL OR e.received_at >= $3)
	AND ($4::timestamptz IS NULL OR e.received_at < $4)
	AND (($5 = '' AND $6 = '') OR EXISTS (
		SELECT 1 FROM deliveries f
		WHERE f.event_id = e.id AND ($5 = '' OR f.state = $5) AND ($6 = '' OR f.route = $6)))`

func filterArgs(f EventFilter) []any {
	var since, until *time.Time
	if !f.Since.IsZero() {
		since = &f.Since
	}
	if !f.Until.IsZero() {
		until = &f.Until
	}
	return []any{f.Source, f.EventType, since, until, f.State, f.Route}
}

// EventList returns events matching f, newest first, with their deliveries.
// Limit defaults to 100.
func (db *DB) EventList(ctx context.Context, f EventFilter) ([]EventSummary, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	rows, err := db.pool.Query(ctx, `
		SELECT e.id, e.source, e.event_type, e.idempotency_key, e.received_at, e.purged_at IS NOT NULL,
			COALESCE((
				SELECT json_agg(json_build_object(
					'route', d.route, 'state', d.state, 'attempts', d.attempts,
					'last_status', d.last_status, 'last_error', d.last_error,
					'last_attempt_at', d.last_attempt_at) ORDER BY d.route)
				FROM deliveries d WHERE d.event_id = e.id), '[]')
		FROM events e
		WHERE `+eventFilterSQL+`
		ORDER BY e.received_at DESC, e.id DESC
		LIMIT $7`, append(filterArgs(f), f.Limit)...)
	if err != nil {
		return nil, fmt.Errorf("listing events: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (EventSummary, error) {
		var s EventSummary
		err := row.Scan(&s.ID, &s.Source, &s.EventType, &s.IdempotencyKey, &s.ReceivedAt, &s.Purged, &s.Deliveries)
		return s, err
	})
}

// EventCountByFilter counts the events f selects, ignoring its limit: what
// a listing that stopped at its limit reports as the total.
func (db *DB) EventCountByFilter(ctx context.Context, f EventFilter) (int64, error) {
	var n int64
	if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM events e WHERE `+eventFilterSQL, filterArgs(f)...).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting events: %w", err)
	}
	return n, nil
}

// AttemptRow is one stored HTTP attempt.
type AttemptRow struct {
	Attempt         int         `json:"attempt"`
	StartedAt       time.Time   `json:"started_at"`
	DurationMS      int         `json:"duration_ms"`
	Status          *int        `json:"status,omitempty"`
	ResponseHeaders http.Header `json:"response_headers,omitempty"`
	ResponseBody    string      `json:"response_body,omitempty"`
	Error           *string     `json:"error,omitempty"`
	Outcome         string      `json:"outcome"`
}

// DeliveryDetail is one route's delivery with every attempt.
type DeliveryDetail struct {
	DeliverySummary
	FirstAttemptAt *time.Time   `json:"first_attempt_at,omitempty"`
	DeliveredAt    *time.Time   `json:"delivered_at,omitempty"`
	AttemptRows    []AttemptRow `json:"attempts_detail"`
}

// EventDetail is an event, its deliveries and their attempts.
type EventDetail struct {
	ID             uuid.UUID        `json:"id"`
	Source         string           `json:"source"`
	EventType      string           `json:"event_type"`
	IdempotencyKey string           `json:"idempotency_key"`
	ContentType    string           `json:"content_type"`
	ReceivedAt     time.Time        `json:"received_at"`
	Headers        http.Header      `json:"headers"`
	Body           string           `json:"body"`
	Purged         bool             `json:"purged,omitempty"`
	Deliveries     []DeliveryDetail `json:"deliveries"`
}

// EventShow returns one event with its deliveries and attempts, or
// ErrNotFound.
func (db *DB) EventShow(ctx context.Context, id uuid.UUID) (*EventDetail, error) {
	var ev EventDetail
	var body []byte
	err := db.pool.QueryRow(ctx, `
		SELECT id, source, event_type, idempotency_key, content_type, received_at, headers, body, purged_at IS NOT NULL
		FROM events WHERE id = $1`, id,
	).Scan(&ev.ID, &ev.Source, &ev.EventType, &ev.IdempotencyKey, &ev.ContentType, &ev.ReceivedAt, &ev.Headers, &body, &ev.Purged)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("reading event: %w", err)
	}
	ev.Body = string(body)
	rows, err := db.pool.Query(ctx, `
		SELECT d.id, d.route, d.state, d.attempts, d.last_status, d.last_error, d.last_attempt_at, d.first_attempt_at, d.delivered_at
		FROM deliveries d WHERE d.event_id = $1 ORDER BY d.route`, id)
	if err != nil {
		return nil, fmt.Errorf("reading deliveries: %w", err)
	}
	ids := map[int64]int{}
	ev.Deliveries, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (DeliveryDetail, error) {
		var d DeliveryDetail
		var did int64
		err := row.Scan(&did, &d.Route, &d.State, &d.Attempts, &d.LastStatus, &d.LastError, &d.LastAttemptAt, &d.FirstAttemptAt, &d.DeliveredAt)
		ids[did] = len(ids)
		d.AttemptRows = []AttemptRow{}
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading deliveries: %w", err)
	}
	rows, err = db.pool.Query(ctx, `
		SELECT a.delivery_id, a.attempt, a.started_at, a.duration_ms, a.status, a.response_headers, a.response_body, a.error, a.outcome
		FROM delivery_attempts a JOIN deliveries d ON d.id = a.delivery_id
		WHERE d.event_id = $1 ORDER BY a.started_at, a.id`, id)
	if err != nil {
		return nil, fmt.Errorf("reading attempts: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var a AttemptRow
		var did int64
		var respBody []byte
		if err := rows.Scan(&did, &a.Attempt, &a.StartedAt, &a.DurationMS, &a.Status, &a.ResponseHeaders, &respBody, &a.Error, &a.Outcome); err != nil {
			return nil, fmt.Errorf("reading attempt: %w", err)
		}
		a.ResponseBody = string(respBody)
		if i, ok := ids[did]; ok {
			ev.Deliveries[i].AttemptRows = append(ev.Deliveries[i].AttemptRows, a)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading attempts: %w", err)
	}
	return &ev, nil
}

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

// ReplayCandidates returns the events f selects, oldest first, with their
// delivery states. Limit 0 means no limit.
func (db *DB) ReplayCandidates(ctx context.Context, f EventFilter) ([]ReplayCandidate, error) {
	limit := any(nil)
	if f.Limit > 0 {
		limit = f.Limit
	}
	rows, err := db.pool.Query(ctx, `
		SELECT e.id, e.source, e.event_type, e.received_at, e.purged_at IS NOT NULL,
			COALESCE((SELECT json_object_agg(d.route, d.state) FROM deliveries d WHERE d.event_id = e.id), '{}')
		FROM events e
		WHERE `+eventFilterSQL+`
		ORDER BY e.received_at, e.id
		LIMIT $7`, append(filterArgs(f), limit)...)
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
// sees the same webhook-id. The reset is conditional on the pair's state
// now, not when the caller looked: only a dead pair (or a delivered one,
// with includeDelivered) or one never attempted is replayed, so a pair that
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
		rows, err := tx.Query(ctx, `
			WITH reset AS (
				INSERT INTO deliveries (event_id, route)
				SELECT * FROM unnest($1::uuid[], $2::text[])
				ON CONFLICT (event_id, route) DO UPDATE SET
					state = 'pending', delivered_at = NULL, created_at = now(), updated_at = now()
				WHERE deliveries.state = 'dead' OR ($3 AND deliveries.state = 'delivered')
				RETURNING event_id, route
			)
			INSERT INTO outbox (event_id, routing_key, route)
			SELECT r.event_id, e.source || '.' || e.event_type, r.route
			FROM reset r JOIN events e ON e.id = r.event_id
			RETURNING event_id, route`, ids, routes, includeDelivered)
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

// PurgeResult counts what Purge removed.
type PurgeResult struct {
	Events     int64 `json:"events_deleted"`
	Stripped   int64 `json:"events_stripped"`
	Deliveries int64 `json:"deliveries_deleted"`
	Batches    int   `json:"batches"`
}

// purgeable: nothing of the event is still in flight.
const purgeable = `
	NOT EXISTS (SELECT 1 FROM outbox o WHERE o.event_id = e.id)
	AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = e.id AND d.state IN ('pending', 'retrying'))`

// Purge removes, in batches of batch rows, what is older than olderThan:
// deliveries and their attempts, and events themselves once they are also
// older than dedupeBefore. An event between the two keeps its row (its
// dedupe key) but loses body and headers. Nothing still in the outbox or
// pending delivery is touched.
func (db *DB) Purge(ctx context.Context, olderThan, dedupeBefore time.Time, batch int) (PurgeResult, error) {
	var res PurgeResult
	deleteBefore := olderThan
	if dedupeBefore.Before(deleteBefore) {
		deleteBefore = dedupeBefore
	}
	steps := []struct {
		sql   string
		arg   time.Time
		count *int64
	}{
		{`DELETE FROM deliveries WHERE id IN (
			SELECT d.id FROM deliveries d JOIN events e ON e.id = d.event_id
			WHERE e.received_at < $1 AND ` + purgeable + ` LIMIT $2)`, olderThan, &res.Deliveries},
		{`DELETE FROM events WHERE id IN (
			SELECT e.id FROM events e WHERE e.received_at < $1 AND ` + purgeable + ` LIMIT $2)`, deleteBefore, &res.Events},
		{`UPDATE events SET body = '', headers = '{}', purged_at = now() WHERE id IN (
			SELECT e.id FROM events e WHERE e.received_at < $1 AND e.purged_at IS NULL AND ` + purgeable + ` LIMIT $2)`, olderThan, &res.Stripped},
	}
	for _, st := range steps {
		for {
			tag, err := db.pool.Exec(ctx, st.sql, st.arg, batch)
			if err != nil {
				return res, fmt.Errorf("purging: %w", err)
			}
			res.Batches++
			*st.count += tag.RowsAffected()
			if tag.RowsAffected() < int64(batch) {
				break
			}
		}
	}
	return res, nil
}
