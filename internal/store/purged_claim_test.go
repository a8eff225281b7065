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

// Issue 38, reliability 6(d): a claim of a pair whose event is gone says
// whether the event was stored once and purged (webhook.ErrEventPurged:
// its dedupe key kept, or its day dropped, its key expired since), which
// tells a stale copy from a message of an event never stored
// (webhook.ErrEventMissing and ErrNotFound alone).
func TestClaimOfAPurgedEventSaysSo(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	now := time.Now()
	_, err := db.EnsurePartitionsFor(ctx, now.AddDate(0, 0, -41), now)
	require.NoError(t, err)
	delivered := func(key string, age time.Duration) uuid.UUID {
		ev := newEventAt("acme", key, now.Add(-age))
		id, _, err := db.EventInsert(ctx, ev, []string{"billing"})
		require.NoError(t, err)
		require.NoError(t, recordErr(db.AttemptRecord(ctx, &webhook.Attempt{
			EventID: id, Route: "billing", Number: 1, StartedAt: ev.ReceivedAt, Status: 200, Outcome: webhook.StateDelivered,
		})))
		return id
	}
	old := delivered("old", 40*24*time.Hour) // its key expires with the purge
	mid := delivered("mid", 20*24*time.Hour) // its key kept
	_, err = db.Pool().Exec(ctx, `DELETE FROM outbox`)
	require.NoError(t, err)
	res, err := db.Purge(ctx, store.PurgeConfig{OlderThan: now.Add(-7 * 24 * time.Hour), DedupeBefore: now.Add(-30 * 24 * time.Hour), ServedRoutes: []string{"billing"}})
	require.NoError(t, err)
	require.EqualValues(t, 2, res.Events, "%+v", res)
	require.EqualValues(t, 1, res.Keys, "%+v", res)

	claim := func(id uuid.UUID) error {
		_, err := db.DeliveryClaim(ctx, uuid.New(), id, "billing", 1, 0, time.Minute)
		return err
	}
	for name, id := range map[string]uuid.UUID{"its key kept": mid, "its day dropped, its key expired": old} {
		err := claim(id)
		require.ErrorIs(t, err, webhook.ErrEventPurged, name)
		require.ErrorIs(t, err, webhook.ErrEventMissing, name)
		require.ErrorIs(t, err, store.ErrNotFound, name)
	}
	unknown, err := uuid.NewV7()
	require.NoError(t, err)
	for name, id := range map[string]uuid.UUID{"a v7 id of today": unknown, "not a v7 id": uuid.New()} {
		err := claim(id)
		require.ErrorIs(t, err, webhook.ErrEventMissing, name)
		require.ErrorIs(t, err, store.ErrNotFound, name)
		require.NotErrorIs(t, err, webhook.ErrEventPurged, name)
	}
}
