package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Issue 18, item 1: a record's outcome is known to its caller. A grouped
// record waits behind rows another transaction holds (a purge, a replay,
// an fsync stall); its caller gives up (the query timeout) while the batch
// goes on and commits the retry. The caller, as a delivery does, records
// again: it gets what the batch committed (the retry's generation, its
// copy in the outbox), not webhook.ErrLeaseLost, and the attempt is stored once,
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
		require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, "retrying", readLease(c, db, id).state) }, testenv.Scaled(10*time.Second), 10*time.Millisecond)

		gen, current, err := lease.Record(ctx, retry(id))
		require.NoError(t, err, "the record committed: the caller is told so")
		require.EqualValues(t, 1, gen)
		require.True(t, current)
		r := readLease(t, db, id)
		require.Equal(t, []string{"retrying"}, r.outcomes, "the attempt stored once")
		require.Nil(t, r.owner, "released")
		require.Len(t, retryRows(t, db, id), 1, "one retry copy")
	})

	t.Run("grouped, recorded again while the first still waits", func(t *testing.T) {
		t.Parallel()
		db, _ := storetest.Open(t)
		db.GroupDeliveries(64, nil)
		id := insertBilling(t, db, "evt_again_while_waiting")
		lease, err := db.DeliveryClaim(ctx, uuid.New(), id, "billing", 1, 0, time.Minute)
		require.NoError(t, err)
		holder, err := db.Pool().Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = holder.Rollback(ctx) }()
		_, err = holder.Exec(ctx, `SELECT 1 FROM deliveries WHERE event_id = $1 FOR UPDATE`, id)
		require.NoError(t, err)
		waiting := func(t require.TestingT) int {
			var n int
			require.NoError(t, db.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n))
			return n
		}

		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, _, err = lease.Record(short, retry(id))
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded, "the caller gave up; its batch still waits")
		type answer struct {
			gen     int64
			current bool
			err     error
		}
		again := make(chan answer, 1)
		go func() {
			gen, current, err := lease.Record(ctx, retry(id))
			again <- answer{gen, current, err}
		}()
		require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, 2, waiting(c)) }, testenv.Scaled(10*time.Second), 10*time.Millisecond,
			"the batch and the second try both wait for the row")
		require.NoError(t, holder.Rollback(ctx))
		a := <-again
		require.NoError(t, a.err)
		require.EqualValues(t, 1, a.gen)
		require.True(t, a.current, "the first try's record, answered as it was")
		require.Equal(t, []string{"retrying"}, readLease(t, db, id).outcomes, "the attempt stored once")
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
		require.True(t, errors.Is(err, webhook.ErrLeaseLost), "got %v", err)
		_, _, err = lease.Record(ctx, retry(id))
		require.ErrorIs(t, err, webhook.ErrLeaseLost, "a lost_lease row answers nothing")
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
	require.ErrorIs(t, err, webhook.ErrLeaseLost, "another claim holds the pair")
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

// Review of issue 18, item 5: a record that finds no lease goes on only
// when no other claim took the pair since. A's lease expires while its
// record waits; B takes the pair over, and records it dead (releasing the
// lease). A's late record is then a lost lease, alone or grouped: the dead
// pair is not brought back to retrying, and no retry copy is sent.
func TestLateRecordAfterAnotherClaimRecordedIsLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, grouped := range []bool{false, true} {
		db, _ := storetest.Open(t)
		id := insertBilling(t, db, "evt_late_record")
		a, err := db.DeliveryClaim(ctx, uuid.New(), id, "billing", 1, 0, time.Minute)
		require.NoError(t, err)
		expireLease(t, db, id)
		b, err := db.DeliveryClaim(ctx, uuid.New(), id, "billing", 1, 0, time.Minute)
		require.NoError(t, err)
		require.True(t, b.TookOver)
		_, _, err = b.Record(ctx, &webhook.Attempt{EventID: id, Route: "billing", Number: 1, StartedAt: time.Now(), Status: 410,
			Outcome: webhook.StateDead})
		require.NoError(t, err)

		late := &webhook.Attempt{EventID: id, Route: "billing", Number: 1, StartedAt: time.Now(), Status: 503,
			Outcome: webhook.StateRetrying, RetryIn: time.Minute}
		if grouped {
			other := insertBilling(t, db, "evt_late_record_other")
			o, err := db.DeliveryClaim(ctx, uuid.New(), other, "billing", 1, 0, time.Minute)
			require.NoError(t, err)
			res, err := db.RecordTogether(ctx, []*store.DeliveryLease{a, o}, []*webhook.Attempt{late,
				{EventID: other, Route: "billing", Number: 1, StartedAt: time.Now(), Status: 204, Outcome: webhook.StateDelivered}})
			require.NoError(t, err)
			require.ErrorIs(t, res[0].Err, webhook.ErrLeaseLost, "grouped")
			require.NoError(t, res[1].Err)
		} else {
			_, _, err = a.Record(ctx, late)
			require.ErrorIs(t, err, webhook.ErrLeaseLost)
		}
		r := readLease(t, db, id)
		require.Equal(t, "dead", r.state, "grouped %v: the dead pair stays dead", grouped)
		require.Empty(t, retryRows(t, db, id), "grouped %v: no retry copy", grouped)
	}
}
