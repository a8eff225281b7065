package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/rs/zerolog"
)

// JobStore keeps the jobs long actions run as (*store.DB).
type JobStore interface {
	JobCreate(ctx context.Context, j *store.Job) (*store.Job, bool, error)
	JobProgress(ctx context.Context, id uuid.UUID, progress json.RawMessage) error
	JobFinish(ctx context.Context, id uuid.UUID, progress, result json.RawMessage, errText string) error
	JobGet(ctx context.Context, id uuid.UUID, abandonAfter time.Duration) (*store.Job, error)
	JobList(ctx context.Context, before uuid.UUID, limit int) ([]store.Job, int64, error)
}

// Job timing: a running job moves its heartbeat at least every
// jobHeartbeat, and one whose heartbeat is jobAbandoned old is reported
// failed (the process running it died). Progress is stored at most every
// jobProgressEvery.
const (
	jobHeartbeat     = 5 * time.Second
	jobAbandoned     = 30 * time.Second
	jobProgressEvery = 500 * time.Millisecond
)

// JobRunner runs long actions (replay, a route's retry, requeue, purge)
// in the background of the process that serves the API, each stored as a
// job a caller polls: a browser or a script never holds a request open
// for minutes, and any process sharing the database answers the poll.
type JobRunner struct {
	ctx    context.Context
	logger zerolog.Logger
	wg     sync.WaitGroup
}

// NewJobRunner returns a runner whose jobs stop when ctx ends (the
// process stops): each is then stored as failed, saying so.
func NewJobRunner(ctx context.Context, logger zerolog.Logger) *JobRunner {
	return &JobRunner{ctx: ctx, logger: logger}
}

// Wait waits for the running jobs to end.
func (r *JobRunner) Wait() { r.wg.Wait() }

// ErrNoJobs is returned when the service has no job runner (the CLI runs
// its actions in the foreground).
var ErrNoJobs = errors.New("jobs are not run here")

// StartJob stores a job of kind for request and runs it in the
// background. With an idempotency key the actor used before, it starts
// nothing and returns the earlier job with started false. run reports
// progress through its function, which stores it (throttled); its result
// is the job's report.
func (s *Service) StartJob(ctx context.Context, kind, idempotencyKey string, request any, run func(ctx context.Context, progress func(any)) (any, error)) (job *store.Job, started bool, err error) {
	if s.Jobs == nil {
		return nil, false, ErrNoJobs
	}
	actor := ActorOf(ctx)
	if actor == "" {
		return nil, false, errNoActor
	}
	req, err := json.Marshal(request)
	if err != nil {
		return nil, false, fmt.Errorf("job request: %w", err)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, false, err
	}
	job, created, err := s.Store.JobCreate(ctx, &store.Job{ID: id, Kind: kind, Actor: actor, IdempotencyKey: idempotencyKey, Request: req})
	if err != nil || !created {
		return job, false, err
	}
	r := s.Jobs
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.run(WithActor(r.ctx, actor), s.Store, job.ID, kind, run)
	}()
	return job, true, nil
}

func (r *JobRunner) run(ctx context.Context, st JobStore, id uuid.UUID, kind string, run func(ctx context.Context, progress func(any)) (any, error)) {
	log := r.logger.With().Str("job", id.String()).Str("kind", kind).Logger()
	var (
		mu      sync.Mutex
		last    json.RawMessage
		stored  time.Time
		pending bool
	)
	store := func(force bool) {
		mu.Lock()
		p, due := last, pending && (force || time.Since(stored) >= jobProgressEvery)
		if due {
			pending, stored = false, time.Now()
		}
		mu.Unlock()
		if !due {
			return
		}
		if err := st.JobProgress(context.WithoutCancel(ctx), id, p); err != nil {
			log.Warn().Err(err).Msg("storing job progress")
		}
	}
	progress := func(v any) {
		raw, err := json.Marshal(v)
		if err != nil {
			return
		}
		mu.Lock()
		last, pending = raw, true
		mu.Unlock()
		store(false)
	}
	// The heartbeat tells a poller the job is alive while its progress
	// does not move (a replay waiting on a slow destination).
	beat := make(chan struct{})
	go func() {
		t := time.NewTicker(jobHeartbeat)
		defer t.Stop()
		for {
			select {
			case <-beat:
				return
			case <-t.C:
				mu.Lock()
				p := last
				mu.Unlock()
				if p == nil {
					p = json.RawMessage("{}")
				}
				if err := st.JobProgress(context.WithoutCancel(ctx), id, p); err != nil {
					log.Warn().Err(err).Msg("job heartbeat")
				}
			}
		}
	}()
	res, err := run(ctx, progress)
	close(beat)
	store(true)
	var raw json.RawMessage
	errText := ""
	if err != nil {
		errText = err.Error()
		if ctx.Err() != nil {
			errText = "stopped: the process running it shut down (" + errText + "); what it did stays done, run it again for the rest"
		}
	}
	if res != nil {
		if raw, err = json.Marshal(res); err != nil {
			errText = "report: " + err.Error()
		}
	}
	mu.Lock()
	p := last
	mu.Unlock()
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := st.JobFinish(fctx, id, p, raw, errText); err != nil {
		log.Error().Err(err).Msg("storing the end of a job")
		return
	}
	if errText != "" {
		log.Warn().Str("error", errText).Msg("job failed")
		return
	}
	log.Info().Msg("job done")
}

// JobGet returns one job, or ErrNotFound.
func (s *Service) JobGet(ctx context.Context, id uuid.UUID) (*store.Job, error) {
	return s.Store.JobGet(ctx, id, jobAbandoned)
}

// JobList lists jobs newest first, from before the job before.
func (s *Service) JobList(ctx context.Context, before uuid.UUID, limit int) ([]store.Job, int64, error) {
	if limit <= 0 {
		limit = DefaultListLimit
	}
	return s.Store.JobList(ctx, before, limit)
}
