package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/stretchr/testify/require"
)

// laneRow is what Postgres holds of a pair on a lane.
type laneRow struct {
	state  string
	gen    int64
	parked bool
	lane   *string
	// copies are the generations of the pair's copies in the outbox.
	copies []int64
}

func readLane(t *testing.T, db *store.DB, id uuid.UUID) laneRow {
	t.Helper()
	var r laneRow
	err := db.Pool().QueryRow(context.Background(), `
		SELECT d.state, d.gen, d.due_at = 'infinity', d.lane,
		       COALESCE((SELECT array_agg(o.gen ORDER BY o.id) FROM outbox o WHERE o.event_id = d.event_id AND o.route = d.route), '{}')
		FROM deliveries d WHERE d.event_id = $1 AND d.route = 'billing'`, id,
	).Scan(&r.state, &r.gen, &r.parked, &r.lane, &r.copies)
	require.NoError(t, err)
	return r
}

// insertResource stores an event of source acme about resource, routed to
// billing.
func insertResource(t *testing.T, db *store.DB, key, resource string) uuid.UUID {
	t.Helper()
	ev := newEvent("acme", key)
	ev.OrderingResource = resource
	id, _, err := db.EventInsert(context.Background(), ev, []string{"billing"})
	require.NoError(t, err)
	return id
}

// Issue 41: on a lane only the head is claimed, and only while nothing
// else of the lane is in flight; any other pair's copy parks it; a retry
// holds the lane; the record that frees it sends the next head a copy of
// a new generation; a dead head blocks, unless the route skips dead ones;
// other resources are not held.
func TestLaneDeliversItsHeadOnly(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	const ttl = time.Minute
	claim := func(id uuid.UUID, gen int64, skipDead bool) (*store.DeliveryLease, error) {
		return db.DeliveryClaimInOrder(ctx, uuid.New(), id, "billing", 1, gen, ttl, skipDead)
	}
	record := func(l *store.DeliveryLease, id uuid.UUID, gen int64, outcome webhook.DeliveryState) {
		t.Helper()
		a := &webhook.Attempt{EventID: id, Route: "billing", Number: 1, StartedAt: time.Now(), Gen: gen, Outcome: outcome, Status: 500}
		switch outcome {
		case webhook.StateDelivered:
			a.Status = 200
		case webhook.StateRetrying:
			a.RetryIn = time.Second
		}
		_, _, err := l.Record(ctx, a)
		require.NoError(t, err)
	}

	a1 := insertResource(t, db, "a1", "sub_A")
	a2 := insertResource(t, db, "a2", "sub_A")
	b1 := insertResource(t, db, "b1", "sub_B")
	plain := insertResource(t, db, "plain", "")
	require.Equal(t, "acme sub_A", *readLane(t, db, a1).lane)
	require.Nil(t, readLane(t, db, plain).lane, "an event without a resource has no lane")

	// A2's copy came first: A1 is owed before it.
	_, err := claim(a2, 0, false)
	require.ErrorIs(t, err, webhook.ErrWaiting)
	require.True(t, readLane(t, db, a2).parked)
	// Another resource, and an event without one, go.
	lb, err := claim(b1, 0, false)
	require.NoError(t, err)
	lp, err := claim(plain, 0, false)
	require.NoError(t, err)
	record(lb, b1, 0, webhook.StateDelivered)
	record(lp, plain, 0, webhook.StateDelivered)

	// A1 goes; its retry holds the lane.
	l1, err := claim(a1, 0, false)
	require.NoError(t, err)
	record(l1, a1, 0, webhook.StateRetrying)
	r1 := readLane(t, db, a1)
	require.Equal(t, "retrying", r1.state)
	require.Equal(t, []int64{1}, r1.copies, "the retry copy")
	// A copy of A2 again (a duplicate): still parked, no copy sent.
	_, err = claim(a2, 0, false)
	require.ErrorIs(t, err, webhook.ErrWaiting)
	require.Empty(t, readLane(t, db, a2).copies)

	// A1's retry is delivered: A2 gets a copy of a new generation.
	l1, err = claim(a1, 1, false)
	require.NoError(t, err)
	record(l1, a1, 1, webhook.StateDelivered)
	r2 := readLane(t, db, a2)
	require.False(t, r2.parked)
	require.Equal(t, int64(1), r2.gen)
	require.Equal(t, []int64{1}, r2.copies, "the woken pair's copy")
	// The parking copy, late, is stale now.
	stale, err := claim(a2, 0, false)
	require.NoError(t, err)
	require.Equal(t, int64(1), stale.Gen(), "read, not claimed: another generation")
	// And a copy of a delivered pair is read, not claimed: nothing to
	// wait for.
	done, err := claim(a1, 1, false)
	require.NoError(t, err)
	require.Equal(t, webhook.StateDelivered, done.State())

	// A2 dies on a route that blocks: A3 waits behind it.
	a3 := insertResource(t, db, "a3", "sub_A")
	l2, err := claim(a2, 1, false)
	require.NoError(t, err)
	// While A2 is in flight, A3 waits.
	_, err = claim(a3, 0, false)
	require.ErrorIs(t, err, webhook.ErrWaiting)
	record(l2, a2, 1, webhook.StateDead)
	require.True(t, readLane(t, db, a3).parked, "a dead head holds its lane")
	require.Empty(t, readLane(t, db, a3).copies)

	// On a route that skips dead ones, the dead head frees its lane.
	c1 := insertResource(t, db, "c1", "sub_C")
	c2 := insertResource(t, db, "c2", "sub_C")
	_, err = claim(c2, 0, true)
	require.ErrorIs(t, err, webhook.ErrWaiting)
	lc, err := claim(c1, 0, true)
	require.NoError(t, err)
	record(lc, c1, 0, webhook.StateDead)
	require.Nil(t, readLane(t, db, c1).lane, "the dead pair left its lane")
	require.Equal(t, []int64{1}, readLane(t, db, c2).copies, "the next one goes")

	// The reconciler leaves a parked pair alone, however long it waits.
	// (Its event's topic copy published: the outbox row gone, as the
	// publisher leaves it.)
	_, err = db.Pool().Exec(ctx, `UPDATE deliveries SET created_at = now() - interval '1 hour' WHERE event_id = $1`, a3)
	require.NoError(t, err)
	_, err = db.Pool().Exec(ctx, `DELETE FROM outbox WHERE event_id = $1`, a3)
	require.NoError(t, err)
	n, err := db.DeliveryReconcile(ctx, "billing", time.Millisecond, 100, func() error { return nil })
	require.NoError(t, err)
	for _, p := range n {
		require.NotEqual(t, a3, p.EventID, "a parked pair is not re-sent")
	}

	// The route stops being fifo: its parked pairs are due again, for the
	// reconciler, since no record will wake them.
	unparked, err := db.LanesUnpark(ctx, []string{"billing"})
	require.NoError(t, err)
	require.EqualValues(t, 1, unparked)
	require.False(t, readLane(t, db, a3).parked)
	// (Due from the unpark's now(): a round a millisecond later sends it.)
	require.Eventually(t, func() bool {
		n, err := db.DeliveryReconcile(ctx, "billing", time.Millisecond, 100, func() error { return nil })
		return err == nil && slices.ContainsFunc(n, func(p store.Reconciled) bool { return p.EventID == a3 })
	}, 5*time.Second, 10*time.Millisecond, "the reconciler sends it")
}

