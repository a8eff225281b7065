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

// ErrNotFound is returned when a looked-up row does not exist.
var ErrNotFound = errors.New("not found")

// EventInsert stores ev, its outbox row, and a pending delivery for each of
// routes (the routes whose bindings match it) in one statement: a batch of
// one for EventInsertBatch, whose doc says how duplicates (by key, or by
// body hash for sources that set ev.BodySHA256) are answered and why
// concurrent inserts of one key are safe. ev.ID and ev.ReceivedAt must be
// set by the caller.
func (db *DB) EventInsert(ctx context.Context, ev *webhook.Event, routes []string) (id uuid.UUID, duplicate bool, err error) {
	res, err := db.EventInsertBatch(ctx, []webhook.Insert{{Event: ev, Routes: routes}})
	if err != nil {
		return uuid.Nil, false, err
	}
	if res[0].Err != nil {
		return uuid.Nil, false, res[0].Err
	}
	return res[0].ID, res[0].Duplicate, nil
}

// EventGet returns one event by id, or ErrNotFound.
func (db *DB) EventGet(ctx context.Context, id uuid.UUID) (*webhook.Event, error) {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	var ev webhook.Event
	err := db.pool.QueryRow(ctx, `
		SELECT id, source, idempotency_key, event_type, content_type, headers, body, received_at
		FROM events WHERE id = $1`, id,
	).Scan(&ev.ID, &ev.Source, &ev.IdempotencyKey, &ev.EventType, &ev.ContentType, &ev.Headers, &ev.Body, &ev.ReceivedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("reading event: %w", err)
	}
	return &ev, nil
}

// EventCount counts events, optionally of one source (all when source is "").
func (db *DB) EventCount(ctx context.Context, source string) (int64, error) {
	var n int64
	err := db.pool.QueryRow(ctx,
		`SELECT count(*) FROM events WHERE $1 = '' OR source = $1`, source,
	).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("counting events: %w", err)
	}
	return n, nil
}

// OutboxStats reports the number of unpublished outbox rows and the age of
// the oldest (zero when empty).
func (db *DB) OutboxStats(ctx context.Context) (backlog int64, oldest time.Duration, err error) {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	var ageSeconds float64
	err = db.pool.QueryRow(ctx, `
		SELECT count(*), COALESCE(EXTRACT(EPOCH FROM now() - min(created_at)), 0)::float8
		FROM outbox`,
	).Scan(&backlog, &ageSeconds)
	if err != nil {
		return 0, 0, fmt.Errorf("reading outbox stats: %w", err)
	}
	return backlog, time.Duration(ageSeconds * float64(time.Second)), nil
}

// OutboxBackoffCount counts the outbox rows waiting out a backoff after the
// broker refused them (not the rows a receiver holds while it publishes
// them itself: those have no refusal yet).
func (db *DB) OutboxBackoffCount(ctx context.Context) (int64, error) {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	var n int64
	if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE attempts > 0 AND next_try_at > now()`).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting outbox rows in backoff: %w", err)
	}
	return n, nil
}

func isUndefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}

// EventHeaders returns the stored headers of event id (the sender's, less
// credentials), or webhook.ErrEventMissing with ErrNotFound. A
// transformation that reads them asks for them here at delivery: a message
// does not carry them.
func (db *DB) EventHeaders(ctx context.Context, id uuid.UUID) (http.Header, error) {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	var h http.Header
	err := db.pool.QueryRow(ctx, `SELECT headers FROM events WHERE id = $1`, pgUUID(id)).Scan(&h)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %w", webhook.ErrEventMissing, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading event headers: %w", err)
	}
	return h, nil
}

// DeliveryExists reports whether the (event, route) pair exists. A route
// with a filter asks when a copy not addressed to it arrives (a binding
// left from before its filter): its pairs are made only where its filter
// took the event, so a copy without a pair is not its to deliver.
func (db *DB) DeliveryExists(ctx context.Context, eventID uuid.UUID, route string) (bool, error) {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	var ok bool
	err := db.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM deliveries WHERE event_id = $1 AND route = $2)`,
		pgUUID(eventID), route).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("reading delivery: %w", err)
	}
	return ok, nil
}
