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

// purgeFixture inserts an event received age ago with one delivery per
// route in the given final state (pending: never attempted), its outbox
// row already drained, and returns its id.
func purgeFixture(t *testing.T, db *store.DB, key string, age time.Duration, states map[string]webhook.DeliveryState) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	ev := newEvent("acme", key)
	ev.ReceivedAt = time.Now().Add(-age)
	var routes []string
	for r := range states {
		routes = append(routes, r)
	}
	id, _, err := db.EventInsert(ctx, ev, routes)
	require.NoError(t, err)
	for r, s := range states {
		if s == webhook.StatePending {
			continue
		}
		require.NoError(t, recordErr(db.AttemptRecord(ctx, &webhook.Attempt{EventID: id, Route: r, Number: 1, StartedAt: ev.ReceivedAt, Outcome: s})))
	}
	_, err = db.Pool().Exec(ctx, `DELETE FROM outbox WHERE event_id = $1`, id)
	require.NoError(t, err)
	return id
}

// eventKept reports whether id still has its row and its body.
func eventKept(t *testing.T, db *store.DB, id uuid.UUID) (row, body bool) {
	t.Helper()
	ev, err := db.EventShow(context.Background(), id)
	if err == store.ErrNotFound {
		return false, false
	}
	require.NoError(t, err)
	return true, !ev.Purged && ev.Body != ""
}

// Purge keeps what is undelivered (issue 8, item 16): an event with a dead
// pair keeps its row, body and deliveries (its message still sits in the
// route's .dead queue, and `dead requeue` must find it), unless
// IncludeDead; an event with any pair still in flight on a served route is
// never touched.
func TestPurgeKeepsUndeliveredUnlessIncludeDead(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	const old, mid = 40 * 24 * time.Hour, 20 * 24 * time.Hour
	D, X, P, R := webhook.StateDelivered, webhook.StateDead, webhook.StatePending, webhook.StateRetrying
	delivered := purgeFixture(t, db, "delivered", old, map[string]webhook.DeliveryState{"billing": D})
	dead := purgeFixture(t, db, "dead", old, map[string]webhook.DeliveryState{"billing": X})
	halfDead := purgeFixture(t, db, "half_dead", old, map[string]webhook.DeliveryState{"billing": D, "crm": X})
	midDead := purgeFixture(t, db, "mid_dead", mid, map[string]webhook.DeliveryState{"billing": X})
	retrying := purgeFixture(t, db, "retrying", old, map[string]webhook.DeliveryState{"billing": D, "crm": R})
	pending := purgeFixture(t, db, "pending", old, map[string]webhook.DeliveryState{"crm": P})

	cfg := store.PurgeConfig{
		OlderThan: time.Now().Add(-7 * 24 * time.Hour), DedupeBefore: time.Now().Add(-30 * 24 * time.Hour),
		Batch: 2, ServedRoutes: []string{"billing", "crm"},
	}
	res, err := db.Purge(ctx, cfg)
	require.NoError(t, err)
	t.Logf("%+v", res)
	row, _ := eventKept(t, db, delivered)
	require.False(t, row, "a delivered event past the dedupe window is deleted")
	for name, id := range map[string]uuid.UUID{"dead": dead, "half dead": halfDead, "mid dead": midDead, "retrying": retrying, "pending": pending} {
		row, body := eventKept(t, db, id)
		require.True(t, row && body, "%s: kept whole", name)
	}
	state, _, err := db.DeliveryGet(ctx, halfDead, "billing")
	require.NoError(t, err)
	require.Equal(t, D, state, "an event kept keeps all its deliveries: a replay must still know billing has it")
	require.EqualValues(t, 1, res.Events)
	require.EqualValues(t, 1, res.Deliveries)
	require.EqualValues(t, 5, res.KeptUndelivered, "the operator is told what was kept")

	cfg.IncludeDead = true
	res, err = db.Purge(ctx, cfg)
	require.NoError(t, err)
	for name, id := range map[string]uuid.UUID{"dead": dead, "half dead": halfDead, "mid dead": midDead} {
		row, _ := eventKept(t, db, id)
		require.False(t, row, "%s: deleted with IncludeDead", name)
	}
	for name, id := range map[string]uuid.UUID{"retrying": retrying, "pending": pending} {
		row, body := eventKept(t, db, id)
		require.True(t, row && body, "%s: in flight, never purged", name)
	}
	require.EqualValues(t, 3, res.Events)
	require.EqualValues(t, 4, res.Deliveries)
	require.EqualValues(t, 2, res.KeptUndelivered)
}

