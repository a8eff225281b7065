package store_test

import (
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// openWithOwner is a fresh store and a connection of the tables' owner
// beside it, for what a test reads or sets behind the store's back.
func openWithOwner(t *testing.T) (*store.DB, *pgx.Conn) {
	t.Helper()
	db, url := storetest.Open(t)
	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return db, conn
}

func newEvent(source, key string) *webhook.Event {
	return &webhook.Event{
		ID: uuid.Must(uuid.NewV7()), Source: source, IdempotencyKey: key, EventType: "invoice.paid",
		ContentType: "application/json", Headers: http.Header{"X-Test": {"1"}},
		Body: []byte(`{"id":"` + key + `"}`), ReceivedAt: time.Now(),
	}
}

// newEventAt is newEvent received at t: its UUIDv7 id carries t, as a
// receiver's does, so it is stored in t's day partition.
func newEventAt(source, key string, t time.Time) *webhook.Event {
	ev := newEvent(source, key)
	ms := uint64(t.UnixMilli())
	for i := range 6 {
		ev.ID[i] = byte(ms >> (40 - 8*i))
	}
	ev.ReceivedAt = t
	return ev
}

func TestEventInsertConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()

	const n = 20
	ids := make([]uuid.UUID, n)
	dups := make([]bool, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids[i], dups[i], errs[i] = db.EventInsert(ctx, newEvent("acme", "evt_1"), nil)
		}()
	}
	wg.Wait()
	firsts := 0
	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, ids[0], ids[i], "every insert answers the first event's id")
		if !dups[i] {
			firsts++
		}
	}
	require.Equal(t, 1, firsts, "exactly one insert is not a duplicate")
	count, err := db.EventCount(ctx, "acme")
	require.NoError(t, err)
	require.EqualValues(t, 1, count)
	backlog, _, err := db.OutboxStats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, backlog, "one outbox row for one event")
}

func TestEventStoredByteForByte(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	ev := newEvent("acme", "raw")
	ev.Body = []byte("{\"a\" :  1,\n \"b\":\"\xc3\xa9\"}\x00 trailing")
	id, dup, err := db.EventInsert(ctx, ev, []string{"billing", "crm"})
	require.NoError(t, err)
	require.False(t, dup)
	got, err := db.EventGet(ctx, id)
	require.NoError(t, err)
	require.Equal(t, ev.Body, got.Body)
	require.Equal(t, "1", got.Headers.Get("X-Test"))

	for _, route := range []string{"billing", "crm"} {
		state, attempts, err := db.DeliveryGet(ctx, id, route)
		require.NoError(t, err)
		require.Equal(t, webhook.StatePending, state, "pending from the moment of acceptance")
		require.Zero(t, attempts)
	}
	stats, err := db.RouteStatsList(ctx)
	require.NoError(t, err)
	require.Len(t, stats, 2)
	require.EqualValues(t, 1, stats[0].Undelivered)
}

func TestOutboxClaimSkipsLockedRows(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	for i := range 5 {
		_, _, err := db.EventInsert(ctx, newEvent("acme", fmt.Sprint("k", i)), nil)
		require.NoError(t, err)
	}
	a, err := db.OutboxClaim(ctx, 3)
	require.NoError(t, err)
	require.Len(t, a.Messages(), 3)
	b, err := db.OutboxClaim(ctx, 3)
	require.NoError(t, err)
	require.Len(t, b.Messages(), 2, "rows locked by the first claim are skipped")
	for _, m := range a.Messages() {
		require.Equal(t, "acme.invoice.paid", m.RoutingKey)
	}

	// a: one confirmed, the rest released; b: released.
	require.NoError(t, a.Complete(ctx, []int64{a.Messages()[0].OutboxID}, nil))
	require.NoError(t, b.Release(ctx))
	backlog, _, err := db.OutboxStats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 4, backlog)

	c, err := db.OutboxClaim(ctx, 10)
	require.NoError(t, err)
	require.Len(t, c.Messages(), 4, "released rows are claimable again")
	require.NoError(t, c.Release(ctx))
}

func TestRequireSchema(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	require.NoError(t, db.RequireSchema(ctx))

	_, err := db.Pool().Exec(ctx, `UPDATE schema_migrations SET version = 0`)
	require.NoError(t, err)
	err = db.RequireSchema(ctx)
	require.ErrorIs(t, err, store.ErrSchemaBehind)
	require.Contains(t, err.Error(), "hookrelay migrate")

	_, err = db.Pool().Exec(ctx, `DROP TABLE schema_migrations`)
	require.NoError(t, err)
	require.ErrorIs(t, db.RequireSchema(ctx), store.ErrSchemaBehind)
}

// emptyDatabase creates a database without any migration for t, dropped
// when t ends, and returns its URL. The drop connects afresh: a
// connection of the test's own is closed by then (it used to be, and the
// drop failed unseen, leaving the databases behind).
func emptyDatabase(t *testing.T) string {
	t.Helper()
	admin := testenv.AdminDatabaseURL()
	testenv.Require(t, "postgres", func() error {
		conn, err := pgx.Connect(context.Background(), admin)
		if err != nil {
			return err
		}
		return conn.Close(context.Background())
	})
	exec := func(sql string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		return err
	}
	name := "hookrelay_test_migrate_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	require.NoError(t, exec("CREATE DATABASE "+name))
	t.Cleanup(func() {
		if err := exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)"); err != nil {
			t.Errorf("dropping %s: %v", name, err)
		}
	})
	return storetest.WithDatabase(admin, name)
}

func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := emptyDatabase(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = store.Migrate(ctx, dbURL)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	v, err := store.Migrate(ctx, dbURL)
	require.NoError(t, err, "re-running is a no-op")
	require.Equal(t, store.LatestVersion(), v)
}

// Every migration sets lock_timeout before its DDL, so a migration never
// queues every other query behind a lock it waits for.
func TestMigrationsSetLockTimeout(t *testing.T) {
	t.Parallel()
	err := fs.WalkDir(store.MigrationsFS(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(store.MigrationsFS(), path)
		require.NoError(t, err)
		for _, line := range strings.Split(string(b), "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "--") {
				continue
			}
			require.True(t, strings.HasPrefix(line, "SET lock_timeout"), "%s: first statement must set lock_timeout", path)
			break
		}
		return nil
	})
	require.NoError(t, err)
}

func TestRedact(t *testing.T) {
	t.Parallel()
	got := store.Redact("postgres://user:hunter2@db:5432/x?sslmode=disable")
	require.NotContains(t, got, "hunter2")
	require.Contains(t, got, "user:xxxxx@db:5432")
}

// The relay's processes plan each statement once (issue 21: replanning
// every execution on partitioned tables cost more than the execution);
// a plan_cache_mode in the URL wins.
func TestGenericPlansUnlessTheURLSaysOtherwise(t *testing.T) {
	t.Parallel()
	dbURL := storetest.NewDatabase(t)
	ctx := context.Background()
	mode := func(url string) string {
		db, err := store.Open(ctx, store.Config{URL: url, MaxConns: 1, GenericPlans: true})
		require.NoError(t, err)
		defer db.Close()
		var m string
		require.NoError(t, db.Pool().QueryRow(ctx, `SHOW plan_cache_mode`).Scan(&m))
		return m
	}
	require.Equal(t, "force_generic_plan", mode(dbURL))
	sep := "?"
	if strings.Contains(dbURL, "?") {
		sep = "&"
	}
	require.Equal(t, "auto", mode(dbURL+sep+"plan_cache_mode=auto"))
}
