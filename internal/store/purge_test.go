package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/stretchr/testify/require"
)

func TestPurgeKeepsDedupeKeysForTheWindow(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	now := time.Now()
	insert := func(key string, age time.Duration, final bool) {
		ev := newEvent("acme", key)
		ev.ReceivedAt = now.Add(-age)
		id, _, err := db.EventInsert(ctx, ev, []string{"billing"})
		require.NoError(t, err)
		if final {
			require.NoError(t, recordErr(db.AttemptRecord(ctx, &webhook.Attempt{
				EventID: id, Route: "billing", Number: 1, StartedAt: ev.ReceivedAt, Status: 200, Outcome: webhook.StateDelivered,
			})))
		}
	}
	// The outbox would have been drained long ago.
	for i := range 5 {
		insert(fmt.Sprint("old_", i), 40*24*time.Hour, true) // past the dedupe window
		insert(fmt.Sprint("mid_", i), 20*24*time.Hour, true) // past the purge age, inside the window
		insert(fmt.Sprint("new_", i), time.Hour, true)       // young
	}
	insert("stuck", 40*24*time.Hour, false) // still pending: never purged
	_, err := db.Pool().Exec(ctx, `DELETE FROM outbox WHERE event_id IN (SELECT id FROM events WHERE idempotency_key <> 'stuck')`)
	require.NoError(t, err)

	res, err := db.Purge(ctx, store.PurgeConfig{OlderThan: now.Add(-7 * 24 * time.Hour), DedupeBefore: now.Add(-30 * 24 * time.Hour), Batch: 2, ServedRoutes: []string{"billing"}})
	require.NoError(t, err)
	t.Logf("%+v", res)
	require.EqualValues(t, 10, res.Deliveries, "old and mid deliveries (and their attempts)")
	require.EqualValues(t, 5, res.Events, "old events")
	require.EqualValues(t, 5, res.Stripped, "mid events keep only their key")
	require.Equal(t, 6, res.Batches, "10 events in batches of 2, then an empty one")

	var attempts, events int
	require.NoError(t, db.Pool().QueryRow(ctx, `SELECT count(*) FROM delivery_attempts`).Scan(&attempts))
	require.Equal(t, 5, attempts, "only the young events' attempts remain")
	require.NoError(t, db.Pool().QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&events))
	require.Equal(t, 11, events, "mid + new + stuck")

	// A late resend inside the window is still a duplicate; one older than
	// the window is a new event.
	_, dup, err := db.EventInsert(ctx, newEvent("acme", "mid_0"), nil)
	require.NoError(t, err)
	require.True(t, dup, "younger than the dedupe window: still recognised")
	_, dup, err = db.EventInsert(ctx, newEvent("acme", "old_0"), nil)
	require.NoError(t, err)
	require.False(t, dup, "older than the window: accepted again")
	_, dup, err = db.EventInsert(ctx, newEvent("acme", "stuck"), nil)
	require.NoError(t, err)
	require.True(t, dup, "an event still in flight is never purged")

	again, err := db.Purge(ctx, store.PurgeConfig{OlderThan: now.Add(-7 * 24 * time.Hour), DedupeBefore: now.Add(-30 * 24 * time.Hour), Batch: 2, ServedRoutes: []string{"billing"}})
	require.NoError(t, err)
	require.Zero(t, again.Deliveries+again.Events+again.Stripped, "purge is idempotent")
}

