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
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
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
	items := []webhook.Insert{
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
	_, err = db.EventInsertBatch(ctx, []webhook.Insert{
		{Event: newEvent("acme", "good"), Routes: []string{"billing"}},
		{Event: newEvent("acme", "bad")},
	})
	var re *webhook.RefusedError
	require.ErrorAs(t, err, &re)
	require.True(t, errors.Is(err, webhook.ErrRowRefused))
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

	var items []webhook.Insert
	for i := range 10 {
		items = append(items, webhook.Insert{Event: newEvent("acme", fmt.Sprint("n", i)), Routes: []string{"billing"}})
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

// Issue 18, item 8: two group-commit batches of a source that dedupes on
// its body, whose body hashes cross (A's key-sorted rows carry bodies X,
// Y; B's, Y, X), take the hash index's entries in crossed order and
// deadlock (a trigger slows each row, so they do every time). Postgres
// aborts one; its batch is made again and finds its duplicates: both
// batches answer every item, none with an error.
func TestCrossedBodyHashesDoNotFailABatch(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	_, err := db.Pool().Exec(ctx, `
		CREATE FUNCTION test_slow_insert() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_sleep(0.3); RETURN NEW; END $$;
		CREATE TRIGGER test_slow_insert BEFORE INSERT ON event_keys FOR EACH ROW EXECUTE FUNCTION test_slow_insert();`)
	require.NoError(t, err)
	item := func(key, body string) webhook.Insert {
		ev := newEvent("gh", key)
		ev.Body = []byte(body)
		sum := sha256.Sum256(ev.Body)
		ev.BodySHA256 = sum[:]
		return webhook.Insert{Event: ev, Routes: []string{"billing"}}
	}
	a := []webhook.Insert{item("a1", "X"), item("a2", "Y")}
	b := []webhook.Insert{item("b1", "Y"), item("b2", "X")}
	deadlocks := func(t require.TestingT) int64 {
		var n int64
		require.NoError(t, db.Pool().QueryRow(ctx, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&n))
		return n
	}
	before := deadlocks(t)
	type answer struct {
		res []webhook.Stored
		err error
	}
	done := make(chan answer, 2)
	for _, batch := range [][]webhook.Insert{a, b} {
		go func() {
			res, err := db.EventInsertBatch(ctx, batch)
			done <- answer{res, err}
		}()
	}
	dups := 0
	for range 2 {
		select {
		case ans := <-done:
			require.NoError(t, ans.err, "a deadlocked batch is made again, not failed")
			for _, r := range ans.res {
				require.NoError(t, r.Err)
				if r.Duplicate {
					dups++
				}
			}
		case <-time.After(testenv.Scaled(30 * time.Second)):
			t.Fatal("the batches did not finish")
		}
	}
	require.Equal(t, 2, dups, "the later batch's two events are duplicates of the earlier's bodies")
	var n int
	require.NoError(t, db.Pool().QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&n))
	require.Equal(t, 2, n)
	// The batches did cross: Postgres broke a deadlock between them (its
	// statistics arrive within a second or so).
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Greater(c, deadlocks(c), before) }, testenv.Scaled(10*time.Second), 50*time.Millisecond,
		"no deadlock happened: the test did not cross the batches")
}

// Issue 21: a receiver that publishes its events itself holds their outbox
// rows. The insert returns each new event's row, writes it due only after
// the hold, and wakes no publisher (migration 0018); no claim takes it
// until it is due. OutboxDueNow hands rows to the publishers at once;
// OutboxDeletePublished deletes rows, skipping one a claim holds.
func TestHeldOutboxRowsWaitForTheirHold(t *testing.T) {
	t.Parallel()
	db, dbURL := storetest.Open(t)
	db.HoldOutbox(time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	listener, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer listener.Close(context.Background())
	_, err = listener.Exec(ctx, "LISTEN "+store.OutboxChannel)
	require.NoError(t, err)

	first, err := db.EventInsertBatch(ctx, []webhook.Insert{{Event: newEvent("acme", "held0"), Routes: []string{"billing"}}})
	require.NoError(t, err)
	var items []webhook.Insert
	for i := range 3 {
		items = append(items, webhook.Insert{Event: newEvent("acme", fmt.Sprint("held", i)), Routes: []string{"billing"}})
	}
	res, err := db.EventInsertBatch(ctx, items)
	require.NoError(t, err)
	require.True(t, res[0].Duplicate)
	require.Zero(t, res[0].OutboxID, "a duplicate writes no outbox row")
	rows := map[int64]uuid.UUID{}
	for _, r := range res[1:] {
		require.False(t, r.Duplicate)
		require.NotZero(t, r.OutboxID)
		var eventID uuid.UUID
		var wait time.Duration
		require.NoError(t, db.Pool().QueryRow(ctx,
			`SELECT event_id, next_try_at - now() FROM outbox WHERE id = $1`, r.OutboxID).Scan(&eventID, &wait))
		require.Equal(t, r.ID, eventID, "the row returned is the event's")
		require.Greater(t, wait, 59*time.Minute, "due only after the hold")
		rows[r.OutboxID] = r.ID
	}

	// Neither insert woke a publisher: the marker is the first to arrive.
	_, err = db.Pool().Exec(ctx, `SELECT pg_notify($1, 'marker')`, store.OutboxChannel)
	require.NoError(t, err)
	n, err := listener.WaitForNotification(ctx)
	require.NoError(t, err)
	require.Equal(t, "marker", n.Payload, "a held row wakes no publisher")

	batch, err := db.OutboxClaim(ctx, 10)
	require.NoError(t, err)
	require.Empty(t, batch.Messages(), "no claim takes a held row")

	ids := make([]int64, 0, len(rows))
	for id := range rows {
		ids = append(ids, id)
	}
	require.NoError(t, db.OutboxDueNow(ctx, ids[:1]))
	batch, err = db.OutboxClaim(ctx, 10)
	require.NoError(t, err)
	defer func() { _ = batch.Release(context.Background()) }() // a failed check must not leave the claim open
	require.Len(t, batch.Messages(), 1, "a row made due is claimed")
	require.Equal(t, ids[0], batch.Messages()[0].OutboxID)

	// The claimed row is skipped (its claim deletes it); the others go.
	require.NoError(t, db.OutboxDeletePublished(ctx, ids))
	var left []int64
	r, err := db.Pool().Query(ctx, `SELECT id FROM outbox ORDER BY id`)
	require.NoError(t, err)
	left, err = pgx.CollectRows(r, pgx.RowTo[int64])
	require.NoError(t, err)
	require.ElementsMatch(t, []int64{first[0].OutboxID, ids[0]}, left, "the claimed row and the first event's, not asked for, are left")
	require.NoError(t, batch.Complete(ctx, []int64{ids[0]}, nil))
	var count int
	require.NoError(t, db.Pool().QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&count))
	require.Equal(t, 1, count)
}
