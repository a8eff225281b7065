package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/rs/zerolog"
)

// JobStore keeps the jobs long actions run as (*store.DB).
type JobStore interface {
	JobCreate(ctx context.Context, j *store.Job) (*store.Job, bool, error)
	JobProgress(ctx context.Context, id, owner uuid.UUID, progress json.RawMessage) error
	JobFinish(ctx context.Context, id, owner uuid.UUID, progress, result json.RawMessage, errText string, cancelled bool) error
	JobCancel(ctx context.Context, id uuid.UUID) (*store.Job, error)
	JobCancelRequested(ctx context.Context, id uuid.UUID) (bool, error)
	JobsAbandon(ctx context.Context) (int64, error)
	JobGet(ctx context.Context, id uuid.UUID) (*store.Job, error)
	JobList(ctx context.Context, before uuid.UUID, limit int) ([]store.Job, int64, error)
}

// Job timing: a running job moves its heartbeat every jobHeartbeat (one
// older than store.JobAbandoned is marked failed by the sweep, which runs
// as often), and stores its progress at most every jobProgressEvery.
const (
	jobHeartbeat     = 5 * time.Second
	jobProgressEvery = 500 * time.Millisecond
	// jobCancelPoll is how often a running job looks for a cancel asked
	// of another process (one asked of its own stops it at once).
	jobCancelPoll = time.Second
)

// errJobCancelled is the cause of a job's end at a cancel.
var errJobCancelled = errors.New("cancelled")

// jobIDKey carries a running job's id in its context.
type jobIDKey struct{}

// JobIDOf is the id of the job ctx runs in; uuid.Nil outside one.
func JobIDOf(ctx context.Context) uuid.UUID {
	id, _ := ctx.Value(jobIDKey{}).(uuid.UUID)
	return id
}

// JobRunner runs long actions (replay, a route's retry, requeue, purge)
// in the background of the process that serves the API, each stored as a
// job a caller polls: a browser or a script never holds a request open
// for minutes, and any process sharing the database answers the poll.
type JobRunner struct {
	ctx    context.Context
	logger zerolog.Logger
	// owner names this runner in the jobs it stores: only it beats and
	// ends them.
	owner uuid.UUID

	mu     sync.Mutex // guards closed, cancels and wg.Add against Wait
	closed bool
	wg     sync.WaitGroup
	// cancels stops the jobs running here, by id.
	cancels map[uuid.UUID]context.CancelCauseFunc
}

// NewJobRunner returns a runner whose jobs stop when ctx ends (the
// process stops): each is then stored as failed, saying so.
func NewJobRunner(ctx context.Context, logger zerolog.Logger) *JobRunner {
	return &JobRunner{ctx: ctx, logger: logger, owner: uuid.New(), cancels: map[uuid.UUID]context.CancelCauseFunc{}}
}

// Sweep marks abandoned, every jobHeartbeat until the runner's ctx ends,
// the running jobs of any process whose heartbeat lapsed
// (store.JobsAbandon): a job's state is the one stored, so a job whose
// process died reads failed from then on, and stays so. Wait waits for
// it (once ctx ended).
func (r *JobRunner) Sweep(st JobStore) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		// Every team's jobs, whichever pool st reads through.
		ctx := store.WithTeam(r.ctx, store.TeamAll)
		t := time.NewTicker(jobHeartbeat)
		defer t.Stop()
		for {
			n, err := st.JobsAbandon(ctx)
			switch {
			case err != nil && ctx.Err() == nil:
				r.logger.Warn().Err(err).Msg("marking abandoned jobs")
			case n > 0:
				r.logger.Warn().Int64("jobs", n).Msg("jobs marked abandoned: their processes stopped beating their heartbeats")
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// Wait refuses new jobs and waits for the running ones to end (and for
// Sweep, which ends with the runner's ctx).
func (r *JobRunner) Wait() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.wg.Wait()
}

// ErrNoJobs is returned when the service runs no jobs: the CLI, which
// runs its actions in the foreground, or a process shutting down.
var ErrNoJobs = errors.New("jobs are not run here")

// ErrIdempotencyKeyReused is returned for an Idempotency-Key used before
// with another action or other arguments.
var ErrIdempotencyKeyReused = errors.New("idempotency key reused")

// StartJob stores a job of kind for request and runs it in the
// background. With an idempotency key the actor used before for the same
// kind and request, it starts nothing and returns the earlier job with
// started false; used for anything else, ErrIdempotencyKeyReused. run
// reports progress through its function, which stores it (throttled); its
// result is the job's report.
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
	r := s.Jobs
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.ctx.Err() != nil {
		return nil, false, ErrNoJobs
	}
	job, created, err := s.Store.JobCreate(ctx, &store.Job{ID: id, Kind: kind, Actor: actor, IdempotencyKey: idempotencyKey, Request: req, Owner: r.owner})
	if err != nil {
		return nil, false, err
	}
	if !created {
		if job.Kind != kind || !sameJSON(job.Request, req) {
			return nil, false, fmt.Errorf("%w: Idempotency-Key %q was used for another request (%s %s): use a new key for a new request",
				ErrIdempotencyKeyReused, idempotencyKey, job.Kind, job.Request)
		}
		return job, false, nil
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.run(store.WithTeam(WithActor(r.ctx, actor), store.TeamOf(ctx)), s.Store, job.ID, kind, run)
	}()
	return job, true, nil
}

