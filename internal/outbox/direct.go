package outbox

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hookrelay/hookrelay/internal/backoff"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Direct publishes the events a receiver has just stored, right after their
// commit, instead of waking a publisher to claim them back from the outbox.
// Their outbox rows were written in the same commit, due only after a hold
// (store.HoldOutbox): they are the safety net. Direct deletes the rows whose
// publish the broker confirmed; a row whose publish failed is made due at
// once, for the Relay to take with its backoff and its count of refusals;
// a row Direct never got to (the process died, its queue was full, the
// release failed) is swept by any publisher once its hold has passed. An
// event is thus published at least once, as through the Relay alone, and
// a message is still deleted from the outbox only after its confirm.
//
// At a few events a second this saves, per event, the publisher's claim (a
// locking read of the row joined with its event, the body read back), its
// transaction, and the wake-up of every publisher listening; confirmed rows
// are deleted together, one statement per DeleteAfter at most.
type Direct struct {
	cfg    DirectConfig
	logger zerolog.Logger

	mu sync.Mutex
	// queue holds the messages offered and not yet taken, bytes their
	// bodies' size.
	queue []webhook.Message
	bytes int
	// overflow holds the rows offered while the queue was full: Direct
	// makes them due for the Relay rather than publishing them.
	overflow []int64
	stopped  bool
	more     chan struct{}

	// After a publish that failed as a whole (the broker unreachable or
	// blocking), publishes wait until pausedUntil: what is handed over
	// meanwhile goes to the Relay, whose own backoff then decides when to
	// dial again. Without it, an outage under load would be a dial per
	// committed batch. Touched by Run only.
	retry       backoff.Backoff
	pausedUntil time.Time
	now         func() time.Time

	outcomes *prometheus.CounterVec
}

// DirectStore deletes and releases outbox rows.
type DirectStore interface {
	// OutboxDeletePublished deletes rows whose publish was confirmed.
	OutboxDeletePublished(ctx context.Context, ids []int64) error
	// OutboxDueNow makes rows due at once for the publishers.
	OutboxDueNow(ctx context.Context, ids []int64) error
}

// DirectConfig configures a Direct.
type DirectConfig struct {
	Store     DirectStore
	Publisher Publisher
	// Wake is the local Relay's wake-up, signalled after rows were made
	// due (the outbox trigger notifies only on inserts). May be nil.
	Wake chan<- struct{}
	// BatchSize is the most messages one publish takes.
	BatchSize int
	// MaxQueuedBytes bounds the bodies waiting for a publish; past it,
	// rows go to the Relay.
	MaxQueuedBytes int
	// DeleteAfter is the longest a confirmed row waits for its delete, so
	// that rows confirmed close together share one statement. It must be
	// well within the hold.
	DeleteAfter time.Duration
	// PublishTimeout bounds one publish and each statement; not cut short
	// by shutdown.
	PublishTimeout time.Duration
	Logger         zerolog.Logger
	// Registerer, when set, gets hookrelay_outbox_direct_total.
	Registerer prometheus.Registerer
	// AfterPublishFunc, when set, runs after a publish's confirms and
	// before its rows are deleted. Tests use it to kill the process there.
	AfterPublishFunc func()
}

// Direct outcomes, per row.
const (
	directPublished = "published" // confirmed and deleted (or about to be)
	directReleased  = "released"  // publish failed or refused: made due for the Relay
	directOverflow  = "overflow"  // the queue was full: made due for the Relay
)

