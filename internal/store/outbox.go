package store

import (
	"context"
	"fmt"

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

// OutboxClaim locks up to limit unpublished rows, oldest first, skipping rows
// another publisher holds. An empty batch has no transaction open.
func (db *DB) OutboxClaim(ctx context.Context, limit int) (*OutboxBatch, error) {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("beginning outbox claim: %w", err)
	}
	rows, err := tx.Query(ctx, `
		SELECT o.id, o.routing_key, COALESCE(o.route, ''), e.id, e.source, e.event_type, e.content_type, e.body, e.received_at
		FROM outbox o
		JOIN events e ON e.id = o.event_id
		ORDER BY o.id
		LIMIT $1
		FOR UPDATE OF o SKIP LOCKED`, limit)
	if err != nil {
		db.rollback(ctx, tx)
		return nil, fmt.Errorf("claiming outbox batch: %w", err)
	}
	msgs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (webhook.Message, error) {
		var m webhook.Message
		err := row.Scan(&m.OutboxID, &m.RoutingKey, &m.Route, &m.EventID, &m.Source, &m.EventType, &m.ContentType, &m.Body, &m.ReceivedAt)
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

// Complete deletes the rows whose publish was confirmed and commits. Rows not
// listed are released for the next claim.
func (b *OutboxBatch) Complete(ctx context.Context, confirmed []int64) error {
	if b.tx == nil {
		return nil
	}
	ctx, cancel := b.db.bound(ctx)
	defer cancel()
	if len(confirmed) > 0 {
		if _, err := b.tx.Exec(ctx, `DELETE FROM outbox WHERE id = ANY($1)`, confirmed); err != nil {
			b.db.rollback(ctx, b.tx)
			return fmt.Errorf("deleting published outbox rows: %w", err)
		}
	}
	if err := b.tx.Commit(ctx); err != nil {
		return fmt.Errorf("committing outbox batch: %w", err)
	}
	return nil
}

// Release gives every row back without deleting any.
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