// A replay re-checks each pair's state in its own transaction: a pair that
// was delivered (or went back in flight) after the operator looked is left
// alone.
func TestReplayEnqueueIsConditional(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	mk := func(key string, outcome webhook.DeliveryState) store.ReplayPair {
		ev := newEvent("acme", key)
		id, _, err := db.EventInsert(ctx, ev, []string{"billing"})
		require.NoError(t, err)
		if outcome != webhook.StatePending {
			require.NoError(t, recordErr(db.AttemptRecord(ctx, &webhook.Attempt{EventID: id, Route: "billing", Number: 1, StartedAt: time.Now(), Outcome: outcome})))
		}
		return store.ReplayPair{EventID: id, Route: "billing"}
	}
	dead, delivered, pending := mk("dead", webhook.StateDead), mk("delivered", webhook.StateDelivered), mk("pending", webhook.StatePending)
	fresh := store.ReplayPair{EventID: dead.EventID, Route: "crm"} // never attempted on crm

	done, err := db.ReplayEnqueue(ctx, []store.ReplayPair{dead, delivered, pending, fresh}, false, false)
	require.NoError(t, err)
	require.ElementsMatch(t, []store.ReplayPair{dead, fresh}, done)
	done, err = db.ReplayEnqueue(ctx, []store.ReplayPair{delivered}, true, false)
	require.NoError(t, err)
	require.Equal(t, []store.ReplayPair{delivered}, done)

	var routed int
	require.NoError(t, db.Pool().QueryRow(ctx, `SELECT count(*) FROM outbox WHERE route IS NOT NULL`).Scan(&routed))
	require.Equal(t, 3, routed)
	state, _, err := db.DeliveryGet(ctx, delivered.EventID, "billing")
	require.NoError(t, err)
	require.Equal(t, webhook.StatePending, state)
}

// recordErr keeps the error of AttemptRecord's results.
func recordErr(_ int64, _ bool, err error) error { return err }

// Issue 18, item 7: purge forgets a resource's delivered version once no
// event of the resource is left whole (deleted, or stripped to its dedupe
// key): a version kept for ever would make the resource's later events
// stale after a sender's versions went back. An operator can read a
// version and reset it.
func TestPurgeForgetsVersionsOfGoneResources(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	now := time.Now()
	deliver := func(key, resource, version string, age time.Duration) {
		ev := newEvent("acme", key)
		ev.ReceivedAt = now.Add(-age)
		ev.OrderingResource, ev.OrderingVersion, ev.OrderingVersionNum = resource, version, version
		id, _, err := db.EventInsert(ctx, ev, []string{"billing"})
		require.NoError(t, err)
		require.NoError(t, recordErr(db.AttemptRecord(ctx, &webhook.Attempt{
			EventID: id, Route: "billing", Number: 1, StartedAt: ev.ReceivedAt, Status: 200, Outcome: webhook.StateDelivered,
		})))
	}
	deliver("old_a", "sub_A", "5", 40*24*time.Hour)
	deliver("new_a", "sub_A", "6", time.Hour) // sub_A keeps a whole event
	deliver("old_b", "sub_B", "9", 40*24*time.Hour)
	_, err := db.Pool().Exec(ctx, `DELETE FROM outbox`)
	require.NoError(t, err)
	v, err := db.ResourceVersionGet(ctx, "billing", "acme", "sub_B")
	require.NoError(t, err)
	require.Equal(t, "9", v.Version)

	res, err := db.Purge(ctx, store.PurgeConfig{OlderThan: now.Add(-7 * 24 * time.Hour), DedupeBefore: now.Add(-30 * 24 * time.Hour), ServedRoutes: []string{"billing"}})
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Versions, "sub_B has no event left")
	_, err = db.ResourceVersionGet(ctx, "billing", "acme", "sub_B")
	require.ErrorIs(t, err, store.ErrNotFound)
	v, err = db.ResourceVersionGet(ctx, "billing", "acme", "sub_A")
	require.NoError(t, err, "sub_A still has an event")
	require.Equal(t, "6", v.Version)

	reset, err := db.ResourceVersionReset(ctx, "billing", "acme", "sub_A")
	require.NoError(t, err)
	require.Equal(t, "6", reset.Version)
	_, err = db.ResourceVersionGet(ctx, "billing", "acme", "sub_A")
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = db.ResourceVersionReset(ctx, "billing", "acme", "sub_A")
	require.ErrorIs(t, err, store.ErrNotFound, "nothing left to reset")
}
