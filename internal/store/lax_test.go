package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/stretchr/testify/require"
)

// Issue 11: a delivery's claim and release commit without waiting for the
// WAL flush (their loss in a crash of Postgres costs a duplicate POST at
// most); everything else, the record included, waits for it.
func TestClaimsCommitWithoutFlushRecordsWithIt(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	var lax, main string
	require.NoError(t, db.LaxPool().QueryRow(ctx, `SHOW synchronous_commit`).Scan(&lax))
	require.NoError(t, db.Pool().QueryRow(ctx, `SHOW synchronous_commit`).Scan(&main))
	require.Equal(t, "off", lax)
	require.Equal(t, "on", main)

	id, _, err := db.EventInsert(ctx, newEvent("acme", "lax"), []string{"billing"})
	require.NoError(t, err)
	laxBefore, mainBefore := db.LaxPool().Stat().AcquireCount(), db.Pool().Stat().AcquireCount()
	l, err := db.DeliveryClaim(ctx, uuid.New(), id, "billing", 1, 0, time.Minute)
	require.NoError(t, err)
	require.Equal(t, laxBefore+1, db.LaxPool().Stat().AcquireCount(), "the claim ran on the lax pool")
	require.Equal(t, mainBefore, db.Pool().Stat().AcquireCount())
	// Visible to every other session at once, as a flushed commit.
	require.NotNil(t, readLease(t, db, id).owner)
	_, _, err = l.Record(ctx, &webhook.Attempt{EventID: id, Route: "billing", Number: 1, StartedAt: time.Now(), Status: 200, Outcome: webhook.StateDelivered})
	require.NoError(t, err)
	require.Equal(t, laxBefore+1, db.LaxPool().Stat().AcquireCount(), "the record waits for the flush: main pool")
	require.Equal(t, "delivered", readLease(t, db, id).state)
}
