package store_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/stretchr/testify/require"
)

// Issue 38, reliability 4: a job whose heartbeat lapsed is abandoned, and
// that is its state, as stored: its process, if it comes back, can
// neither beat nor finish it, and it never reads succeeded afterwards.
func TestJobAbandonedStaysFailed(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	owner := uuid.New()
	job, created, err := db.JobCreate(ctx, &store.Job{ID: uuid.New(), Kind: "replay", Actor: "alice", Owner: owner})
	require.NoError(t, err)
	require.True(t, created)
	alive, _, err := db.JobCreate(ctx, &store.Job{ID: uuid.New(), Kind: "purge", Actor: "alice", Owner: owner})
	require.NoError(t, err)
	require.NoError(t, db.JobProgress(ctx, alive.ID, owner, json.RawMessage(`{"events": 1}`)), "its owner beats it")
	require.ErrorIs(t, db.JobProgress(ctx, alive.ID, uuid.New(), nil), store.ErrJobNotRunning, "nobody else does")

	// The first one's process stalled past the abandon limit.
	_, err = db.Pool().Exec(ctx, `UPDATE api_jobs SET heartbeat_at = now() - interval '1 minute' WHERE id = $1`, job.ID)
	require.NoError(t, err)
	n, err := db.JobsAbandon(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the lapsed one only")

	got, err := db.JobGet(ctx, job.ID)
	require.NoError(t, err)
	require.Equal(t, store.JobFailed, got.State)
	require.Contains(t, got.Error, "abandoned")
	require.NotNil(t, got.FinishedAt)

	// The process comes back, beats, and ends the job.
	require.ErrorIs(t, db.JobProgress(ctx, job.ID, owner, nil), store.ErrJobNotRunning)
	err = db.JobFinish(ctx, job.ID, owner, nil, json.RawMessage(`{"replayed": 5}`), "", false)
	require.ErrorIs(t, err, store.ErrJobNotRunning)
	got, err = db.JobGet(ctx, job.ID)
	require.NoError(t, err)
	require.Equal(t, store.JobFailed, got.State, "an abandoned job stays as it was read")
	require.Nil(t, got.Result)
	var stored string
	require.NoError(t, db.Pool().QueryRow(ctx, `SELECT state FROM api_jobs WHERE id = $1`, job.ID).Scan(&stored))
	require.Equal(t, store.JobFailed, stored, "the state read is the state stored")

	// The live one ends as its owner says, once; not by anyone else.
	require.ErrorIs(t, db.JobFinish(ctx, alive.ID, uuid.New(), nil, nil, "", false), store.ErrJobNotRunning)
	require.NoError(t, db.JobFinish(ctx, alive.ID, owner, nil, json.RawMessage(`{"events": 1}`), "", false))
	require.ErrorIs(t, db.JobFinish(ctx, alive.ID, owner, nil, nil, "late", false), store.ErrJobNotRunning)
	got, err = db.JobGet(ctx, alive.ID)
	require.NoError(t, err)
	require.Equal(t, store.JobSucceeded, got.State)
}
