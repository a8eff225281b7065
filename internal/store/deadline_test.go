package store_test

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/stretchr/testify/require"
)

// openProxied opens a second store on db's database through a proxy the
// test can stall. The proxy is cut (ending any stall) before the store is
// closed, so a call stuck on a stalled socket cannot hang the cleanup.
func openProxied(t *testing.T, dbURL string, cfg store.Config) (*store.DB, *testenv.Proxy) {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	proxy := testenv.NewProxy(t, u.Host)
	u.Host = proxy.Addr()
	cfg.URL = u.String()
	db, err := store.Open(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	t.Cleanup(proxy.Cut)
	return db, proxy
}

// within runs fn and returns its error, failing the test when fn has not
// returned after limit.
func within(t *testing.T, limit time.Duration, what string, fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- fn() }()
	select {
	case err := <-done:
		t.Logf("%s returned after %s: %v", what, time.Since(start).Round(time.Millisecond), err)
		return err
	case <-time.After(testenv.Scaled(limit)):
		t.Fatalf("%s did not return within %s while Postgres was stalled", what, limit)
		return nil
	}
}

// Item 11: a connection that stops answering without closing must not block
// the outbox. Claim and complete each fail within the query timeout, and
// the rows are all still there once Postgres answers again.
func TestOutboxCallsFailWithinDeadlineWhilePostgresStalls(t *testing.T) {
	t.Parallel()
	direct, dbURL := storetest.Open(t)
	ctx := context.Background()
	for i := range 3 {
		_, _, err := direct.EventInsert(ctx, newEvent("acme", fmt.Sprint("k", i)), nil)
		require.NoError(t, err)
	}
	db, proxy := openProxied(t, dbURL, store.Config{MaxConns: 4, QueryTimeout: time.Second})
	const limit = 3 * time.Second // the query timeout plus room for a busy machine

	batch, err := db.OutboxClaim(ctx, 10)
	require.NoError(t, err)
	require.Len(t, batch.Messages(), 3)
	confirmed := []int64{batch.Messages()[0].OutboxID}

	proxy.Stall()
	require.Error(t, within(t, limit, "completing a claimed batch", func() error {
		return batch.Complete(ctx, confirmed, nil)
	}))
	require.Error(t, within(t, limit, "claiming a batch", func() error {
		b, err := db.OutboxClaim(ctx, 10)
		if err == nil {
			_ = b.Release(ctx)
		}
		return err
	}))

	proxy.Resume()
	// The failed complete deleted nothing. Its rows come back once Postgres
	// ends the abandoned session and its locks.
	require.Eventually(t, func() bool {
		b, err := db.OutboxClaim(ctx, 10)
		if err != nil {
			return false
		}
		n := len(b.Messages())
		return b.Release(ctx) == nil && n == 3
	}, testenv.Scaled(30*time.Second), 100*time.Millisecond, "every row is claimable again after the stall")
}
