package ops_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// jobStore keeps jobs in memory over a fakeStore.
type jobStore struct {
	*fakeStore
	mu   sync.Mutex
	jobs map[uuid.UUID]*store.Job
	done chan uuid.UUID
}

func newJobStore() *jobStore {
	return &jobStore{fakeStore: &fakeStore{}, jobs: map[uuid.UUID]*store.Job{}, done: make(chan uuid.UUID, 10)}
}

func (s *jobStore) JobCreate(_ context.Context, j *store.Job) (*store.Job, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, old := range s.jobs {
		if j.IdempotencyKey != "" && old.Actor == j.Actor && old.IdempotencyKey == j.IdempotencyKey {
			c := *old
			return &c, false, nil
		}
	}
	c := *j
	c.State = store.JobRunning
	s.jobs[j.ID] = &c
	out := c
	return &out, true, nil
}

func (s *jobStore) JobProgress(_ context.Context, id, owner uuid.UUID, p json.RawMessage) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j := s.jobs[id]; j.State != store.JobRunning || j.Owner != owner {
		return store.ErrJobNotRunning
	}
	if p != nil {
		s.jobs[id].Progress = p
	}
	return nil
}

// JobsAbandon finds nothing: the tests mark a job abandoned with abandon.
func (s *jobStore) JobsAbandon(context.Context) (int64, error) { return 0, nil }

// abandon marks job id abandoned, as JobsAbandon would once its heartbeat
// lapsed.
func (s *jobStore) abandon(id uuid.UUID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.jobs[id].State, s.jobs[id].Error = store.JobFailed, "abandoned"
}

// JobFinish ends a running job of owner's (the done channel hears of
// every call, refused or not).
func (s *jobStore) JobFinish(_ context.Context, id, owner uuid.UUID, p, res json.RawMessage, errText string, cancelled bool) error {
	defer func() { s.done <- id }()
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[id]
	if j.State != store.JobRunning || j.Owner != owner {
		return store.ErrJobNotRunning
	}
	j.State, j.Result, j.Error = store.JobSucceeded, res, errText
	switch {
	case cancelled:
		j.State = store.JobCancelled
	case errText != "":
		j.State = store.JobFailed
	}
	return nil
}

// JobCancel asks a running job to stop, as the store does.
func (s *jobStore) JobCancel(_ context.Context, id uuid.UUID) (*store.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[id]
	if !ok {
		return nil, store.ErrNotFound
	}
	c := *j
	if j.State != store.JobRunning {
		return &c, store.ErrJobNotRunning
	}
	now := time.Now()
	j.CancelRequestedAt = &now
	return &c, nil
}

func (s *jobStore) JobCancelRequested(_ context.Context, id uuid.UUID) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.jobs[id].CancelRequestedAt != nil, nil
}

func (s *jobStore) JobGet(_ context.Context, id uuid.UUID) (*store.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := *s.jobs[id]
	return &c, nil
}

func (s *jobStore) wait(t *testing.T) *store.Job {
	t.Helper()
	select {
	case id := <-s.done:
		j, err := s.JobGet(context.Background(), id)
		require.NoError(t, err)
		return j
	case <-time.After(testenv.Scaled(10 * time.Second)):
		t.Fatal("the job never ended")
		return nil
	}
}

func jobService(t *testing.T) (*ops.Service, *jobStore, context.CancelFunc) {
	st := newJobStore()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return &ops.Service{Store: st, Jobs: ops.NewJobRunner(ctx, zerolog.Nop())}, st, cancel
}

