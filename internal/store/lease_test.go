package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/stretchr/testify/require"
)

// leaseRow is what Postgres holds of a pair's lease and attempts.
type leaseRow struct {
	state    string
	gen      int64
	attempts int
	owner    *uuid.UUID
	outcomes []string
	numbers  []int
}

// readLease reads the billing pair of event id; t is the test, or
// EventuallyWithT's collector inside a condition.
func readLease(t require.TestingT, db *store.DB, id uuid.UUID) leaseRow {
	var r leaseRow
	err := db.Pool().QueryRow(context.Background(), `
		SELECT d.state, d.gen, d.attempts, d.lease_owner,
		       COALESCE((SELECT array_agg(a.outcome ORDER BY a.id) FROM delivery_attempts a WHERE a.delivery_id = d.id), '{}'),
		       COALESCE((SELECT array_agg(a.attempt ORDER BY a.id) FROM delivery_attempts a WHERE a.delivery_id = d.id), '{}')
		FROM deliveries d WHERE d.event_id = $1 AND d.route = 'billing'`, id,
	).Scan(&r.state, &r.gen, &r.attempts, &r.owner, &r.outcomes, &r.numbers)
	require.NoError(t, err)
	return r
}

// insertBilling stores an event of source acme with key, routed to
// billing (a pending pair), and returns its id.
func insertBilling(t *testing.T, db *store.DB, key string) uuid.UUID {
	t.Helper()
	id, _, err := db.EventInsert(context.Background(), newEvent("acme", key), []string{"billing"})
	require.NoError(t, err)
	return id
}

// expireLease moves the pair's lease into the past, as time would.
func expireLease(t *testing.T, db *store.DB, id uuid.UUID) {
	t.Helper()
	tag, err := db.Pool().Exec(context.Background(),
		`UPDATE deliveries SET lease_until = now() - interval '1 second' WHERE event_id = $1 AND lease_owner IS NOT NULL`, id)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
}

