package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/stretchr/testify/require"
)

// Issue 8, item 17: pairs pending on a route that is no longer in the
// config (removed, or config skew) never clear. events show says so,
// replay refuses them with the reason, and purge treats them as abandoned
// once older than its age.
func TestUnservedRoutePairs(t *testing.T) {
	t.Parallel()
	db, dbURL := storetest.Open(t)
	ctx := context.Background()
	insert := func(key string, age time.Duration, routes ...string) uuid.UUID {
		id, _, err := db.EventInsert(ctx, &webhook.Event{
			ID: uuid.Must(uuid.NewV7()), Source: "acme", IdempotencyKey: key, EventType: "invoice.paid",
			ContentType: "application/json", Body: []byte(`{"id":"` + key + `"}`), ReceivedAt: time.Now().Add(-age),
		}, routes)
		require.NoError(t, err)
		_, err = db.Pool().Exec(ctx, `DELETE FROM outbox WHERE event_id = $1`, id)
		require.NoError(t, err)
		return id
	}
	// "legacy" was removed from the config; billing delivered the event.
	orphan := insert("evt_orphan", 40*24*time.Hour, "billing", "legacy")
	require.NoError(t, recordErr(db.AttemptRecord(ctx, &webhook.Attempt{EventID: orphan, Route: "billing", Number: 1, StartedAt: time.Now(), Status: 200, Outcome: webhook.StateDelivered})))
	young := insert("evt_young", time.Hour, "legacy")
	path, _ := cliConfig(t, dbURL, "hookrelay")

	out, _, err := runCLI(t, path, "events", "show", orphan.String())
	require.NoError(t, err)
	t.Log("\n" + out)
	require.Contains(t, out, "route legacy: pending after 0 attempt(s)")
	require.Contains(t, out, "route legacy is not configured: no dispatcher delivers it")
	require.NotContains(t, out, "route billing is not configured")
	out, _, err = runCLI(t, path, "events", "show", "--json", orphan.String())
	require.NoError(t, err)
	var ev ops.EventDetail
	require.NoError(t, json.Unmarshal([]byte(out), &ev))
	for _, d := range ev.Deliveries {
		require.Equal(t, d.Route == "legacy", d.Unserved, d.Route)
	}
	out, _, err = runCLI(t, path, "events", "list", "--json")
	require.NoError(t, err)
	var list ops.EventList
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Len(t, list.Items, 2)
	for _, e := range list.Items {
		for _, d := range e.Deliveries {
			require.Equal(t, d.Route == "legacy", d.Unserved, d.Route)
		}
	}

	// Replay refuses them, saying why, instead of calling them in flight.
	out, _, err = runCLI(t, path, "replay", "--event", orphan.String(), "--dry-run")
	require.NoError(t, err)
	t.Log("\n" + out)
	require.Contains(t, out, "skipped: route legacy is not configured: no dispatcher delivers it")
	out, _, err = runCLI(t, path, "replay", "--source", "acme", "--state", "pending", "--dry-run")
	require.NoError(t, err)
	require.Contains(t, out, "would replay 0 pair(s), skipped 2")
	_, _, err = runCLI(t, path, "replay", "--route", "legacy", "--since", "60d")
	require.ErrorContains(t, err, `route "legacy" is neither in the config nor made at run time`)

	// Purge abandons the old one; the young one is kept.
	out, _, err = runCLI(t, path, "purge", "--older-than", "7d", "--yes")
	require.NoError(t, err)
	t.Log("\n" + out)
	require.Contains(t, out, "abandoned: 1 pending or retrying deliveries to routes neither in the config nor made at run time")
	_, err = db.EventShow(ctx, orphan)
	require.ErrorIs(t, err, store.ErrNotFound, "past the dedupe window: deleted")
	_, err = db.EventShow(ctx, young)
	require.NoError(t, err, "younger than the age: kept")
}