// A job's panic fails that job, saying so, and not the process; its
// driver-like error is not shown to the job's readers.
func TestJobFaultsStayInTheirJob(t *testing.T) {
	svc, st, _ := jobService(t)
	ctx := actorCtx()
	_, started, err := svc.StartJob(ctx, "replay", "", map[string]any{"a": 1}, func(context.Context, func(any)) (any, error) {
		panic("boom")
	})
	require.NoError(t, err)
	require.True(t, started)
	j := st.wait(t)
	require.Equal(t, store.JobFailed, j.State)
	require.Contains(t, j.Error, "panic")

	_, _, err = svc.StartJob(ctx, "replay", "", nil, func(context.Context, func(any)) (any, error) {
		return (*ops.ReplayResult)(nil), errors.New("dial tcp 10.1.2.3:5432: user secret-user refused")
	})
	require.NoError(t, err)
	j = st.wait(t)
	require.Equal(t, store.JobFailed, j.State)
	require.NotContains(t, j.Error, "10.1.2.3", "a driver's error stays in the log")
	require.Contains(t, j.Error, "storage or broker unavailable")
	require.Nil(t, j.Result, "a failed job without a report has none, not null")

	_, _, err = svc.StartJob(ctx, "replay", "", nil, func(_ context.Context, progress func(any)) (any, error) {
		progress(map[string]int{"enqueued": 5})
		return map[string]int{"replayed": 5}, nil
	})
	require.NoError(t, err)
	j = st.wait(t)
	require.Equal(t, store.JobSucceeded, j.State)
	require.JSONEq(t, `{"replayed":5}`, string(j.Result))
	require.JSONEq(t, `{"enqueued":5}`, string(j.Progress), "the last progress is stored when the job ends")
}

// An idempotency key answers its first job for the same request, and is
// refused for another; a runner that waited for its jobs starts no more.
func TestJobIdempotencyAndShutdown(t *testing.T) {
	svc, st, cancel := jobService(t)
	ctx := actorCtx()
	block := make(chan struct{})
	first, started, err := svc.StartJob(ctx, "purge", "k1", map[string]any{"older_than": "30d", "dry_run": true}, func(context.Context, func(any)) (any, error) {
		<-block
		return nil, nil
	})
	require.NoError(t, err)
	require.True(t, started)
	again, started, err := svc.StartJob(ctx, "purge", "k1", map[string]any{"dry_run": true, "older_than": "30d"}, nil)
	require.NoError(t, err)
	require.False(t, started)
	require.Equal(t, first.ID, again.ID)
	_, _, err = svc.StartJob(ctx, "purge", "k1", map[string]any{"older_than": "30d", "confirm": true}, nil)
	require.ErrorIs(t, err, ops.ErrIdempotencyKeyReused, "the key of a dry run does not answer the real purge")
	_, _, err = svc.StartJob(ctx, "replay", "k1", map[string]any{"older_than": "30d", "dry_run": true}, nil)
	require.ErrorIs(t, err, ops.ErrIdempotencyKeyReused)

	close(block)
	require.Equal(t, store.JobSucceeded, st.wait(t).State)
	cancel()
	svc.Jobs.Wait()
	_, _, err = svc.StartJob(ctx, "purge", "", nil, nil)
	require.ErrorIs(t, err, ops.ErrNoJobs)
}

// Issue 38, reliability 4: a job marked abandoned while its process still
// ran it (a stall past the heartbeat's limit) stops there, and its late
// end is not stored: it reads failed, abandoned, as it did.
func TestJobMarkedAbandonedStopsAndStaysFailed(t *testing.T) {
	svc, st, _ := jobService(t)
	ctx := actorCtx()
	marked, stopped := make(chan struct{}), make(chan error, 1)
	job, started, err := svc.StartJob(ctx, "replay", "", nil, func(ctx context.Context, progress func(any)) (any, error) {
		<-marked
		progress(map[string]int{"enqueued": 1}) // its owner learns it is no longer running
		select {
		case <-ctx.Done():
			stopped <- context.Cause(ctx)
		case <-time.After(testenv.Scaled(10 * time.Second)):
			stopped <- nil
		}
		return map[string]int{"replayed": 1}, nil
	})
	require.NoError(t, err)
	require.True(t, started)
	st.abandon(job.ID)
	close(marked)
	require.ErrorIs(t, <-stopped, store.ErrJobNotRunning, "the job was stopped")
	j := st.wait(t)
	require.Equal(t, store.JobFailed, j.State)
	require.Equal(t, "abandoned", j.Error)
	require.Nil(t, j.Result, "its late end is not stored")
}