// Issue 11: a claim takes a lease in one statement; a second claim meets
// it live; the record is fenced by it and releases it; a delivered pair is
// read, not claimed; an expired lease is taken over, its attempt counted
// as lease_expired, and its late record changes nothing but its own
// attempt row (lost_lease).
func TestDeliveryClaimLease(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	insert := func(key string) uuid.UUID { return insertBilling(t, db, key) }

	// A claim whose answer was lost (its deadline passed after Postgres
	// took the lease) is tried again by the same delivery, with the same
	// owner: it gets the pair at once instead of waiting out its own
	// lease, and it is no takeover (no attempt counted as expired).
	t.Run("the owner claims again", func(t *testing.T) {
		id := insert("evt_again")
		owner := uuid.New()
		_, err := db.DeliveryClaim(ctx, owner, id, "billing", 1, 0, time.Minute)
		require.NoError(t, err)
		again, err := db.DeliveryClaim(ctx, owner, id, "billing", 1, 0, time.Minute)
		require.NoError(t, err, "its own lease does not make the pair busy")
		require.False(t, again.TookOver)
		require.Zero(t, readLease(t, db, id).attempts, "no attempt counted")
		_, err = db.DeliveryClaim(ctx, uuid.New(), id, "billing", 1, 0, time.Minute)
		var busy *webhook.LeaseBusyError
		require.ErrorAs(t, err, &busy, "anyone else still finds it busy")
		_, _, err = again.Record(ctx, &webhook.Attempt{EventID: id, Route: "billing", Number: 1, Status: 200,
			StartedAt: time.Now(), Outcome: webhook.StateDelivered})
		require.NoError(t, err)
	})

	// A pair recorded stale is final like a delivered one: a copy that
	// comes back (its ack was lost) reads it without taking a lease.
	t.Run("stale is final", func(t *testing.T) {
		id := insert("evt_stale_final")
		a, err := db.DeliveryClaim(ctx, uuid.New(), id, "billing", 1, 0, time.Minute)
		require.NoError(t, err)
		_, _, err = a.Record(ctx, &webhook.Attempt{EventID: id, Route: "billing", Number: 1,
			StartedAt: time.Now(), Error: "stale", Outcome: webhook.StateStale})
		require.NoError(t, err)
		again, err := db.DeliveryClaim(ctx, uuid.New(), id, "billing", 1, 0, time.Minute)
		require.NoError(t, err)
		require.Equal(t, webhook.StateStale, again.State())
		require.Nil(t, readLease(t, db, id).owner, "read, not claimed")
	})

	t.Run("live, recorded, delivered", func(t *testing.T) {
		id := insert("evt_live")
		a, err := db.DeliveryClaim(ctx, uuid.New(), id, "billing", 1, 0, time.Minute)
		require.NoError(t, err)
		require.Equal(t, webhook.StatePending, a.State())
		require.False(t, a.TookOver)
		require.NotNil(t, readLease(t, db, id).owner)

		_, err = db.DeliveryClaim(ctx, uuid.New(), id, "billing", 1, 0, time.Minute)
		var busy *webhook.LeaseBusyError
		require.ErrorAs(t, err, &busy)
		require.Greater(t, busy.Remaining, 50*time.Second)
		require.LessOrEqual(t, busy.Remaining, time.Minute)
		require.Zero(t, readLease(t, db, id).attempts, "meeting a lease consumes no attempt")

		gen, current, err := a.Record(ctx, &webhook.Attempt{EventID: id, Route: "billing", Number: 1, StartedAt: time.Now(), Status: 200, Outcome: webhook.StateDelivered})
		require.NoError(t, err)
		require.Zero(t, gen)
		require.True(t, current)
		r := readLease(t, db, id)
		require.Equal(t, "delivered", r.state)
		require.Equal(t, 1, r.attempts)
		require.Nil(t, r.owner, "the record released the lease")
		require.Equal(t, []string{"delivered"}, r.outcomes)

		c, err := db.DeliveryClaim(ctx, uuid.New(), id, "billing", 1, 0, time.Minute)
		require.NoError(t, err)
		require.Equal(t, webhook.StateDelivered, c.State())
		require.Nil(t, readLease(t, db, id).owner, "a delivered pair is read, not leased")
		require.NoError(t, c.Release(ctx))
	})

	t.Run("expired, taken over, lost", func(t *testing.T) {
		id := insert("evt_expired")
		a, err := db.DeliveryClaim(ctx, uuid.New(), id, "billing", 3, 0, time.Minute)
		require.NoError(t, err)
		expireLease(t, db, id)

		b, err := db.DeliveryClaim(ctx, uuid.New(), id, "billing", 3, 0, time.Minute)
		require.NoError(t, err)
		require.True(t, b.TookOver)
		r := readLease(t, db, id)
		require.Equal(t, []string{"lease_expired"}, r.outcomes)
		require.Equal(t, []int{3}, r.numbers, "the dead holder's attempt number")
		require.Equal(t, 1, r.attempts, "the abandoned attempt counts")

		_, _, err = a.Record(ctx, &webhook.Attempt{EventID: id, Route: "billing", Number: 3, StartedAt: time.Now(), Status: 200, Outcome: webhook.StateDelivered})
		require.ErrorIs(t, err, webhook.ErrLeaseLost)
		r = readLease(t, db, id)
		require.Equal(t, "pending", r.state, "a lost lease's success is not taken as the pair's")
		require.Equal(t, 1, r.attempts)
		require.Equal(t, []string{"lease_expired", "lost_lease"}, r.outcomes)
		require.NotNil(t, r.owner, "the new holder keeps its lease")
		require.NoError(t, a.Release(ctx))
		require.NotNil(t, readLease(t, db, id).owner, "the old holder's release does not touch the new lease")

		gen, current, err := b.Record(ctx, &webhook.Attempt{EventID: id, Route: "billing", Number: 3, StartedAt: time.Now(), Status: 503, Outcome: webhook.StateRetrying, RetryIn: time.Minute})
		require.NoError(t, err)
		require.EqualValues(t, 1, gen)
		require.True(t, current)
		r = readLease(t, db, id)
		require.Equal(t, "retrying", r.state)
		require.Equal(t, 2, r.attempts)
		require.Nil(t, r.owner)
	})

	t.Run("released without a record", func(t *testing.T) {
		id := insert("evt_released")
		a, err := db.DeliveryClaim(ctx, uuid.New(), id, "billing", 1, 0, time.Minute)
		require.NoError(t, err)
		require.NoError(t, a.Release(ctx))
		b, err := db.DeliveryClaim(ctx, uuid.New(), id, "billing", 1, 0, time.Minute)
		require.NoError(t, err, "a released lease is free at once")
		require.False(t, b.TookOver, "a released lease is no abandoned attempt")
		require.Zero(t, readLease(t, db, id).attempts)
	})

	t.Run("stale copy", func(t *testing.T) {
		id := insert("evt_stale")
		a, err := db.DeliveryClaim(ctx, uuid.New(), id, "billing", 1, 0, time.Minute)
		require.NoError(t, err)
		owner := readLease(t, db, id).owner
		// A copy of another generation has nothing to deliver: it reads
		// the pair, even while a lease is live, and takes no lease.
		stale, err := db.DeliveryClaim(ctx, uuid.New(), id, "billing", 1, 7, time.Minute)
		require.NoError(t, err)
		require.Zero(t, stale.Gen())
		require.NoError(t, stale.Release(ctx))
		require.Equal(t, owner, readLease(t, db, id).owner, "the live lease is untouched")
		require.NoError(t, a.Release(ctx))
	})

	t.Run("moved on during the attempt", func(t *testing.T) {
		id := insert("evt_moved")
		a, err := db.DeliveryClaim(ctx, uuid.New(), id, "billing", 1, 0, time.Minute)
		require.NoError(t, err)
		// A replay sends a new copy while the attempt is in flight.
		_, err = db.Pool().Exec(ctx, `UPDATE deliveries SET gen = gen + 1 WHERE event_id = $1`, id)
		require.NoError(t, err)
		gen, current, err := a.Record(ctx, &webhook.Attempt{EventID: id, Route: "billing", Number: 1, StartedAt: time.Now(), Status: 503, Outcome: webhook.StateRetrying, RetryIn: time.Minute})
		require.NoError(t, err)
		require.False(t, current)
		require.EqualValues(t, 1, gen, "the replay's generation, not a new one")
		r := readLease(t, db, id)
		require.Equal(t, "pending", r.state, "the newer copy owns the pair")
		require.Equal(t, 1, r.attempts)
		require.Nil(t, r.owner)
	})

	t.Run("purged event", func(t *testing.T) {
		_, err := db.DeliveryClaim(ctx, uuid.New(), uuid.New(), "billing", 1, 0, time.Minute)
		require.ErrorIs(t, err, store.ErrNotFound)
		require.ErrorIs(t, err, webhook.ErrEventMissing)
	})
}

