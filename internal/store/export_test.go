package store

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/webhook"
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
