package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
)

// recorder makes the bare forwarder the recording forwarder: the least a
// forwarder must do to keep DESIGN.md's invariants 3 and 5, written
// plainly. Per message:
//
//  1. one read: is the message recorded as delivered? Then ack it with no
//     POST (invariant 5: a redelivery after a 2xx is not sent again);
//  2. the POST;
//  3. one write, committed (synchronous_commit as the server has it)
//     before the ack: the outcome (invariant 3: acked only after its
//     outcome is recorded);
//  4. the ack on a 2xx, a requeue otherwise.
//
// No lease, no attempt history, no retry tiers, no grouping of statements:
// it is a floor for what any relay keeping those two invariants costs
// Postgres and its own process per delivery, not a relay.
type recorder struct {
	pool         *pgxpool.Pool
	read, record string
}

// recordTimeout bounds each of the recorder's statements.
const recordTimeout = 5 * time.Second

// openRecorder connects to dbURL and creates table when it is missing.
func openRecorder(ctx context.Context, dbURL string, maxConns int, table string) (*recorder, error) {
	switch {
	case dbURL == "":
		return nil, errors.New("--database-url: needed with --table")
	case table == "":
		return nil, errors.New("--table: needed with --database-url")
	}
	pool, err := barePool(ctx, dbURL, maxConns, "hookrelay-bench-recording-forwarder")
	if err != nil {
		return nil, err
	}
	t := pgx.Identifier{table}.Sanitize()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := pool.Exec(cctx, `CREATE TABLE IF NOT EXISTS `+t+` (
		message_id  text PRIMARY KEY,
		delivered   boolean NOT NULL,
		attempts    int NOT NULL,
		last_status int,
		updated_at  timestamptz NOT NULL DEFAULT now())`); err != nil {
		pool.Close()
		return nil, fmt.Errorf("creating %s: %w", t, err)
	}
	return &recorder{
		pool: pool,
		read: `SELECT delivered FROM ` + t + ` WHERE message_id = $1`,
		record: `INSERT INTO ` + t + ` AS o (message_id, delivered, attempts, last_status) VALUES ($1, $2, 1, $3)
			ON CONFLICT (message_id) DO UPDATE SET delivered = o.delivered OR excluded.delivered,
			attempts = o.attempts + 1, last_status = excluded.last_status, updated_at = now()`,
	}, nil
}

// deliver handles d as described on recorder, with post making the POST.
// Its error is the forwarder's end: a statement that failed (the bench
// must not measure a forwarder that skipped its writes) or an ack or a
// requeue the broker refused.
func (r *recorder) deliver(ctx context.Context, d amqp.Delivery, post func() (int, error)) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	var delivered bool
	switch err := r.pool.QueryRow(sctx, r.read, d.MessageId).Scan(&delivered); {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return fmt.Errorf("reading the outcome of %s: %w", d.MessageId, err)
	}
	if delivered {
		if err := d.Ack(false); err != nil {
			return fmt.Errorf("acking: %w", err)
		}
		return nil
	}
	status, postErr := post()
	var last *int
	if status != 0 {
		last = &status
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	if _, err := r.pool.Exec(rctx, r.record, d.MessageId, postErr == nil, last); err != nil {
		return fmt.Errorf("recording the outcome of %s: %w", d.MessageId, err)
	}
	if postErr != nil {
		if err := d.Nack(false, true); err != nil {
			return fmt.Errorf("requeueing after %v: %w", postErr, err)
		}
		return nil
	}
	if err := d.Ack(false); err != nil {
		return fmt.Errorf("acking: %w", err)
	}
	return nil
}
