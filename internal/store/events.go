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
// routes (the routes whose bindings match it) in one transaction. When an
// event of the same source exists with the same idempotency key, or with the
// same body hash (ev.BodySHA256, set for sources that deduplicate on the
// body), nothing is written and the existing event's id is returned with
// duplicate true; one matching the key wins over one matching only the
// body. ev.ID and ev.ReceivedAt must be set by the caller.
//
// Concurrent inserts of one key or one body are safe: INSERT ... ON
// CONFLICT DO NOTHING, without a conflict target, checks every unique index
// (the key's and the partial one on (source, body_sha256)) and waits for the
// other transaction; the follow-up SELECT (a new snapshot under READ
// COMMITTED) then sees its row. A NULL hash never conflicts.
func (db *DB) EventInsert(ctx context.Context, ev *webhook.Event, routes []string) (id uuid.UUID, duplicate bool, err error) {
	err = db.InTx(ctx, func(tx pgx.Tx) error {
		headers := ev.Headers
		if headers == nil {
			headers = http.Header{}
		}
		err := tx.QueryRow(ctx, `
			INSERT INTO events (id, source, idempotency_key, event_type, content_type, headers, body, body_sha256, received_at,
				ordering_resource, ordering_version, ordering_version_num)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, NULLIF($10, ''), NULLIF($11, ''), NULLIF($12, '')::numeric)
			ON CONFLICT DO NOTHING
			RETURNING id`,
			ev.ID, ev.Source, ev.IdempotencyKey, ev.EventType, ev.ContentType, headers, ev.Body, ev.BodySHA256, ev.ReceivedAt,
			ev.OrderingResource, ev.OrderingVersion, ev.OrderingVersionNum,
		).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			duplicate = true
			err = tx.QueryRow(ctx, `
				SELECT id FROM events
				WHERE source = $1 AND (idempotency_key = $2 OR body_sha256 = $3)
				ORDER BY idempotency_key = $2 DESC
				LIMIT 1`,
				ev.Source, ev.IdempotencyKey, ev.BodySHA256,
			).Scan(&id)
			if err != nil {
				return fmt.Errorf("reading duplicate event: %w", err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("inserting event: %w", err)
		}
		if _, err := tx.Exec(ctx,
			`INSERT INTO outbox (event_id, routing_key) VALUES ($1, $2)`,
			id, ev.RoutingKey(),
		); err != nil {
			return fmt.Errorf("inserting outbox row: %w", err)
		}
		if len(routes) > 0 {
			// Pending from the moment of acceptance: "which events have not
			// arrived" has an answer even before a dispatcher saw them.
			if _, err := tx.Exec(ctx,
				`INSERT INTO deliveries (event_id, route) SELECT $1, unnest($2::text[])`,
				id, routes,
			); err != nil {
				return fmt.Errorf("inserting deliveries: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return uuid.Nil, false, err
	}
	return id, duplicate, nil
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
// broker refused them.
func (db *DB) OutboxBackoffCount(ctx context.Context) (int64, error) {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	var n int64
	if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE next_try_at > now()`).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting outbox rows in backoff: %w", err)
	}
	return n, nil
}

func isUndefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}
