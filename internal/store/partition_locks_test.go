package store_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/stretchr/testify/require"
)

// Issue 38, reliability 3: with generic plans (the processes' setting), a
// statement that reaches a day-partitioned table through a parameter locks
// every day partition and its indexes each time it runs, however few it
// touches: one claim took 65 locks with 5 partitions and 4,433 with 369,
// and 14 concurrent claims exhausted the lock table at the default
// max_locks_per_transaction (64). The hot statements of the receiver and
// the dispatcher name their events' days in their text, so the plan is
// pruned when it is made: their locks are those of 5 partitions (within
// 20%) with 40 and with 400, and 16 claims at once, each holding its
// transaction, all go through.
func TestHotStatementLocksDoNotGrowWithDays(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("makes 400 days of partitions")
	}
	ctx := context.Background()
	dbURL := storetest.NewDatabase(t)
	// The processes' pool settings: generic plans, and a claims' pool of
	// 16 (a quarter of 64).
	db, err := store.Open(ctx, store.Config{URL: dbURL, MaxConns: 64, ApplicationName: "hookrelay-locks-test", GenericPlans: true})
	require.NoError(t, err)
	t.Cleanup(db.Close)

	// Today's events, each with a pending pair on billing; the first
	// one's copy due in the outbox.
	ids := make([]uuid.UUID, 20)
	for i := range ids {
		ids[i], _, err = db.EventInsert(ctx, newEvent("acme", fmt.Sprint("evt_", i)), []string{"billing"})
		require.NoError(t, err)
	}
	_, err = db.Pool().Exec(ctx, `DELETE FROM outbox WHERE event_id <> $1`, ids[0])
	require.NoError(t, err)
	// Leases held (committed) for the statements that need one.
	owner := uuid.New()
	var leases []*store.DeliveryLease
	for _, id := range ids[10:13] {
		l, err := db.DeliveryClaim(ctx, owner, id, "billing", 1, 0, time.Hour)
		require.NoError(t, err)
		require.Equal(t, webhook.StatePending, l.State())
		leases = append(leases, l)
	}
	attempt := func(id uuid.UUID) *webhook.Attempt {
		return &webhook.Attempt{EventID: id, Route: "billing", Number: 1, Gen: 0, StartedAt: time.Now(), Status: 200, Outcome: webhook.StateDelivered}
	}

	statements := map[string]struct {
		lax bool
		run func(q store.Querier) error
	}{
		"claim":                    {true, func(q store.Querier) error { _, err := db.ClaimIn(ctx, q, uuid.New(), ids[1], "billing"); return err }},
		"claim, creating the pair": {true, func(q store.Querier) error { _, err := db.ClaimIn(ctx, q, uuid.New(), ids[1], "crm"); return err }},
		"claims together": {true, func(q store.Querier) error {
			return db.ClaimTogetherIn(ctx, q, []store.ClaimArgs{
				{Owner: uuid.New(), EventID: ids[2], Route: "billing", Attempt: 1, Gen: 0, TTL: time.Minute},
				{Owner: uuid.New(), EventID: ids[3], Route: "billing", Attempt: 1, Gen: 0, TTL: time.Minute},
			})
		}},
		"record":  {false, func(q store.Querier) error { return store.RecordIn(ctx, q, leases[0], attempt(ids[10])) }},
		"release": {true, func(q store.Querier) error { return store.ReleaseIn(ctx, q, leases[0]) }},
		"restart": {false, func(q store.Querier) error { return store.RestartIn(ctx, q, leases[0]) }},
		"records together": {false, func(q store.Querier) error {
			return store.RecordTogetherIn(ctx, q, leases[1:3], []*webhook.Attempt{attempt(ids[11]), attempt(ids[12])})
		}},
		"stale check": {false, func(q store.Querier) error { return store.StaleIn(ctx, q, ids[4], "billing") }},
	}
	measure := func() map[string]int {
		out := map[string]int{}
		for name, s := range statements {
			cold, warm, err := db.LocksAfter(ctx, s.lax, s.run)
			require.NoError(t, err, name)
			out[name+" (prepared)"], out[name] = cold, warm
		}
		b, err := db.OutboxClaim(ctx, 10)
		require.NoError(t, err)
		require.Len(t, b.Messages(), 1)
		out["outbox claim"], err = db.OutboxLocks(ctx, b)
		require.NoError(t, err)
		require.NoError(t, b.Release(ctx))
		return out
	}
	partitions := func() (n int) {
		require.NoError(t, db.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'deliveries'::regclass`).Scan(&n))
		return n
	}
	// addDays makes day partitions back from the oldest until there are
	// n, a few days per transaction (each creation locks its tables: a
	// year at once would take thousands of locks).
	oldest := time.Now().UTC().AddDate(0, 0, -1)
	addDays := func(n int) {
		for partitions() < n {
			first := oldest.AddDate(0, 0, -min(10, n-partitions()))
			_, err := db.EnsurePartitionsFor(ctx, first, oldest.AddDate(0, 0, -1))
			require.NoError(t, err)
			oldest = first
		}
	}
	// The template's partitions: the legacy one and four days when it was
	// built, and a day more for each day since (it is built once per set
	// of migrations, and opening a database makes the days ahead).
	start := partitions()
	require.GreaterOrEqual(t, start, 5, "the template's: the legacy one and four days")
	require.Less(t, start, 40, "the template is older than a month: its days would be the measure")
	within := func(base, now map[string]int, days int) {
		t.Helper()
		var lines []string
		for name, n := range now {
			lines = append(lines, fmt.Sprintf("%s: %d locks (%d with %d partitions)", name, n, base[name], start))
		}
		sort.Strings(lines)
		t.Logf("with %d partitions:\n%s", days, strings.Join(lines, "\n"))
		for name, n := range now {
			require.LessOrEqual(t, float64(n), 1.2*float64(base[name]), "%s with %d partitions: %d locks, %d with %d", name, days, n, base[name], start)
		}
	}

	base := measure()
	// 40 first: without the days in the text, a statement would take
	// about ten times as many locks, and fail here rather than take
	// thousands from the lock table every test shares at 400.
	addDays(40)
	within(base, measure(), 40)
	addDays(400)
	within(base, measure(), 400)

	// 16 claims at once, each holding its transaction (its locks) until
	// all of them claimed.
	const claims = 16
	var wg sync.WaitGroup
	errs := make(chan error, claims)
	held := make(chan int, claims)
	release := make(chan struct{})
	for i := range claims {
		id, _, err := db.EventInsert(ctx, newEvent("acme", fmt.Sprint("evt_c", i)), []string{"billing"})
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- db.HoldLocks(ctx, func(q store.Querier) error {
				if _, err := db.ClaimIn(ctx, q, uuid.New(), id, "billing"); err != nil {
					return err
				}
				n, err := store.LocksIn(ctx, q)
				held <- n
				<-release
				return err
			})
		}()
	}
	total := 0
	for range claims {
		select {
		case n := <-held:
			total += n
		case err := <-errs:
			close(release)
			require.NoError(t, err, "a claim failed while the others held theirs")
		}
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	t.Logf("%d claims held %d locks together with %d partitions", claims, total, partitions())
}
