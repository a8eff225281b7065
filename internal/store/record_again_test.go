package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/stretchr/testify/require"
)

// Issue 18, item 1: a record's outcome is known to its caller. A grouped
// record waits behind rows another transaction holds (a purge, a replay,
// an fsync stall); its caller gives up (the query timeout) while the batch
// goes on and commits the retry. The caller, as a delivery does, records
// again: it gets what the batch committed (the retry's generation, its
// copy in the outbox), not ErrLeaseLost, and the attempt is stored once,
// not again as lost_lease.
func TestRecordOutcomeIsKnownToItsCaller(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	retry := func(id uuid.UUID) *webhook.Attempt {
		return &webhook.Attempt{EventID: id, Route: "billing", Number: 1, StartedAt: time.Now(), Status: 503,
			Outcome: webhook.StateRetrying, RetryIn: time.Minute}
	}

	t.Run("grouped, the caller gave up while its batch waited", func(t *testing.T) {
		t.Parallel()
		db, _ := storetest.Open(t)
		db.GroupDeliveries(64, nil)
		id := insertBilling(t, db, "evt_gave_up")
		lease, err := db.DeliveryClaim(ctx, uuid.New(), id, "billing", 1, 0, time.Minute)
		require.NoError(t, err)

		// Another transaction holds the pair's row.
		holder, err := db.Pool().Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = holder.Rollback(ctx) }()
		_, err = holder.Exec(ctx, `SELECT 1 FROM deliveries WHERE event_id = $1 FOR UPDATE`, id)
		require.NoError(t, err)

		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, _, err = lease.Record(short, retry(id))
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded, "the caller gave up")
		require.NoError(t, holder.Rollback(ctx))
		// The batch, not the caller's, goes on and commits.
		require.Eventually(t, func() bool { return readLease(t, db, id).state == "retrying" }, 10*time.Second, 10*time.Millisecond)

		gen, current, err := lease.Record(ctx, retry(id))
		require.NoError(t, err, "the record committed: the caller is told so")
		require.EqualValues(t, 1, gen)
		require.True(t, current)
		r := readLease(t, db, id)
		require.Equal(t, []string{"retrying"}, r.outcomes, "the attempt stored once")
		require.Nil(t, r.owner, "released")
		require.Len(t, retryRows(t, db, id), 1, "one retry copy")
	})

	t.Run("alone, the answer lost after the commit", func(t *testing.T) {
		t.Parallel()
		db, _ := storetest.Open(t)
		id := insertBilling(t, db, "evt_answer_lost")
		lease, err := db.DeliveryClaim(ctx, uuid.New(), id, "billing", 1, 0, time.Minute)
		require.NoError(t, err)
		gen, current, err := lease.Record(ctx, retry(id))
		require.NoError(t, err)
		// The caller never saw that answer and records again.
		again, againCurrent, err := lease.Record(ctx, retry(id))
		require.NoError(t, err)
		require.Equal(t, gen, again)
		require.Equal(t, current, againCurrent)
		require.Equal(t, []string{"retrying"}, readLease(t, db, id).outcomes)
		require.Len(t, retryRows(t, db, id), 1)
	})

	t.Run("a lost lease is still lost", func(t *testing.T) {
		t.Parallel()
		db, _ := storetest.Open(t)
		id := insertBilling(t, db, "evt_taken_over")
		lease, err := db.DeliveryClaim(ctx, uuid.New(), id, "billing", 1, 0, time.Minute)
		require.NoError(t, err)
		expireLease(t, db, id)
		_, err = db.DeliveryClaim(ctx, uuid.New(), id, "billing", 1, 0, time.Minute)
		require.NoError(t, err)
		_, _, err = lease.Record(ctx, retry(id))
		require.True(t, errors.Is(err, store.ErrLeaseLost), "got %v", err)
		_, _, err = lease.Record(ctx, retry(id))
		require.ErrorIs(t, err, store.ErrLeaseLost, "a lost_lease row answers nothing")
	})
}

// Issue 18, item 5: a claim commits without a WAL flush, so a Postgres
// crash within about 3 x wal_writer_delay after it can lose it, however
// long the POST then takes. The holder's record then finds no lease at
// all; nobody else holds the pair, so its attempt is recorded as if held
// (a success delivers the pair) instead of being stored as lost_lease and
// POSTed again. A lease another claim holds still fences it off.
func TestRecordAfterALostClaim(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	lose := func(id uuid.UUID) {
		// What a crash does to a claim whose WAL was not flushed.
		_, err := db.Pool().Exec(ctx, `UPDATE deliveries SET lease_owner = NULL, lease_at = NULL, lease_until = NULL, lease_attempt = NULL
			WHERE event_id = $1`, id)
		require.NoError(t, err)
	}
	ok := func(id uuid.UUID) *webhook.Attempt {
		return &webhook.Attempt{EventID: id, Route: "billing", Number: 1, StartedAt: time.Now(), Status: 204, Outcome: webhook.StateDelivered}
	}

	id := insertBilling(t, db, "evt_claim_lost")
	lease, err := db.DeliveryClaim(ctx, uuid.New(), id, "billing", 1, 0, time.Minute)
	require.NoError(t, err)
	lose(id)
	_, current, err := lease.Record(ctx, ok(id))
	require.NoError(t, err, "nobody else holds the pair")
	require.True(t, current)
	r := readLease(t, db, id)
	require.Equal(t, "delivered", r.state)
	require.Equal(t, []string{"delivered"}, r.outcomes)

	other := insertBilling(t, db, "evt_claim_lost_taken")
	lease, err = db.DeliveryClaim(ctx, uuid.New(), other, "billing", 1, 0, time.Minute)
	require.NoError(t, err)
	lose(other)
	_, err = db.DeliveryClaim(ctx, uuid.New(), other, "billing", 1, 0, time.Minute) // a duplicate copy claims meanwhile
	require.NoError(t, err)
	_, _, err = lease.Record(ctx, ok(other))
	require.ErrorIs(t, err, store.ErrLeaseLost, "another claim holds the pair")
	require.Equal(t, "pending", readLease(t, db, other).state)

	// The grouped statement alike.
	lostG, keptG := insertBilling(t, db, "evt_claim_lost_g"), insertBilling(t, db, "evt_claim_kept_g")
	lLost, err := db.DeliveryClaim(ctx, uuid.New(), lostG, "billing", 1, 0, time.Minute)
	require.NoError(t, err)
	lKept, err := db.DeliveryClaim(ctx, uuid.New(), keptG, "billing", 1, 0, time.Minute)
	require.NoError(t, err)
	lose(lostG)
	res, err := db.RecordTogether(ctx, []*store.DeliveryLease{lLost, lKept}, []*webhook.Attempt{ok(lostG), ok(keptG)})
	require.NoError(t, err)
	for i, r := range res {
		require.False(t, r.Alone)
		require.NoError(t, r.Err, "record %d", i)
	}
	require.Equal(t, "delivered", readLease(t, db, lostG).state)
	require.Equal(t, "delivered", readLease(t, db, keptG).state)
	// Recorded again (the answer lost): the same answer, nothing stored twice.
	res, err = db.RecordTogether(ctx, []*store.DeliveryLease{lLost, lKept}, []*webhook.Attempt{ok(lostG), ok(keptG)})
	require.NoError(t, err)
	for i, r := range res {
		require.NoError(t, r.Err, "record %d again", i)
		require.True(t, r.Val.Current)
	}
	require.Equal(t, []string{"delivered"}, readLease(t, db, lostG).outcomes)
	require.Equal(t, []string{"delivered"}, readLease(t, db, keptG).outcomes)
}
