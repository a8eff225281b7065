package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/stretchr/testify/require"
)

// Issue 40: a lease taken over just before a failover. Claims commit
// without waiting for the WAL flush (internal/store/lax.go); a takeover
// that the promoted standby never received would bring back the dead
// holder's expired lease, and the new holder's record, after its POST was
// answered 2xx, would be refused as 'lost_lease' and the pair POSTed
// again. A takeover is flushed (and so at the synchronous standby) before
// the claim returns: the record after the promotion stands.
//
// The primary's WAL writer is slowed to its maximum (10s) so that nothing
// but a commit that waits flushes the takeover: without the flush, the
// takeover is lost at the kill (this test fails with ErrLeaseLost).
func TestLeaseTakenOverJustBeforeAFailoverIsKept(t *testing.T) {
	t.Parallel()
	if _, err := findPostgresBin(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI: no Postgres server binaries: %v", err)
		}
		t.Skip(err)
	}
	tmp := t.TempDir()
	require.NoError(t, os.Chmod(tmp, 0o755)) // Postgres runs as the postgres user below it when we are root
	require.NoError(t, os.Chmod(filepath.Dir(tmp), 0o755))
	primary, err := newPostgres(filepath.Join(tmp, "primary"), freePort(t))
	require.NoError(t, err)
	primary.settings = append(append([]string{}, chaosSettings...), "wal_writer_delay=10000ms")
	require.NoError(t, primary.start())
	t.Cleanup(func() { _ = primary.stop() })
	repDir := filepath.Join(tmp, "rep")
	require.NoError(t, os.Mkdir(repDir, 0o755))
	require.NoError(t, chownToPostgres(repDir))
	replica, err := primary.newReplica(repDir, "replica", freePort(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = replica.stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	require.NoError(t, primary.syncStandby(ctx))
	require.NoError(t, primary.createDatabase("hookrelay"))
	url := failoverURL("hookrelay", primary.addr(), replica.addr())
	_, err = store.Migrate(ctx, url)
	require.NoError(t, err)
	db, err := store.Open(ctx, store.Config{URL: url, MaxConns: 4, ApplicationName: "hookrelay-test"})
	require.NoError(t, err)
	t.Cleanup(db.Close)

	ev := &webhook.Event{ID: uuid.Must(uuid.NewV7()), Source: "acme", IdempotencyKey: "evt_takeover", EventType: "invoice.paid", ContentType: "application/json",
		Headers: http.Header{}, Body: []byte(`{"id":"evt_takeover"}`), ReceivedAt: time.Now()}
	id, _, err := db.EventInsert(ctx, ev, []string{"billing"})
	require.NoError(t, err)

	// The first holder claims and dies mid-POST. Its lease is made durable
	// by a later commit that waits (an event's insert), as the load's
	// commits do.
	dead, err := db.DeliveryClaim(ctx, uuid.New(), id, "billing", 1, 0, 200*time.Millisecond)
	require.NoError(t, err)
	require.False(t, dead.TookOver)
	_, _, err = db.EventInsert(ctx, &webhook.Event{ID: uuid.Must(uuid.NewV7()), Source: "acme", IdempotencyKey: "evt_flush", EventType: "invoice.paid",
		ContentType: "application/json", Headers: http.Header{}, Body: []byte(`{}`), ReceivedAt: time.Now()}, nil)
	require.NoError(t, err)

	// Once its lease expired, the copy sent again is claimed: a takeover.
	var taker *store.DeliveryLease
	poll(t, testenv.Scaled(30*time.Second), "the expired lease taken over", func() bool {
		l, err := db.DeliveryClaim(ctx, uuid.New(), id, "billing", 1, 0, time.Minute)
		taker = l
		return err == nil // until then, its lease is still live
	})
	require.True(t, taker.TookOver)

	// The primary dies before anything else commits; the standby is
	// promoted. The taker's POST is answered 2xx meanwhile.
	require.NoError(t, primary.kill())
	require.NoError(t, replica.promote())

	// Its record, on the promoted standby, stands: the pair is delivered,
	// not POSTed again.
	var recErr error
	poll(t, testenv.Scaled(60*time.Second), "the record reaching the promoted standby", func() bool {
		_, _, recErr = taker.Record(ctx, &webhook.Attempt{EventID: id, Route: "billing", Number: 1, Gen: 0,
			Outcome: webhook.StateDelivered, Status: 200, StartedAt: time.Now(), Duration: time.Millisecond})
		// Connections to the killed primary fail until the pool dials the
		// promoted standby; a refusal of the record is not one of those.
		return recErr == nil || errors.Is(recErr, webhook.ErrLeaseLost)
	})
	require.NoError(t, recErr, "the takeover was lost with the primary: the 2xx'd pair would be POSTed again")
	state, attempts, err := db.DeliveryGet(ctx, id, "billing")
	require.NoError(t, err)
	require.Equal(t, webhook.StateDelivered, state)
	require.Equal(t, 2, attempts, "the dead holder's attempt (lease_expired) and the taker's")
}

// poll calls cond, on the test's goroutine, every 50ms until it holds,
// and fails the test when it has not within timeout.
func poll(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", timeout, what)
		}
		<-tick.C
	}
}

// freePort is a port the kernel handed out and released.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	return port
}
