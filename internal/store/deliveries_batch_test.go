package store_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/stretchr/testify/require"
)

// Issue 11, grouped claims: one statement claims many pairs, and each pair
// comes out as its single claim would leave it: a free pair claimed, a
// live lease busy, the owner's own lease taken again, a delivered pair and
// a stale copy read, an expired lease taken over (its attempt counted); a
// pair with no row yet, a pair twice in the batch and a purged event are
// left to claim alone, which settles them as before.
func TestGroupedClaimsSettleEachPairAsAlone(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	insert := func(key string) uuid.UUID { return insertBilling(t, db, key) }
	claim := func(owner, id uuid.UUID, attempt int) *store.DeliveryLease {
		l, err := db.DeliveryClaim(ctx, owner, id, "billing", attempt, 0, time.Minute)
		require.NoError(t, err)
		return l
	}
	free, busy, own, delivered, expired, staleCopy, noRow := insert("g_free"), insert("g_busy"), insert("g_own"),
		insert("g_delivered"), insert("g_expired"), insert("g_stale"), insert("g_norow")
	claim(uuid.New(), busy, 1)
	mine := uuid.New()
	claim(mine, own, 1)
	d := claim(uuid.New(), delivered, 1)
	_, _, err := d.Record(ctx, &webhook.Attempt{EventID: delivered, Route: "billing", Number: 1, StartedAt: time.Now(), Status: 200, Outcome: webhook.StateDelivered})
	require.NoError(t, err)
	claim(uuid.New(), expired, 3)
	expireLease(t, db, expired)

	args := []store.ClaimArgs{
		{Owner: uuid.New(), EventID: free, Attempt: 1},
		{Owner: uuid.New(), EventID: busy, Attempt: 1},
		{Owner: mine, EventID: own, Attempt: 1},
		{Owner: uuid.New(), EventID: delivered, Attempt: 1},
		{Owner: uuid.New(), EventID: expired, Attempt: 3},
		{Owner: uuid.New(), EventID: staleCopy, Attempt: 1, Gen: 7},
		{Owner: uuid.New(), EventID: noRow, Route: "audit", Attempt: 1},
		{Owner: uuid.New(), EventID: free, Attempt: 1},       // the same pair again
		{Owner: uuid.New(), EventID: uuid.New(), Attempt: 1}, // purged
	}
	for i := range args {
		if args[i].Route == "" {
			args[i].Route = "billing"
		}
		args[i].TTL = time.Minute
	}
	res, err := db.ClaimTogether(ctx, args)
	require.NoError(t, err)
	require.Len(t, res, len(args))

	got := res[0]
	require.False(t, got.Alone)
	require.NoError(t, got.Err)
	require.Equal(t, webhook.StatePending, got.Val.State())
	require.Equal(t, args[0].Owner, *readLease(t, db, free).owner, "claimed by its owner")

	var be *webhook.LeaseBusyError
	require.False(t, res[1].Alone)
	require.ErrorAs(t, res[1].Err, &be)
	require.Greater(t, be.Remaining, 50*time.Second)

	require.False(t, res[2].Alone)
	require.NoError(t, res[2].Err)
	require.False(t, res[2].Val.TookOver, "its own lease is no takeover")
	require.Zero(t, readLease(t, db, own).attempts)

	require.False(t, res[3].Alone)
	require.NoError(t, res[3].Err)
	require.Equal(t, webhook.StateDelivered, res[3].Val.State())
	require.Nil(t, readLease(t, db, delivered).owner, "a delivered pair is read, not leased")

	require.False(t, res[4].Alone)
	require.NoError(t, res[4].Err)
	require.True(t, res[4].Val.TookOver)
	r := readLease(t, db, expired)
	require.Equal(t, []string{"lease_expired"}, r.outcomes)
	require.Equal(t, []int{3}, r.numbers)
	require.Equal(t, 1, r.attempts)
	require.Equal(t, args[4].Owner, *r.owner)

	require.False(t, res[5].Alone)
	require.NoError(t, res[5].Err)
	require.Zero(t, res[5].Val.Gen())
	require.Nil(t, readLease(t, db, staleCopy).owner, "a stale copy takes no lease")

	for _, i := range []int{6, 7, 8} {
		require.True(t, res[i].Alone, "item %d is left to claim alone", i)
	}
	// Alone, as DeliveryClaim then does: the row is created and claimed;
	// the duplicate finds the batch's lease; the purged event is missing.
	l, err := db.DeliveryClaim(ctx, args[6].Owner, noRow, "audit", 1, 0, time.Minute)
	require.NoError(t, err)
	require.Equal(t, webhook.StatePending, l.State())
	_, err = db.DeliveryClaim(ctx, args[7].Owner, free, "billing", 1, 0, time.Minute)
	require.ErrorAs(t, err, &be)
	_, err = db.DeliveryClaim(ctx, args[8].Owner, args[8].EventID, "billing", 1, 0, time.Minute)
	require.ErrorIs(t, err, store.ErrNotFound)
}