// A purge that runs between a replay's selection and its enqueue (the
// operator looked, then cron purged) must not let the replay send an empty
// body: the enqueue re-checks purged_at in its own transaction.
func TestReplayEnqueueSkipsEventPurgedSinceSelection(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	id := purgeFixture(t, db, "dead_mid", 20*24*time.Hour, map[string]webhook.DeliveryState{"billing": webhook.StateDead})

	// The replay selects it: dead, body present.
	page, err := db.ReplayCandidatesPage(ctx, store.EventFilter{State: "dead"}, store.ReplayCursor{}, 100)
	require.NoError(t, err)
	require.Len(t, page, 1)
	require.False(t, page[0].Purged)

	// Purge deletes it meanwhile.
	res, err := db.Purge(ctx, store.PurgeConfig{
		OlderThan: time.Now().Add(-7 * 24 * time.Hour), DedupeBefore: time.Now().Add(-30 * 24 * time.Hour),
		Batch: 100, IncludeDead: true, ServedRoutes: []string{"billing"},
	})
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Events)

	done, err := db.ReplayEnqueue(ctx, []store.ReplayPair{{EventID: id, Route: "billing"}}, false, false)
	require.NoError(t, err)
	require.Empty(t, done, "a purged event is not enqueued")
	var outbox int
	require.NoError(t, db.Pool().QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&outbox))
	require.Zero(t, outbox, "nothing for the publisher to send with an empty body")

	// The other order: a replayed event (in the outbox, pending again) is
	// not purged.
	id2 := purgeFixture(t, db, "dead_mid_2", 20*24*time.Hour, map[string]webhook.DeliveryState{"billing": webhook.StateDead})
	done, err = db.ReplayEnqueue(ctx, []store.ReplayPair{{EventID: id2, Route: "billing"}}, false, false)
	require.NoError(t, err)
	require.Len(t, done, 1)
	res, err = db.Purge(ctx, store.PurgeConfig{
		OlderThan: time.Now().Add(-7 * 24 * time.Hour), DedupeBefore: time.Now().Add(-30 * 24 * time.Hour),
		Batch: 100, IncludeDead: true, ServedRoutes: []string{"billing"},
	})
	require.NoError(t, err)
	require.Zero(t, res.Events)
	_, body := eventKept(t, db, id2)
	require.True(t, body)
}

// Issue 38, reliability 2: which routes are served is decided when each
// day (or each batch of events) is decided, under its lock, not at the
// purge's start: a route made at run time while a long purge runs, and
// the old events replayed to it, keep their days, whole or row by row.
func TestPurgeDecidesServedRoutesUnderTheLock(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	now := time.Now()
	days := func(n int) time.Time { return now.AddDate(0, 0, -n) }
	_, err := db.EnsurePartitionsFor(ctx, days(42), now)
	require.NoError(t, err)
	insert := func(key string, at time.Time, outcome webhook.DeliveryState) uuid.UUID {
		ev := newEventAt("acme", key, at)
		id, _, err := db.EventInsert(ctx, ev, []string{"billing"})
		require.NoError(t, err)
		require.NoError(t, recordErr(db.AttemptRecord(ctx, &webhook.Attempt{
			EventID: id, Route: "billing", Number: 1, StartedAt: at, Status: 200, Outcome: outcome,
		})))
		return id
	}
	insert("first", days(41), webhook.StateDelivered) // a day dropped whole: the purge is under way
	whole := insert("whole", days(40), webhook.StateDelivered)
	byRow := insert("by_row", days(39), webhook.StateDelivered)
	insert("dead", days(39), webhook.StateDead) // its day goes row by row
	gone := insert("gone", days(39), webhook.StateDelivered)
	_, err = db.Pool().Exec(ctx, `DELETE FROM outbox`)
	require.NoError(t, err)

	var made bool
	cfg := store.PurgeConfig{OlderThan: days(7), DedupeBefore: days(30), Batch: 100, ServedRoutes: []string{"billing"},
		ProgressFunc: func(store.PurgeResult) {
			if made {
				return
			}
			made = true
			// After the first day went: an operator makes a route and
			// replays two old events to it, and their copies are
			// published (the outbox rows go).
			_, err := db.Pool().Exec(ctx, `INSERT INTO routes (name, team, declared, spec) VALUES ('late', 'platform', false, '{}')`)
			require.NoError(t, err)
			done, err := db.ReplayEnqueue(ctx, []store.ReplayPair{{EventID: whole, Route: "late"}, {EventID: byRow, Route: "late"}}, false, false)
			require.NoError(t, err)
			require.Len(t, done, 2)
			_, err = db.Pool().Exec(ctx, `DELETE FROM outbox`)
			require.NoError(t, err)
		}}
	res, err := db.Purge(ctx, cfg)
	require.NoError(t, err)
	require.True(t, made)
	require.Zero(t, res.Abandoned, "nothing of the new route is abandoned")
	for _, id := range []uuid.UUID{whole, byRow} {
		row, body := eventKept(t, db, id)
		require.True(t, row && body, "an event replayed to the new route is kept whole")
		state, _, err := db.DeliveryGet(ctx, id, "late")
		require.NoError(t, err)
		require.Equal(t, webhook.StatePending, state)
	}
	row, _ := eventKept(t, db, gone)
	require.False(t, row, "the rest of the row-by-row day is purged")
	var exists bool
	require.NoError(t, db.Pool().QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, "events_p"+days(40).UTC().Format("20060102")).Scan(&exists))
	require.True(t, exists, "the day of the replayed event is not dropped")
}
