package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/stretchr/testify/require"
)

// Issue 42: one replay (its first job and every run again for the rest)
// never enqueues a pair twice, whatever the pair's state is since: a
// delivered pair of a replay with include_delivered is not sent again by
// the same replay; another replay may.
func TestOneReplayNeverEnqueuesAPairTwice(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	id, _, err := db.EventInsert(ctx, newEvent("acme", "replay-once"), []string{"billing"})
	require.NoError(t, err)
	require.NoError(t, recordErr(db.AttemptRecord(ctx, &webhook.Attempt{EventID: id, Route: "billing", Number: 1, StartedAt: time.Now(), Outcome: webhook.StateDelivered})))
	pair := []store.ReplayPair{{EventID: id, Route: "billing"}}
	first := uuid.New()
	done, err := db.ReplayEnqueueBy(ctx, first, pair, true, false)
	require.NoError(t, err)
	require.Equal(t, pair, done)
	// It was delivered again; the same replay, run again, leaves it.
	_, err = db.Pool().Exec(ctx, `UPDATE deliveries SET state = 'delivered' WHERE event_id = $1`, id)
	require.NoError(t, err)
	done, err = db.ReplayEnqueueBy(ctx, first, pair, true, false)
	require.NoError(t, err)
	require.Empty(t, done, "the same replay does not send a pair twice")
	done, err = db.ReplayEnqueueBy(ctx, uuid.New(), pair, true, false)
	require.NoError(t, err)
	require.Equal(t, pair, done, "another replay does")
	var outbox int
	require.NoError(t, db.Pool().QueryRow(ctx, `SELECT count(*) FROM outbox WHERE event_id = $1 AND route IS NOT NULL`, id).Scan(&outbox))
	require.Equal(t, 2, outbox)
}

// Issue 42: a running job can be cancelled; the request is stored for
// its process to see, a job that is not running refuses it, and the end
// reads cancelled.
func TestJobCancel(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	owner := uuid.New()
	job, _, err := db.JobCreate(ctx, &store.Job{ID: uuid.New(), Kind: "replay", Actor: "alice", Owner: owner})
	require.NoError(t, err)
	asked, err := db.JobCancelRequested(ctx, job.ID)
	require.NoError(t, err)
	require.False(t, asked)
	got, err := db.JobCancel(ctx, job.ID)
	require.NoError(t, err)
	require.NotNil(t, got.CancelRequestedAt)
	asked, err = db.JobCancelRequested(ctx, job.ID)
	require.NoError(t, err)
	require.True(t, asked)
	require.NoError(t, db.JobFinish(ctx, job.ID, owner, json.RawMessage(`{"after":"x"}`), nil, "cancelled", true))
	got, err = db.JobGet(ctx, job.ID)
	require.NoError(t, err)
	require.Equal(t, store.JobCancelled, got.State)
	_, err = db.JobCancel(ctx, job.ID)
	require.ErrorIs(t, err, store.ErrJobNotRunning, "an ended job is not cancelled")
	_, err = db.JobCancel(ctx, uuid.New())
	require.ErrorIs(t, err, store.ErrNotFound)
}

// Issue 42: a retry by query selects the retrying pairs of the events a
// search found, and none of the others; an empty list selects nothing.
func TestRetrySelectionByEvents(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	retrying := func(key string) uuid.UUID {
		id, _, err := db.EventInsert(ctx, newEvent("acme", key), []string{"billing"})
		require.NoError(t, err)
		_, _, err = db.AttemptRecord(ctx, &webhook.Attempt{EventID: id, Route: "billing", Number: 1, StartedAt: time.Now(), Status: 503, Outcome: webhook.StateRetrying, RetryIn: time.Hour})
		require.NoError(t, err)
		_, err = db.Pool().Exec(ctx, `DELETE FROM outbox WHERE event_id = $1`, id)
		require.NoError(t, err)
		return id
	}
	a, b, c := retrying("evt_ra"), retrying("evt_rb"), retrying("evt_rc")
	n, err := db.DeliveryRetryCount(ctx, store.RetrySelection{Route: "billing"})
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
	n, err = db.DeliveryRetryCount(ctx, store.RetrySelection{Route: "billing", Events: []uuid.UUID{a, c}})
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	n, err = db.DeliveryRetryCount(ctx, store.RetrySelection{Route: "billing", Events: []uuid.UUID{}})
	require.NoError(t, err)
	require.Zero(t, n, "a search that found nothing retries nothing")
	done, err := db.DeliveryRetryNow(ctx, store.RetrySelection{Route: "billing", Events: []uuid.UUID{b}}, 0, 10)
	require.NoError(t, err)
	require.Len(t, done, 1)
	require.Equal(t, b, done[0].EventID)
	done, err = db.DeliveryRetryNow(ctx, store.RetrySelection{EventID: a}, 0, 10)
	require.NoError(t, err)
	require.Len(t, done, 1, "one event, as before")
}