// Issue 11, grouped records: one statement records many attempts, each
// fenced by its own lease as alone: a success delivers, a failure moves
// the pair to the retry's generation, a lost lease stores only its attempt
// (lost_lease), a pair a replay moved on keeps the replay's state, a pair
// purged meanwhile fails alone.
func TestGroupedRecordsFenceEachLease(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	insert := func(key string) uuid.UUID { return insertBilling(t, db, key) }
	claim := func(id uuid.UUID) *store.DeliveryLease {
		l, err := db.DeliveryClaim(ctx, uuid.New(), id, "billing", 1, 0, time.Minute)
		require.NoError(t, err)
		return l
	}
	attempt := func(id uuid.UUID, status int, outcome webhook.DeliveryState) *webhook.Attempt {
		a := &webhook.Attempt{EventID: id, Route: "billing", Number: 1, StartedAt: time.Now(), Status: status,
			Duration: 12 * time.Millisecond, Outcome: outcome, ResponseBody: []byte("answer")}
		if outcome == webhook.StateRetrying {
			a.RetryIn = time.Minute
		}
		return a
	}
	ok, failing, lost, moved := insert("r_ok"), insert("r_fail"), insert("r_lost"), insert("r_moved")
	lOK, lFail, lLost, lMoved := claim(ok), claim(failing), claim(lost), claim(moved)
	expireLease(t, db, lost)
	claim(lost) // taken over: lLost is lost
	_, err := db.Pool().Exec(ctx, `UPDATE deliveries SET gen = gen + 1 WHERE event_id = $1`, moved)
	require.NoError(t, err)

	res, err := db.RecordTogether(ctx,
		[]*store.DeliveryLease{lOK, lFail, lLost, lMoved},
		[]*webhook.Attempt{
			attempt(ok, 200, webhook.StateDelivered),
			attempt(failing, 503, webhook.StateRetrying),
			attempt(lost, 200, webhook.StateDelivered),
			attempt(moved, 503, webhook.StateRetrying),
		})
	require.NoError(t, err)
	for i, r := range res {
		require.False(t, r.Alone, "record %d settled by the grouped statement", i)
	}

	require.NoError(t, res[0].Err)
	require.Equal(t, store.Recorded{Gen: 0, Current: true}, res[0].Val)
	r := readLease(t, db, ok)
	require.Equal(t, "delivered", r.state)
	require.Equal(t, []string{"delivered"}, r.outcomes)
	require.Nil(t, r.owner, "released")
	var body []byte
	var dur int
	var headers map[string][]string
	require.NoError(t, db.Pool().QueryRow(ctx, `SELECT a.response_body, a.duration_ms, a.response_headers
		FROM delivery_attempts a JOIN deliveries d ON d.id = a.delivery_id WHERE d.event_id = $1`, ok).Scan(&body, &dur, &headers))
	require.Equal(t, "answer", string(body))
	require.Equal(t, 12, dur)
	require.NotNil(t, headers, "a status with no headers stores an empty object, as alone")

	require.NoError(t, res[1].Err)
	require.Equal(t, store.Recorded{Gen: 1, Current: true}, res[1].Val, "the retry's generation")
	r = readLease(t, db, failing)
	require.Equal(t, "retrying", r.state)
	require.EqualValues(t, 1, r.gen)
	var due time.Duration
	require.NoError(t, db.Pool().QueryRow(ctx, `SELECT EXTRACT(EPOCH FROM due_at - now())::float8 * interval '1 second'
		FROM deliveries WHERE event_id = $1`, failing).Scan(&due))
	require.InDelta(t, time.Minute.Seconds(), due.Seconds(), 5, "due when its tier expires")

	require.ErrorIs(t, res[2].Err, webhook.ErrLeaseLost)
	r = readLease(t, db, lost)
	require.Equal(t, "pending", r.state, "a lost lease's success is not the pair's")
	require.Equal(t, []string{"lease_expired", "lost_lease"}, r.outcomes)
	require.NotNil(t, r.owner, "the new holder keeps its lease")

	require.NoError(t, res[3].Err)
	require.Equal(t, store.Recorded{Gen: 1, Current: false}, res[3].Val, "the replay's generation, not a new one")
	require.Equal(t, "pending", readLease(t, db, moved).state, "the newer copy owns the pair")

	// A pair purged mid-attempt (a purge removes its delivery and event:
	// no foreign key cascades since 0021): its record fails with
	// ErrNotFound and stores nothing; the other record of the statement
	// commits.
	good, gone := insert("r_good"), insert("r_gone")
	lGood, lGone := claim(good), claim(gone)
	_, err = db.Pool().Exec(ctx, `WITH d AS (DELETE FROM deliveries WHERE event_id = $1) DELETE FROM events WHERE id = $1`, gone)
	require.NoError(t, err)
	res, err = db.RecordTogether(ctx, []*store.DeliveryLease{lGood, lGone},
		[]*webhook.Attempt{attempt(good, 200, webhook.StateDelivered), attempt(gone, 200, webhook.StateDelivered)})
	require.NoError(t, err)
	require.False(t, res[0].Alone)
	require.NoError(t, res[0].Err)
	require.Equal(t, "delivered", readLease(t, db, good).state)
	require.False(t, res[1].Alone)
	require.ErrorIs(t, res[1].Err, store.ErrNotFound, "the purged pair fails on its own")
	require.ErrorIs(t, res[1].Err, webhook.ErrEventMissing)
	var orphans int
	require.NoError(t, db.Pool().QueryRow(ctx, `SELECT count(*) FROM delivery_attempts WHERE event_id = $1`, gone).Scan(&orphans))
	require.Zero(t, orphans, "no attempt stored for a pair that is gone")
	_, _, err = lGone.Record(ctx, attempt(gone, 200, webhook.StateDelivered))
	require.ErrorIs(t, err, store.ErrNotFound, "alone, the same")
	require.ErrorIs(t, err, webhook.ErrEventMissing, "alone, the same")
}

