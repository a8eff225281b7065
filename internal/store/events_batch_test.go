package store_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// Issue 11: one call stores a batch: new events get their outbox rows (in
// batch order) and deliveries; a key or body repeated inside the batch, or
// already stored, resolves to the one event.
func TestEventInsertBatchResolvesDuplicatesInOneStatement(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	pre, _, err := db.EventInsert(ctx, newEvent("acme", "old"), nil)
	require.NoError(t, err)

	sum := sha256.Sum256([]byte(`{"ref":"main"}`))
	body := func(ev *webhook.Event) *webhook.Event { ev.BodySHA256 = sum[:]; return ev }
	items := []store.EventInsertItem{
		{Event: newEvent("acme", "a"), Routes: []string{"billing", "crm"}},
		{Event: newEvent("acme", "b"), Routes: []string{"billing"}},
		{Event: newEvent("acme", "a"), Routes: []string{"billing", "crm"}},
		{Event: newEvent("acme", "old")},
		{Event: body(newEvent("github", "d-1"))},
		{Event: body(newEvent("github", "d-2"))},
	}
	res, err := db.EventInsertBatch(ctx, items)
	require.NoError(t, err)
	require.Len(t, res, len(items))
	for _, r := range res {
		require.NoError(t, r.Err)
	}
	require.Equal(t, []bool{false, false, true, true, false, true}, []bool{
		res[0].Duplicate, res[1].Duplicate, res[2].Duplicate, res[3].Duplicate, res[4].Duplicate, res[5].Duplicate})
	require.Equal(t, items[0].Event.ID, res[0].ID)
	require.Equal(t, res[0].ID, res[2].ID, "a key twice in one batch: one event")
	require.Equal(t, pre, res[3].ID, "an earlier event's key: its id")
	require.Equal(t, res[4].ID, res[5].ID, "one body twice under two keys: one event")

	rows, err := db.Pool().Query(ctx, `SELECT event_id FROM outbox WHERE event_id <> $1 ORDER BY id`, pre)
	require.NoError(t, err)
	var outbox []uuid.UUID
	for rows.Next() {
		var id uuid.UUID
		require.NoError(t, rows.Scan(&id))
		outbox = append(outbox, id)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []uuid.UUID{res[0].ID, res[1].ID, res[4].ID}, outbox, "one outbox row per new event, in batch order")
	var deliveries int
	require.NoError(t, db.Pool().QueryRow(ctx, `SELECT count(*) FROM deliveries`).Scan(&deliveries))
	require.Equal(t, 3, deliveries, "a: billing and crm; b: billing")
}

// A row Postgres refuses for its data fails the whole statement with a
// RefusedError, and nothing of the batch is stored.
func TestEventInsertBatchRefusedRowStoresNothing(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	_, err := db.Pool().Exec(ctx, `ALTER TABLE events ADD CONSTRAINT test_refused CHECK (idempotency_key <> 'bad')`)
	require.NoError(t, err)
	_, err = db.EventInsertBatch(ctx, []store.EventInsertItem{
		{Event: newEvent("acme", "good"), Routes: []string{"billing"}},
		{Event: newEvent("acme", "bad")},
	})
	var re *store.RefusedError
	require.ErrorAs(t, err, &re)
	require.True(t, errors.Is(err, store.ErrRowRefused))
	require.Contains(t, re.Reason, `violates check constraint "test_refused"`)
	for _, table := range []string{"events", "outbox", "deliveries"} {
		var n int
		require.NoError(t, db.Pool().QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n))
		require.Zero(t, n, table)
	}
}

// A batch wakes the publishers once: its outbox rows go in with one
// statement, and the outbox trigger notifies per statement.
func TestEventInsertBatchNotifiesOnce(t *testing.T) {
	t.Parallel()
	db, dbURL := storetest.Open(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	listener, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer listener.Close(context.Background())
	_, err = listener.Exec(ctx, "LISTEN "+store.OutboxChannel)
	require.NoError(t, err)

	var items []store.EventInsertItem
	for i := range 10 {
		items = append(items, store.EventInsertItem{Event: newEvent("acme", fmt.Sprint("n", i)), Routes: []string{"billing"}})
	}
	res, err := db.EventInsertBatch(ctx, items)
	require.NoError(t, err)
	require.Len(t, res, 10)
	// A marker sent after the batch committed: every notification of the
	// batch arrives before it.
	_, err = db.Pool().Exec(ctx, `SELECT pg_notify($1, 'marker')`, store.OutboxChannel)
	require.NoError(t, err)
	var before int
	for {
		n, err := listener.WaitForNotification(ctx)
		require.NoError(t, err)
		if n.Payload == "marker" {
			break
		}
		before++
	}
	require.Equal(t, 1, before, "one NOTIFY for a batch of 10 events")
}
