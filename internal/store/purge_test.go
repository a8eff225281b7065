package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// Issue 21: retention drops a day whole when nothing of it is undelivered,
// purges the rest of an old day row by row keeping what is undelivered, and
// keeps each purged event's dedupe key until the window has passed.
func TestPurgeDropsWholeDaysKeepsUndeliveredAndKeys(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	now := time.Now()
	_, err := db.EnsurePartitionsFor(ctx, now.AddDate(0, 0, -41), now)
	require.NoError(t, err)
	insert := func(key string, age time.Duration, final bool) {
		ev := newEventAt("acme", key, now.Add(-age))
		id, _, err := db.EventInsert(ctx, ev, []string{"billing"})
		require.NoError(t, err)
		if final {
			require.NoError(t, recordErr(db.AttemptRecord(ctx, &webhook.Attempt{
				EventID: id, Route: "billing", Number: 1, StartedAt: ev.ReceivedAt, Status: 200, Outcome: webhook.StateDelivered,
			})))
		}
	}
	for i := range 5 {
		insert(fmt.Sprint("old_", i), 40*24*time.Hour, true) // past the dedupe window
		insert(fmt.Sprint("mid_", i), 20*24*time.Hour, true) // past the purge age, inside the window
		insert(fmt.Sprint("new_", i), time.Hour, true)       // young
	}
	insert("stuck", 40*24*time.Hour, false) // still pending: never purged, nor its day dropped
	// The outbox would have been drained long ago.
	_, err = db.Pool().Exec(ctx, `DELETE FROM outbox WHERE event_id IN (SELECT id FROM events WHERE idempotency_key <> 'stuck')`)
	require.NoError(t, err)
	partitions := func() (n int) {
		require.NoError(t, db.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'events'::regclass`).Scan(&n))
		return n
	}
	partitionExists := func(name string) (ok bool) {
		require.NoError(t, db.Pool().QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&ok))
		return ok
	}
	// partitionsAfter counts the partitions not wholly before t (the
	// legacy default partition among them).
	partitionsAfter := func(t0 time.Time) (n int) {
		rows, err := db.Pool().Query(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'events'::regclass`)
		require.NoError(t, err)
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		for _, name := range names {
			day, err := time.Parse("events_p20060102", name)
			if err != nil || day.AddDate(0, 0, 1).After(t0) {
				n++
			}
		}
		return n
	}
	before := partitions()

	cfg := store.PurgeConfig{OlderThan: now.Add(-7 * 24 * time.Hour), DedupeBefore: now.Add(-30 * 24 * time.Hour), Batch: 2, ServedRoutes: []string{"billing"}}
	res, err := db.Purge(ctx, cfg)
	require.NoError(t, err)
	t.Logf("%+v", res)
	require.EqualValues(t, 10, res.Deliveries, "old and mid deliveries (and their attempts)")
	require.EqualValues(t, 10, res.Events, "old and mid events")
	// Every day before the purge age is dropped whole (the empty ones made
	// for the test too) but the old day, which holds the stuck event.
	oldDay := "events_p" + now.Add(-40*24*time.Hour).UTC().Format("20060102")
	midDay := "events_p" + now.Add(-20*24*time.Hour).UTC().Format("20060102")
	require.EqualValues(t, before-partitionsAfter(cfg.OlderThan)-1, res.Days, "every whole day before the purge age but the old one")
	require.True(t, partitionExists(oldDay), "the old day holds the stuck event")
	require.False(t, partitionExists(midDay), "the mid day, dropped whole")
	require.EqualValues(t, 5, res.Keys, "the old events' keys, past the window")
	require.Equal(t, 3, res.Batches, "the old day's 5 events in batches of 2")
	require.EqualValues(t, 1, res.KeptUndelivered)
	require.EqualValues(t, int64(before)-res.Days, partitions())

	var attempts, events, keys int
	require.NoError(t, db.Pool().QueryRow(ctx, `SELECT count(*) FROM delivery_attempts`).Scan(&attempts))
	require.Equal(t, 5, attempts, "only the young events' attempts remain")
	require.NoError(t, db.Pool().QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&events))
	require.Equal(t, 6, events, "new + stuck")
	require.NoError(t, db.Pool().QueryRow(ctx, `SELECT count(*) FROM event_keys`).Scan(&keys))
	require.Equal(t, 11, keys, "mid + new + stuck")

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

	again, err := db.Purge(ctx, cfg)
	require.NoError(t, err)
	require.Zero(t, again.Deliveries+again.Events+again.Keys+again.Days, "purge is idempotent")
}