// Issue 11: with GroupDeliveries, many deliveries claiming and recording at
// once (some pairs claimed by two deliveries, as a redelivered duplicate
// would) deliver every pair exactly once: the duplicate meets the lease or
// the delivered pair, never a second success.
func TestGroupedDeliveriesDeliverEachPairOnce(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	var batches, largest atomic.Int64
	db.GroupDeliveries(64, func(kind string, n int) {
		batches.Add(1)
		for {
			m := largest.Load()
			if int64(n) <= m || largest.CompareAndSwap(m, int64(n)) {
				return
			}
		}
	})
	const pairs = 60
	ids := make([]uuid.UUID, pairs)
	for i := range ids {
		id, _, err := db.EventInsert(ctx, newEvent("acme", "c_"+uuid.NewString()), []string{"billing"})
		require.NoError(t, err)
		ids[i] = id
	}
	var posts [pairs]atomic.Int32
	deliver := func(i int) error {
		owner := uuid.New()
		for {
			l, err := db.DeliveryClaim(ctx, owner, ids[i], "billing", 1, 0, time.Minute)
			var busy *webhook.LeaseBusyError
			if errors.As(err, &busy) {
				time.Sleep(5 * time.Millisecond) // a duplicate waits for the lease, as deliver does
				continue
			}
			if err != nil {
				return err
			}
			if l.State() == webhook.StateDelivered {
				return nil
			}
			posts[i].Add(1)
			_, _, err = l.Record(ctx, &webhook.Attempt{EventID: ids[i], Route: "billing", Number: 1,
				StartedAt: time.Now(), Status: 200, Outcome: webhook.StateDelivered})
			return err
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*pairs)
	for i := range pairs {
		for range 1 + i%2 { // every other pair twice
			wg.Go(func() { errs <- deliver(i) })
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for i := range pairs {
		require.EqualValues(t, 1, posts[i].Load(), "pair %d POSTed once", i)
		r := readLease(t, db, ids[i])
		require.Equal(t, "delivered", r.state)
		require.Equal(t, []string{"delivered"}, r.outcomes)
	}
	t.Logf("%d grouped statements, the largest of %d", batches.Load(), largest.Load())
}