// sameJSON reports whether two JSON documents hold the same values
// (Postgres' jsonb orders keys its own way).
func sameJSON(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

func (r *JobRunner) run(ctx context.Context, st JobStore, id uuid.UUID, kind string, run func(ctx context.Context, progress func(any)) (any, error)) {
	log := r.logger.With().Str("job", id.String()).Str("kind", kind).Logger()
	// A job marked abandoned (its heartbeat lapsed: a process stalled,
	// Postgres out of reach) is over for its readers: it stops here too,
	// rather than go on changing things under a job that reads failed.
	ctx, abandon := context.WithCancelCause(context.WithValue(ctx, jobIDKey{}, id))
	defer abandon(nil)
	r.mu.Lock()
	r.cancels[id] = abandon
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.cancels, id)
		r.mu.Unlock()
	}()
	lost := func(err error) bool {
		if !errors.Is(err, store.ErrJobNotRunning) {
			return false
		}
		abandon(err)
		return true
	}
	var (
		mu      sync.Mutex
		last    json.RawMessage
		stored  time.Time
		pending bool
	)
	save := func(force bool) {
		mu.Lock()
		defer mu.Unlock() // held while storing: the newest progress is stored last
		if !pending || (!force && time.Since(stored) < jobProgressEvery) {
			return
		}
		pending, stored = false, time.Now()
		if err := st.JobProgress(context.WithoutCancel(ctx), id, r.owner, last); err != nil && !lost(err) {
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
		save(false)
	}
	// The heartbeat tells a poller the job is alive while its progress
	// does not move (a replay waiting on a slow destination).
	beat, beatDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(beatDone)
		t := time.NewTicker(jobHeartbeat)
		defer t.Stop()
		poll := time.NewTicker(jobCancelPoll)
		defer poll.Stop()
		for {
			select {
			case <-beat:
				return
			case <-poll.C:
				// A cancel asked of another process (the API behind a
				// load balancer): stop within a poll.
				if asked, err := st.JobCancelRequested(context.WithoutCancel(ctx), id); err != nil {
					log.Warn().Err(err).Msg("looking for a cancel of the job")
				} else if asked {
					abandon(errJobCancelled)
				}
			case <-t.C:
				if err := st.JobProgress(context.WithoutCancel(ctx), id, r.owner, nil); lost(err) {
					log.Error().Err(err).Msg("job marked abandoned while it ran: stopping it")
				} else if err != nil {
					log.Warn().Err(err).Msg("job heartbeat")
				}
			}
		}
	}()
	res, err := protect(ctx, log, run, progress)
	close(beat)
	<-beatDone
	save(true)
	errText := ""
	// A job that ended by itself before it heard of a cancel ended as it
	// did; one stopped by it reads cancelled, its progress saying how
	// far it got.
	cancelled := err != nil && errors.Is(context.Cause(ctx), errJobCancelled)
	switch {
	case cancelled:
		log.Info().Msg("job cancelled")
		errText = "cancelled: it stopped where its progress says; what it did stays done, run it again for the rest"
	case err != nil:
		log.Warn().Err(err).Msg("job ended with an error")
		errText = PublicError(err)
		if ctx.Err() != nil && !errors.Is(context.Cause(ctx), store.ErrJobNotRunning) {
			errText = "stopped: the process running it shut down (" + errText + "); what it did stays done, run it again for the rest"
		}
	}
	var raw json.RawMessage
	if !isNil(res) {
		if raw, err = json.Marshal(res); err != nil {
			errText = "report: " + err.Error()
		}
	}
	mu.Lock()
	p := last
	mu.Unlock()
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := st.JobFinish(fctx, id, r.owner, p, raw, errText, cancelled); errors.Is(err, store.ErrJobNotRunning) {
		// Its readers were told it was abandoned, and that stands: what
		// it did is in the audit log, and here.
		log.Error().Err(err).RawJSON("progress", orEmpty(p)).RawJSON("result", orEmpty(raw)).Str("reported", errText).
			Msg("a job marked abandoned ended afterwards; its end is not stored")
		return
	} else if err != nil {
		log.Error().Err(err).Msg("storing the end of a job")
		return
	}
	if errText != "" && !cancelled {
		log.Warn().Str("reported", errText).Msg("job failed")
		return
	}
	if !cancelled {
		log.Info().Msg("job done")
	}
}

