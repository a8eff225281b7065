package store_test

import (
	"context"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/stretchr/testify/require"
)

// A database URL listing several hosts with target_session_attrs=read-write
// (docs/production.md, "Postgres with a replica and failover") works when
// its first host is down: each connection moves on to the next host, as
// after a failover. The fault suite kills a real primary and promotes its
// replica; this checks the URL form and the store's own parsing of it.
func TestStoreOpensThroughAMultiHostURLWhoseFirstHostIsDown(t *testing.T) {
	t.Parallel()
	dbURL := storetest.NewDatabase(t)
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	// A port nobody listens on: taken, then released.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	down := ln.Addr().String()
	require.NoError(t, ln.Close())
	u.Host = down + "," + u.Host
	q := u.Query()
	q.Set("target_session_attrs", "read-write")
	u.RawQuery = q.Encode()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := store.Open(ctx, store.Config{URL: u.String(), MaxConns: 2, ApplicationName: "hookrelay-test"})
	require.NoError(t, err)
	defer db.Close()
	id, dup, err := db.EventInsert(ctx, newEvent("acme", "evt_failover"), []string{"billing"})
	require.NoError(t, err)
	require.False(t, dup)
	var n int
	require.NoError(t, db.Pool().QueryRow(ctx, `SELECT count(*) FROM events WHERE id = $1`, id).Scan(&n))
	require.Equal(t, 1, n)
}
