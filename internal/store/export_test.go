package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ClaimArgs is one claim of ClaimTogether.
type ClaimArgs struct {
	Owner, EventID uuid.UUID
	Route          string
	Attempt        int
	Gen            int64
	TTL            time.Duration
}

// Together is what a grouped statement answered for one call: Alone says
// it left the call to be made on its own.
type Together[T any] struct {
	Val   T
	Err   error
	Alone bool
}

// ClaimTogether makes claims in one grouped statement, as a batch of
// GroupDeliveries would.
func (db *DB) ClaimTogether(ctx context.Context, args []ClaimArgs) ([]Together[*DeliveryLease], error) {
	items := make([]claimItem, len(args))
	for i, a := range args {
		items[i] = claimItem{owner: a.Owner, eventID: a.EventID, route: a.Route, attempt: a.Attempt, gen: a.Gen, ttl: a.TTL}
	}
	out, err := db.claimBatch(ctx, items)
	if err != nil {
		return nil, err
	}
	res := make([]Together[*DeliveryLease], len(out))
	for i, o := range out {
		res[i] = Together[*DeliveryLease]{Val: o.lease, Err: o.err, Alone: o.alone}
	}
	return res, nil
}

// Recorded is what a record answered.
type Recorded struct {
	Gen     int64
	Current bool
}

// RecordTogether records attempts of leases in one grouped statement.
func (db *DB) RecordTogether(ctx context.Context, leases []*DeliveryLease, attempts []*webhook.Attempt) ([]Together[Recorded], error) {
	items := make([]recordItem, len(leases))
	for i, l := range leases {
		items[i] = recordItem{deliveryID: l.id, eventID: l.eventID, owner: l.owner, claimAttempts: l.attempts, a: attempts[i]}
	}
	out, err := db.recordBatch(ctx, items)
	if err != nil {
		return nil, err
	}
	res := make([]Together[Recorded], len(out))
	for i, o := range out {
		res[i] = Together[Recorded]{Val: Recorded{o.gen, o.current}, Err: o.err, Alone: o.alone}
	}
	return res, nil
}

// LaxPool is the pool of writes that need no WAL flush.
func (db *DB) LaxPool() *pgxpool.Pool { return db.lax }

// MigrateTo moves the schema of the database at url to version v, up or
// down.
func MigrateTo(url string, v uint) error {
	m, closeFn, err := newMigrator(url)
	if err != nil {
		return err
	}
	defer closeFn()
	return m.Migrate(v)
}

// Querier runs statements: a transaction of LocksAfter's.
type Querier = querier

// LocksAfter runs fn four times on a new connection of the claims' pool
// (lax) or of the main pool (its settings: generic plans when db has
// them), each time in a transaction it rolls back, and answers how many
// locks the transaction held after fn: cold, the first time (the
// statements are prepared and planned), and warm, the fewest of the three
// after (their plans reused, as on every later call).
func (db *DB) LocksAfter(ctx context.Context, lax bool, fn func(q Querier) error) (cold, warm int, err error) {
	pool := db.pool
	if lax {
		pool = db.lax
	}
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	once := func() (int, error) {
		tx, err := conn.Begin(ctx)
		if err != nil {
			return 0, err
		}
		defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // rolled back whatever happened
		if err := fn(tx); err != nil {
			return 0, err
		}
		return locksOf(ctx, tx)
	}
	if cold, err = once(); err != nil {
		return 0, 0, err
	}
	// The fewest of three: a plan the backend had to make again (its
	// caches reset when the suite's other databases' DDL overflowed
	// Postgres' invalidation queue) counts a cold run's locks once, and a
	// test beside the whole suite saw that as growth (38 locks for 26).
	warm = -1
	for range 3 {
		n, err := once()
		if err != nil {
			return 0, 0, err
		}
		if warm < 0 || n < warm {
			warm = n
		}
	}
	return cold, warm, nil
}

// locksOf counts the locks q's backend holds.
func locksOf(ctx context.Context, q querier) (int, error) {
	var n int
	err := q.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid()`).Scan(&n)
	return n, err
}

// ClaimIn is DeliveryClaim's statement (alone) through q.
func (db *DB) ClaimIn(ctx context.Context, q Querier, owner, eventID uuid.UUID, route string) (*DeliveryLease, error) {
	return db.claimOn(ctx, q, owner, eventID, route, 1, nil, time.Minute)
}

// ClaimTogetherIn is ClaimTogether's statement (two claims or more)
// through q.
func (db *DB) ClaimTogetherIn(ctx context.Context, q Querier, args []ClaimArgs) error {
	items := make([]claimItem, len(args))
	for i, a := range args {
		items[i] = claimItem{owner: a.Owner, eventID: a.EventID, route: a.Route, attempt: a.Attempt, gen: a.Gen, ttl: a.TTL}
	}
	out, err := db.claimBatchOn(ctx, q, items, make([]claimOut, len(items)))
	if err != nil {
		return err
	}
	for i, o := range out {
		if o.err != nil || o.alone || o.lease == nil || !o.lease.held {
			return fmt.Errorf("claim %d not taken together: %+v", i, o)
		}
	}
	return nil
}

// RecordIn is a lease's Record statement (alone) through q.
func RecordIn(ctx context.Context, q Querier, l *DeliveryLease, a *webhook.Attempt) error {
	_, _, err := recordAttempt(ctx, q, l.id, l.eventID, l.owner, l.attempts, a)
	return err
}

// RecordTogetherIn is RecordTogether's statement (two records or more)
// through q.
func RecordTogetherIn(ctx context.Context, q Querier, leases []*DeliveryLease, attempts []*webhook.Attempt) error {
	items := make([]recordItem, len(leases))
	for i, l := range leases {
		items[i] = recordItem{deliveryID: l.id, eventID: l.eventID, owner: l.owner, claimAttempts: l.attempts, a: attempts[i]}
	}
	out, err := recordBatchOn(ctx, q, items, make([]recordOut, len(items)))
	if err != nil {
		return err
	}
	for i, o := range out {
		if o.err != nil || o.alone {
			return fmt.Errorf("record %d not made together: %+v", i, o)
		}
	}
	return nil
}

// ReleaseIn is a lease's Release statement through q.
func ReleaseIn(ctx context.Context, q Querier, l *DeliveryLease) error { return l.releaseOn(ctx, q) }

// RestartIn is a lease's Restart statement through q.
func RestartIn(ctx context.Context, q Querier, l *DeliveryLease) error {
	_, err := l.restartOn(ctx, q)
	return err
}

// StaleIn is DeliveryStale's statement through q.
func StaleIn(ctx context.Context, q Querier, eventID uuid.UUID, route string) error {
	_, err := deliveryStale(ctx, q, eventID, route)
	return err
}

// OutboxLocks answers how many locks the transaction of a claimed outbox
// batch holds.
func (db *DB) OutboxLocks(ctx context.Context, b *OutboxBatch) (int, error) {
	var n int
	err := db.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE pid = $1`, b.conn.Conn().PgConn().PID()).Scan(&n)
	return n, err
}

// LocksIn counts the locks q's backend holds.
func LocksIn(ctx context.Context, q Querier) (int, error) { return locksOf(ctx, q) }

// HoldLocks runs fn in a transaction of the claims' pool, rolled back
// when fn returns.
func (db *DB) HoldLocks(ctx context.Context, fn func(q Querier) error) error {
	tx, err := db.lax.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // rolled back whatever happened
	return fn(tx)
}