// NewDirect returns a Direct; Run publishes what Offer queues.
func NewDirect(cfg DirectConfig) (*Direct, error) {
	if cfg.Store == nil || cfg.Publisher == nil {
		return nil, errors.New("outbox: direct publish needs Store and Publisher")
	}
	if cfg.BatchSize <= 0 || cfg.MaxQueuedBytes <= 0 || cfg.DeleteAfter <= 0 || cfg.PublishTimeout <= 0 {
		return nil, errors.New("outbox: direct publish needs positive BatchSize, MaxQueuedBytes, DeleteAfter and PublishTimeout")
	}
	d := &Direct{
		cfg:    cfg,
		retry:  backoff.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second},
		now:    time.Now,
		logger: cfg.Logger.With().Str("component", "outbox_direct").Logger(),
		more:   make(chan struct{}, 1),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookrelay_outbox_direct_total",
			Help: "Outbox rows of new events by what the receiver's direct publish after their commit came to: published (confirmed, row deleted), released (the publish failed or the broker refused it: the outbox publisher takes the row) or overflow (too many waiting: the outbox publisher takes the row).",
		}, []string{"outcome"}),
	}
	for _, o := range []string{directPublished, directReleased, directOverflow} {
		d.outcomes.WithLabelValues(o)
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(d.outcomes); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// Offer queues messages of committed outbox rows for a publish. It never
// blocks: past MaxQueuedBytes, or once Run has ended, the rows are left to the
// Relay (made due by Run, or swept once their hold has passed).
func (d *Direct) Offer(msgs []webhook.Message) {
	if len(msgs) == 0 {
		return
	}
	n := 0
	for _, m := range msgs {
		n += len(m.Body)
	}
	d.mu.Lock()
	switch {
	case d.stopped:
	case d.bytes+n <= d.cfg.MaxQueuedBytes || len(d.queue) == 0:
		d.queue = append(d.queue, msgs...)
		d.bytes += n
	default:
		for _, m := range msgs {
			d.overflow = append(d.overflow, m.OutboxID)
		}
	}
	d.mu.Unlock()
	select {
	case d.more <- struct{}{}:
	default:
	}
}

// take returns up to BatchSize queued messages and the overflowed rows.
func (d *Direct) take() ([]webhook.Message, []int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := min(len(d.queue), d.cfg.BatchSize)
	msgs := make([]webhook.Message, n)
	copy(msgs, d.queue)
	for _, m := range msgs {
		d.bytes -= len(m.Body)
	}
	rest := copy(d.queue, d.queue[n:])
	clear(d.queue[rest:])
	d.queue = d.queue[:rest]
	over := d.overflow
	d.overflow = nil
	return msgs, over
}

// Run publishes offered messages until ctx is done, then publishes what is
// queued, deletes what was confirmed, and returns nil. Call it once.
func (d *Direct) Run(ctx context.Context) error {
	var (
		confirmed []int64
		flush     <-chan time.Time
		timer     *time.Timer
	)
	deleteConfirmed := func() {
		if timer != nil {
			timer.Stop()
			timer, flush = nil, nil
		}
		if len(confirmed) == 0 {
			return
		}
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.PublishTimeout)
		defer cancel()
		if err := d.cfg.Store.OutboxDeletePublished(dctx, confirmed); err != nil {
			// The rows stay; a publisher sends them again once their hold
			// has passed: a duplicate message, which a dispatcher drops.
			d.logger.Warn().Err(err).Int("rows", len(confirmed)).Msg("deleting directly published outbox rows failed; they will be published again")
		}
		confirmed = confirmed[:0]
	}
	defer deleteConfirmed()
	for {
		stopping := ctx.Err() != nil
		msgs, over := d.take()
		if len(over) > 0 {
			d.release(ctx, over, directOverflow)
		}
		if len(msgs) > 0 && d.now().Before(d.pausedUntil) {
			d.release(ctx, ids(msgs), directReleased)
			continue
		}
		if len(msgs) > 0 {
			confirmed = append(confirmed, d.publish(ctx, msgs)...)
			if len(confirmed) >= d.cfg.BatchSize {
				deleteConfirmed()
			} else if len(confirmed) > 0 && timer == nil {
				timer = time.NewTimer(d.cfg.DeleteAfter)
				flush = timer.C
			}
			continue // more may have queued meanwhile
		}
		if stopping {
			d.mu.Lock()
			d.stopped = true
			d.mu.Unlock()
			// A last look: an Offer between take and stopped.
			if msgs, over := d.take(); len(msgs) > 0 || len(over) > 0 {
				d.release(ctx, append(over, ids(msgs)...), directReleased)
			}
			return nil
		}
		select {
		case <-d.more:
		case <-flush:
			timer, flush = nil, nil
			deleteConfirmed()
		case <-ctx.Done():
		}
	}
}

// publish sends msgs and returns the rows the broker confirmed; the others
// are released to the Relay.
func (d *Direct) publish(ctx context.Context, msgs []webhook.Message) []int64 {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.PublishTimeout)
	defer cancel()
	results, err := d.cfg.Publisher.Publish(pctx, msgs)
	if d.cfg.AfterPublishFunc != nil {
		d.cfg.AfterPublishFunc()
	}
	var ok, failed []int64
	for i, m := range msgs {
		if i < len(results) && results[i].Acked {
			ok = append(ok, m.OutboxID)
		} else {
			failed = append(failed, m.OutboxID)
		}
	}
	d.outcomes.WithLabelValues(directPublished).Add(float64(len(ok)))
	if err != nil && len(ok) == 0 {
		wait := d.retry.Next()
		d.pausedUntil = d.now().Add(wait)
		d.logger.Debug().Err(err).Str("retry_in", wait.String()).Msg("direct publish failed; new events go through the outbox publisher meanwhile")
	} else if err == nil {
		d.retry.Reset()
	}
	if len(failed) > 0 {
		ev := d.logger.Debug()
		if err != nil {
			ev = ev.Err(err)
		}
		ev.Int("rows", len(failed)).Msg("direct publish not confirmed; the outbox publisher takes the rows")
		d.release(ctx, failed, directReleased)
	}
	return ok
}

// release makes rows due for the Relay and wakes it.
func (d *Direct) release(ctx context.Context, rows []int64, outcome string) {
	d.outcomes.WithLabelValues(outcome).Add(float64(len(rows)))
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.PublishTimeout)
	defer cancel()
	if err := d.cfg.Store.OutboxDueNow(rctx, rows); err != nil {
		// They stay held: a publisher sweeps them once the hold passed.
		d.logger.Warn().Err(err).Int("rows", len(rows)).Msg("handing outbox rows to the publisher failed; they are published once their hold has passed")
		return
	}
	if d.cfg.Wake != nil {
		select {
		case d.cfg.Wake <- struct{}{}:
		default:
		}
	}
}

func ids(msgs []webhook.Message) []int64 {
	out := make([]int64, len(msgs))
	for i, m := range msgs {
		out[i] = m.OutboxID
	}
	return out
}
