package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ActivityCount is what one minute saw of one source's requests or one
// route's deliveries: N of Outcome (and Reason, for rejections).
type ActivityCount struct {
	Minute  time.Time `json:"minute"`
	Kind    string    `json:"kind"`
	Name    string    `json:"name"`
	Outcome string    `json:"outcome"`
	Reason  string    `json:"reason,omitempty"`
	N       int64     `json:"n"`
}

// Activity kinds.
const (
	ActivityIngest   = "ingest"
	ActivityDelivery = "delivery"
)

// ActivityAdd adds counts to the minutes' rows in one statement, and
// deletes rows older than keep when keep is positive.
func (db *DB) ActivityAdd(ctx context.Context, counts []ActivityCount, keep time.Duration) error {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	n := len(counts)
	minutes, kinds, names, outcomes, reasons, ns := make([]time.Time, n), make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]int64, n)
	for i, c := range counts {
		minutes[i], kinds[i], names[i], outcomes[i], reasons[i], ns[i] = c.Minute, c.Kind, c.Name, c.Outcome, c.Reason, c.N
	}
	batch := &pgx.Batch{}
	if n > 0 {
		batch.Queue(`
			INSERT INTO activity_minutes AS a (minute, kind, name, outcome, reason, n)
			SELECT * FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[])
			ON CONFLICT (minute, kind, name, outcome, reason) DO UPDATE SET n = a.n + EXCLUDED.n`,
			minutes, kinds, names, outcomes, reasons, ns)
	}
	if keep > 0 {
		batch.Queue(`DELETE FROM activity_minutes WHERE minute < now() - $1::interval`, keep)
	}
	if batch.Len() == 0 {
		return nil
	}
	if err := db.pool.SendBatch(ctx, batch).Close(); err != nil {
		return fmt.Errorf("adding activity counts: %w", err)
	}
	return nil
}

// ActivitySince returns the minutes' counts from since on, oldest first,
// with Postgres' time now (the minutes are read against it).
func (db *DB) ActivitySince(ctx context.Context, since time.Duration) ([]ActivityCount, time.Time, error) {
	ctx, cancel := db.boundOps(ctx)
	defer cancel()
	var now time.Time
	if err := db.pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return nil, time.Time{}, fmt.Errorf("reading activity: %w", err)
	}
	rows, err := db.pool.Query(ctx, `
		SELECT minute, kind, name, outcome, reason, n FROM activity_minutes
		WHERE minute >= date_trunc('minute', $1::timestamptz - $2::interval)
		ORDER BY minute, kind, name, outcome, reason`, now, since)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("reading activity: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[ActivityCount])
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("reading activity: %w", err)
	}
	return out, now, nil
}