// Issue 41: a holder that asks for it (HandOver) is handed its lane's next
// head by the record that frees the lane, claimed at a new generation in
// that transaction, parked or not; the head's copy waits in the outbox
// until the lease runs out, the holder's record deletes it, and a Release
// sends it at once.
func TestLaneHandsItsNextHeadOver(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	const ttl = time.Minute
	owner := uuid.New()
	due := func(id uuid.UUID) (held, now bool) {
		t.Helper()
		require.NoError(t, db.Pool().QueryRow(ctx, `
			SELECT COALESCE(bool_or(next_try_at > now() + interval '30 seconds'), false), COALESCE(bool_or(next_try_at <= now()), false)
			FROM outbox WHERE event_id = $1 AND route = 'billing'`, id).Scan(&held, &now))
		return held, now
	}
	delivered := func(l *store.DeliveryLease, id uuid.UUID, gen int64) {
		t.Helper()
		l.HandOver(ttl)
		_, _, err := l.Record(ctx, &webhook.Attempt{EventID: id, Route: "billing", Number: 1, StartedAt: time.Now(), Gen: gen,
			Outcome: webhook.StateDelivered, Status: 200})
		require.NoError(t, err)
	}

	a1 := insertResource(t, db, "a1", "sub_A")
	a2 := insertResource(t, db, "a2", "sub_A")
	a3 := insertResource(t, db, "a3", "sub_A")
	_, err := db.Pool().Exec(ctx, `DELETE FROM outbox`) // the topic copies, published
	require.NoError(t, err)
	_, err = db.DeliveryClaimInOrder(ctx, uuid.New(), a3, "billing", 1, 0, ttl, false)
	require.ErrorIs(t, err, webhook.ErrWaiting, "A3's copy came first: parked")

	l1, err := db.DeliveryClaimInOrder(ctx, owner, a1, "billing", 1, 0, ttl, false)
	require.NoError(t, err)
	delivered(l1, a1, 0)
	n2, m2, ok := l1.Next()
	require.True(t, ok, "A2 handed over (its copy not come yet)")
	_, _, again := l1.Next()
	require.False(t, again, "handed over once")
	require.Equal(t, a2, m2.EventID)
	require.Equal(t, "billing", m2.Route)
	require.Equal(t, int64(1), m2.Gen, "a new generation: A2's copy on its way is stale")
	require.Equal(t, 1, m2.Attempt)
	require.Equal(t, "acme", m2.Source)
	require.NotEmpty(t, m2.Body)
	r2 := readLane(t, db, a2)
	require.Equal(t, []int64{1}, r2.copies, "its copy held in the outbox")
	held, now := due(a2)
	require.True(t, held && !now, "due when the lease runs out")

	// A2's own copy, late: stale, read and not claimed. A3's: parked,
	// A2 in flight.
	st, err := db.DeliveryClaimInOrder(ctx, uuid.New(), a2, "billing", 1, 0, ttl, false)
	require.NoError(t, err)
	require.Equal(t, int64(1), st.Gen())
	require.NoError(t, st.Release(ctx))
	_, err = db.DeliveryClaimInOrder(ctx, uuid.New(), a3, "billing", 1, 0, ttl, false)
	require.ErrorIs(t, err, webhook.ErrWaiting)

	// A2 delivered: its held copy goes, and A3, parked, is handed over.
	delivered(n2, a2, 1)
	require.Empty(t, readLane(t, db, a2).copies, "the held copy deleted by the record")
	n3, m3, ok := n2.Next()
	require.True(t, ok, "A3 handed over, parked as it was")
	require.Equal(t, a3, m3.EventID)
	r3 := readLane(t, db, a3)
	require.False(t, r3.parked)
	require.Equal(t, int64(1), r3.gen)

	// Given back: the lease goes, and the copy is due at once.
	require.NoError(t, n3.Release(ctx))
	held, now = due(a3)
	require.True(t, now && !held, "the held copy due at once")
	l3, err := db.DeliveryClaimInOrder(ctx, uuid.New(), a3, "billing", 1, 1, ttl, false)
	require.NoError(t, err, "its copy claims it")
	require.Equal(t, webhook.StatePending, l3.State())

	// A holder whose lease was taken over meanwhile: its record is
	// lost_lease, and the lane does not move (its head is the pair, held
	// by the new holder), whose own record then hands the next over.
	b1 := insertResource(t, db, "b1", "sub_B")
	b2 := insertResource(t, db, "b2", "sub_B")
	_, err = db.Pool().Exec(ctx, `DELETE FROM outbox`)
	require.NoError(t, err)
	lost, err := db.DeliveryClaimInOrder(ctx, uuid.New(), b1, "billing", 1, 0, ttl, false)
	require.NoError(t, err)
	_, err = db.Pool().Exec(ctx, `UPDATE deliveries SET lease_until = now() - interval '1 second' WHERE event_id = $1`, b1)
	require.NoError(t, err)
	taker, err := db.DeliveryClaimInOrder(ctx, owner, b1, "billing", 1, 0, ttl, false)
	require.NoError(t, err)
	require.True(t, taker.TookOver)
	lost.HandOver(ttl)
	_, _, err = lost.Record(ctx, &webhook.Attempt{EventID: b1, Route: "billing", Number: 1, StartedAt: time.Now(), Outcome: webhook.StateDelivered, Status: 200})
	require.ErrorIs(t, err, webhook.ErrLeaseLost)
	_, _, ok = lost.Next()
	require.False(t, ok, "nothing handed over: the pair is still owed, held by its new holder")
	require.Empty(t, readLane(t, db, b2).copies)
	delivered(taker, b1, 0)
	_, mb, ok := taker.Next()
	require.True(t, ok)
	require.Equal(t, b2, mb.EventID)

	// A next head retrying, its retry copy waiting out its backoff (a
	// route made fifo meanwhile), is left to that copy: not handed over,
	// not sent another.
	c1 := insertResource(t, db, "c1", "sub_C")
	c2 := insertResource(t, db, "c2", "sub_C")
	_, err = db.Pool().Exec(ctx, `DELETE FROM outbox`)
	require.NoError(t, err)
	_, err = db.Pool().Exec(ctx, `UPDATE deliveries SET state = 'retrying', gen = 1, due_at = now() + interval '1 hour' WHERE event_id = $1`, c2)
	require.NoError(t, err)
	lc, err := db.DeliveryClaimInOrder(ctx, owner, c1, "billing", 1, 0, ttl, false)
	require.NoError(t, err)
	delivered(lc, c1, 0)
	_, _, ok = lc.Next()
	require.False(t, ok, "a head in its backoff is not handed over")
	rc := readLane(t, db, c2)
	require.Equal(t, int64(1), rc.gen)
	require.Empty(t, rc.copies)
}