// protect runs a job, turning a panic into its error: one job's fault
// does not stop the process and every other job with it.
func protect(ctx context.Context, log zerolog.Logger, run func(ctx context.Context, progress func(any)) (any, error), progress func(any)) (res any, err error) {
	defer func() {
		if p := recover(); p != nil {
			log.Error().Str("panic", fmt.Sprint(p)).Str("stack", string(debug.Stack())).Msg("job panicked")
			res, err = nil, errJobPanicked
		}
	}()
	return run(ctx, progress)
}

// errJobPanicked ends a job that panicked.
var errJobPanicked = errors.New("the job failed on a fault of hookrelay (a panic): the log of the process that ran it has its stack")

// PublicError is what an operator may read of err in a job or the audit
// log, which every viewer reads: the refusals and stalls the service
// words for them as they are; anything else (a driver's error names hosts
// and users) only as its kind, the whole of it going to the log of the
// process that met it.
func PublicError(err error) string {
	var stalled *StalledError
	switch {
	case errors.Is(err, ErrInvalidRequest), errors.Is(err, ErrUnknownRoute), errors.Is(err, ErrNotFound),
		errors.Is(err, ErrExists), errors.Is(err, ErrConflict), errors.As(err, &stalled),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), errors.Is(err, errJobPanicked),
		errors.Is(err, ErrIdempotencyKeyReused):
		return err.Error()
	}
	return "storage or broker unavailable (the log of the process that ran it says why)"
}

// JobCancel asks a running job to stop, and answers it: a job running in
// this process stops at once, one running in another within
// jobCancelPoll. It ends cancelled, with the progress it reached (a
// replay's says where: run it again for the rest, JobResume). A job that
// is not running answers ErrConflict, an unknown one (or another team's)
// ErrNotFound. Audited as job.cancel.
func (s *Service) JobCancel(ctx context.Context, id uuid.UUID) (*store.Job, error) {
	// A job the caller cannot see (another team's, or none) is refused
	// before the audit row: naming it there would tell the caller it
	// exists.
	if _, err := s.Store.JobGet(ctx, id); err != nil {
		return nil, err
	}
	return audited(ctx, s, ActionJobCancel, id.String(), map[string]any{}, func() (*store.Job, error) {
		j, err := s.Store.JobCancel(ctx, id)
		if errors.Is(err, store.ErrJobNotRunning) {
			return nil, fmt.Errorf("%w: job %s is %s, not running", ErrConflict, id, j.State)
		}
		if err != nil {
			return nil, err
		}
		if r := s.Jobs; r != nil {
			r.mu.Lock()
			stop := r.cancels[id]
			r.mu.Unlock()
			if stop != nil {
				stop(errJobCancelled)
			}
		}
		return j, nil
	}, func(j *store.Job) map[string]any { return map[string]any{"kind": j.Kind} })
}

// JobGet returns one job, or ErrNotFound.
func (s *Service) JobGet(ctx context.Context, id uuid.UUID) (*store.Job, error) {
	return s.Store.JobGet(ctx, id)
}

// JobList lists jobs newest first, from before the job before.
func (s *Service) JobList(ctx context.Context, before uuid.UUID, limit int) ([]store.Job, int64, error) {
	if limit <= 0 {
		limit = DefaultListLimit
	}
	return s.Store.JobList(ctx, before, limit)
}

// orEmpty is raw, or an empty JSON object when there is none.
func orEmpty(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("{}")
	}
	return raw
}