// Issue 11: a pair with a live lease is in flight; the reconciler and
// `hookrelay retry` leave it alone until the lease is released or expires.
func TestReconcileAndRetrySkipLiveLease(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	overdue := func(key string) uuid.UUID {
		id, _, err := db.EventInsert(ctx, newEvent("acme", key), []string{"billing"})
		require.NoError(t, err)
		_, _, err = db.AttemptRecord(ctx, &webhook.Attempt{EventID: id, Route: "billing", Number: 1, StartedAt: time.Now(), Status: 503, Outcome: webhook.StateRetrying, RetryIn: time.Minute})
		require.NoError(t, err)
		_, err = db.Pool().Exec(ctx, `UPDATE deliveries SET due_at = now() - interval '1 hour' WHERE event_id = $1`, id)
		require.NoError(t, err)
		_, err = db.Pool().Exec(ctx, `DELETE FROM outbox WHERE event_id = $1`, id)
		require.NoError(t, err)
		// A dispatcher holds it: the retry tier's copy is being delivered.
		_, err = db.DeliveryClaim(ctx, uuid.New(), id, "billing", 2, 1, time.Minute)
		require.NoError(t, err)
		return id
	}
	e1, e2 := overdue("evt_1"), overdue("evt_2")

	rec, err := db.DeliveryReconcile(ctx, "billing", time.Minute, 10, nil)
	require.NoError(t, err)
	require.Empty(t, rec, "the reconciler skips pairs in flight")
	ret, err := db.DeliveryRetryNow(ctx, store.RetrySelection{Route: "billing"}, 0, 10)
	require.NoError(t, err)
	require.Empty(t, ret, "retry now skips pairs in flight")

	expireLease(t, db, e1)
	ret, err = db.DeliveryRetryNow(ctx, store.RetrySelection{Route: "billing"}, 0, 10)
	require.NoError(t, err)
	require.Len(t, ret, 1, "an expired lease is no longer in flight")
	require.Equal(t, e1, ret[0].EventID)

	// Issue 25: a lease expired less than the margin ago may be held
	// still (its holder waits for Postgres to record); the reconciler
	// leaves it a margin.
	expireLease(t, db, e2)
	rec, err = db.DeliveryReconcile(ctx, "billing", time.Minute, 10, nil)
	require.NoError(t, err)
	require.Empty(t, rec, "a lease expired a second ago")
	_, err = db.Pool().Exec(ctx, `UPDATE deliveries SET lease_until = now() - interval '61 seconds' WHERE event_id = $1`, e2)
	require.NoError(t, err)
	rec, err = db.DeliveryReconcile(ctx, "billing", time.Minute, 10, nil)
	require.NoError(t, err)
	require.Len(t, rec, 1)
	require.Equal(t, e2, rec[0].EventID)
}
