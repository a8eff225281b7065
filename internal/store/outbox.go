package store

import (
	"context"
	"fmt"
	"time"

	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/jackc/pgx/v5"
)

// OutboxChannel is the LISTEN/NOTIFY channel that outbox inserts signal.
const OutboxChannel = "hookrelay_outbox"

// OutboxBatch is a set of claimed outbox rows. The rows stay locked by the
// batch's transaction (other publishers skip them) until Complete or Release.
// If the process dies first, Postgres rolls the transaction back and the rows
// become claimable again: a publish may repeat, it is never lost.
type OutboxBatch struct {
	db       *DB
	tx       pgx.Tx
	messages []webhook.Message
}

// OutboxFailure is a claimed row whose message the broker refused.
type OutboxFailure struct {
	OutboxID int64
	// Reason is recorded as the row's last_error.
	Reason string
	// RetryIn is how long the row waits before a claim takes it again.
	RetryIn time.Duration
}

// OutboxClaim locks up to limit unpublished rows that are due (next_try_at
// reached), oldest first, skipping rows another publisher holds. A row the
// broker refused waits out its backoff without holding back the rows behind
// it. An empty batch has no transaction open.
func (db *DB) OutboxClaim(ctx context.Context, limit int) (*OutboxBatch, error) {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("beginning outbox claim: %w", err)
	}
	rows, err := tx.Query(ctx, `
		SELECT o.id, o.attempts, o.routing_key, COALESCE(o.route, ''), COALESCE(o.gen, 0), COALESCE(o.attempt, 1),
		       e.id, e.source, e.event_type, e.content_type, e.body, e.received_at
		FROM outbox o
		JOIN events e ON e.id = o.event_id
		WHERE o.next_try_at <= now()
		ORDER BY o.id
		LIMIT $1
		FOR UPDATE OF o SKIP LOCKED`, limit)
	if err != nil {
		db.rollback(ctx, tx)
		return nil, fmt.Errorf("claiming outbox batch: %w", err)
	}
	msgs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (webhook.Message, error) {
		var m webhook.Message
		err := row.Scan(&m.OutboxID, &m.OutboxAttempts, &m.RoutingKey, &m.Route, &m.Gen, &m.Attempt,
			&m.EventID, &m.Source, &m.EventType, &m.ContentType, &m.Body, &m.ReceivedAt)
		return m, err
	})
	if err != nil {
		db.rollback(ctx, tx)
		return nil, fmt.Errorf("reading outbox batch: %w", err)
	}
	if len(msgs) == 0 {
		if err := tx.Rollback(ctx); err != nil {
			return nil, fmt.Errorf("ending empty outbox claim: %w", err)
		}
		return &OutboxBatch{}, nil
	}
	return &OutboxBatch{db: db, tx: tx, messages: msgs}, nil
}

// Messages returns the claimed rows with their events.
func (b *OutboxBatch) Messages() []webhook.Message { return b.messages }

// Complete deletes the rows whose publish was confirmed, records each
// failure on its row (one more attempt, the reason, the next try after its
// RetryIn), and commits. Rows in neither list are released as they were.
// Nothing is written unless all of it commits.
func (b *OutboxBatch) Complete(ctx context.Context, confirmed []int64, failed []OutboxFailure) error {
	if b.tx == nil {
		return nil
	}
	ctx, cancel := b.db.bound(ctx)
	defer cancel()
	// A lost completion only publishes its rows again (lax.go): no need
	// to wait for the WAL flush.
	if _, err := b.tx.Exec(ctx, `SET LOCAL synchronous_commit = off`); err != nil {
		b.db.rollback(ctx, b.tx)
		return fmt.Errorf("completing outbox batch: %w", err)
	}
	if len(confirmed) > 0 {
		if _, err := b.tx.Exec(ctx, `DELETE FROM outbox WHERE id = ANY($1)`, confirmed); err != nil {
			b.db.rollback(ctx, b.tx)
			return fmt.Errorf("deleting published outbox rows: %w", err)
		}
	}
	if len(failed) > 0 {
		ids := make([]int64, len(failed))
		reasons := make([]string, len(failed))
		delays := make([]int64, len(failed))
		for i, f := range failed {
			ids[i], reasons[i], delays[i] = f.OutboxID, f.Reason, f.RetryIn.Milliseconds()
		}
		// clock_timestamp(), not now(): now() is when the claim began, and
		// the publish may have taken most of the confirm timeout since.
		if _, err := b.tx.Exec(ctx, `
			UPDATE outbox o SET
				attempts    = o.attempts + 1,
				next_try_at = clock_timestamp() + f.delay_ms * interval '1 millisecond',
				last_error  = f.reason
			FROM unnest($1::bigint[], $2::text[], $3::bigint[]) AS f(id, reason, delay_ms)
			WHERE o.id = f.id`, ids, reasons, delays); err != nil {
			b.db.rollback(ctx, b.tx)
			return fmt.Errorf("recording refused outbox rows: %w", err)
		}
	}
	if err := b.tx.Commit(ctx); err != nil {
		return fmt.Errorf("committing outbox batch: %w", err)
	}
	return nil
}

// Release gives every row back without deleting or counting any.
func (b *OutboxBatch) Release(ctx context.Context) error {
	if b.tx == nil {
		return nil
	}
	ctx, cancel := b.db.bound(ctx)
	defer cancel()
	if err := b.tx.Rollback(ctx); err != nil {
		return fmt.Errorf("releasing outbox batch: %w", err)
	}
	return nil
}