// Issue 21: the same key on both sides of a day boundary is one event:
// event_keys is not partitioned, so the second is a duplicate of the first
// whichever partition each would go to.
func TestIdempotencyAcrossADayBoundary(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	midnight := time.Now().UTC().Truncate(24 * time.Hour)
	_, err := db.EnsurePartitionsFor(ctx, midnight.AddDate(0, 0, -1), midnight)
	require.NoError(t, err)
	before := newEventAt("acme", "evt_boundary", midnight.Add(-time.Millisecond))
	first, dup, err := db.EventInsert(ctx, before, []string{"billing"})
	require.NoError(t, err)
	require.False(t, dup)
	after := newEventAt("acme", "evt_boundary", midnight)
	second, dup, err := db.EventInsert(ctx, after, []string{"billing"})
	require.NoError(t, err)
	require.True(t, dup, "the same key the next day")
	require.Equal(t, first, second, "answered with the first event's id")

	// And in one batch, the two sides at once, a body-deduplicating source
	// too: one event each.
	a, b := newEventAt("shop", "k1", midnight.Add(-time.Millisecond)), newEventAt("shop", "k2", midnight)
	a.BodySHA256, b.BodySHA256 = []byte("same body hash"), []byte("same body hash")
	c, d := newEventAt("acme", "evt_pair", midnight.Add(-time.Millisecond)), newEventAt("acme", "evt_pair", midnight)
	results, err := db.EventInsertBatch(ctx, []webhook.Insert{{Event: a}, {Event: b}, {Event: c}, {Event: d}})
	require.NoError(t, err)
	require.False(t, results[0].Duplicate)
	require.True(t, results[1].Duplicate, "the same body across the boundary")
	require.Equal(t, results[0].ID, results[1].ID)
	require.False(t, results[2].Duplicate)
	require.True(t, results[3].Duplicate, "the same key across the boundary, in one batch")
	require.Equal(t, results[2].ID, results[3].ID)

	var where []string
	rows, err := db.Pool().Query(ctx, `SELECT tableoid::regclass::text FROM events ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var p string
		require.NoError(t, rows.Scan(&p))
		where = append(where, p)
	}
	require.NoError(t, rows.Err())
	day := func(t time.Time) string { return "events_p" + t.Format("20060102") }
	yesterday := day(midnight.AddDate(0, 0, -1))
	require.Equal(t, []string{yesterday, yesterday, yesterday}, where,
		"each stored event in the partition of its day; the duplicates stored nothing")
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

// Issue 21: an insert whose day has no partition (the processes that make
// them were all stopped for days) makes them and goes in; one whose day
// is still without a partition (a receiver's clock days ahead) fails as
// Postgres being unavailable (503, the sender resends), never as a row
// Postgres refused (400, the sender gives up).
func TestInsertMakesAMissingDayAndRefusesNone(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	today := time.Now().UTC().Format("20060102")
	_, err := db.Pool().Exec(ctx, `DROP TABLE delivery_attempts_p`+today+`, deliveries_p`+today+`, events_p`+today)
	require.NoError(t, err)

	id, dup, err := db.EventInsert(ctx, newEvent("acme", "evt_today"), []string{"billing"})
	require.NoError(t, err, "the day's partitions made on the spot")
	require.False(t, dup)
	var where string
	require.NoError(t, db.Pool().QueryRow(ctx, `SELECT tableoid::regclass::text FROM events WHERE id = $1`, id).Scan(&where))
	require.Equal(t, "events_p"+today, where)

	ahead := newEventAt("acme", "evt_clock_ahead", time.Now().AddDate(0, 0, 10))
	_, _, err = db.EventInsert(ctx, ahead, []string{"billing"})
	require.ErrorIs(t, err, store.ErrNoPartition)
	require.NotErrorIs(t, err, webhook.ErrRowRefused, "not the sender's fault")
	var keys int
	require.NoError(t, db.Pool().QueryRow(ctx, `SELECT count(*) FROM event_keys WHERE idempotency_key = 'evt_clock_ahead'`).Scan(&keys))
	require.Zero(t, keys, "nothing of it stored: its resend is not a duplicate")
}
