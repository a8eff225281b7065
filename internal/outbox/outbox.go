// Package outbox moves committed events from Postgres to RabbitMQ. The relay
// claims outbox rows (FOR UPDATE SKIP LOCKED, so any number of receivers
// share the work), publishes them with publisher confirms, and deletes a row
// only after the broker confirmed its message. Anything else (a nack, a
// return, a timeout, a lost connection, a crash) leaves the row for another
// claim: a message may be published twice, never lost.
//
// A row the broker refuses (nack, return, no confirm in time) counts a
// failed attempt and waits out a backoff before a claim takes it again, so
// rows that keep failing never hold back the rows behind them. A failure of
// the whole publish (connection lost, broker blocking) says nothing about
// the rows: they go back as they were.
package outbox

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/hookrelay/hookrelay/internal/backoff"
	"github.com/hookrelay/hookrelay/internal/tracing"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Batch is a set of claimed rows, locked until Complete or Release.
type Batch interface {
	Messages() []webhook.Message
	// Complete deletes the confirmed rows, records each failure on its row
	// (one more attempt, the reason, the next try after RetryIn), releases
	// the others, and commits all of it together.
	Complete(ctx context.Context, confirmed []int64, failed []webhook.OutboxFailure) error
	// Release gives every row back.
	Release(ctx context.Context) error
}

// Store claims outbox rows that are due.
type Store interface {
	OutboxClaim(ctx context.Context, limit int) (Batch, error)
}

// Result is the broker's answer about one published message.
type Result struct {
	// Acked: the broker took responsibility for the message.
	Acked bool
	// Failure, when not Acked, names why the broker refused this message
	// ("nack", "returned", "unconfirmed"); the row counts a failed attempt.
	// Empty means there is no answer about this message (the publish
	// failed as a whole first): the row goes back uncounted.
	Failure string
}

// Publisher sends a batch and reports each message's Result, in order. A
// non-nil error means the publish failed as a whole (connection lost,
// broker blocking, confirm timeout); the results still hold every answer
// known.
type Publisher interface {
	Publish(ctx context.Context, msgs []webhook.Message) ([]Result, error)
}

// Backoff of a refused row. The first retries come soon, because a
// refusal is often brief: a route queue a starting dispatcher is about to
// declare, a quorum queue electing a new leader, a confirm that just missed
// the timeout. A row that stays refused (a queue deleted for good, a replay
// to a route no dispatcher declares any more) costs one publish and confirm
// per try: at most one try per row every five minutes keeps 10,000 such
// rows to about 33 publishes a second, and a fixed cause is picked up within
// five minutes.
const (
	rowRetryMin = time.Second
	rowRetryMax = 5 * time.Minute
)

// retryDelay is how long a row waits after its n-th refusal (n >= 1):
// rowRetryMin doubled per refusal, capped at rowRetryMax, and drawn from
// the upper half of that step ("equal jitter"), so rows refused together
// spread out instead of coming back as one batch, and none comes back
// sooner than half its step.
func retryDelay(n int) time.Duration {
	step := rowRetryMin << min(max(n-1, 0), 20)
	if step > rowRetryMax || step <= 0 {
		step = rowRetryMax
	}
	return step/2 + rand.N(step/2+1)
}

// Metrics counts refused rows.
type Metrics struct {
	failures *prometheus.CounterVec
}

// NewMetrics registers hookrelay_outbox_failures_total on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{failures: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hookrelay_outbox_failures_total",
		Help: "Outbox rows the broker refused, by reason: nack, returned (unroutable) or unconfirmed (no confirm within the timeout). Each waits out a backoff.",
	}, []string{"reason"})}
	reg.MustRegister(m.failures)
	for _, r := range []string{"nack", "returned", "unconfirmed"} {
		m.failures.WithLabelValues(r)
	}
	return m
}

// Config configures a Relay.
type Config struct {
	Store     Store
	Publisher Publisher
	// Wake signals that rows were committed (LISTEN/NOTIFY). May be nil.
	Wake <-chan struct{}
	// BatchSize is the most rows one claim takes.
	BatchSize int
	// PollInterval is the fallback when no wake-up arrives.
	PollInterval time.Duration
	// PublishTimeout bounds publishing and deleting one claimed batch; it is
	// not cut short by shutdown, so a claimed batch finishes.
	PublishTimeout time.Duration
	Logger         zerolog.Logger
	// Metrics counts refused rows; nil counts nothing.
	Metrics *Metrics
	// AfterPublishFunc, when set, runs after a batch's confirms and before
	// its rows are deleted. Tests use it to kill the process there.
	AfterPublishFunc func()
}

// Relay drains the outbox.
type Relay struct {
	cfg    Config
	logger zerolog.Logger
}

// New returns a Relay.
func New(cfg Config) (*Relay, error) {
	if cfg.Store == nil || cfg.Publisher == nil {
		return nil, errors.New("outbox: Store and Publisher are required")
	}
	if cfg.BatchSize <= 0 || cfg.PollInterval <= 0 || cfg.PublishTimeout <= 0 {
		return nil, errors.New("outbox: BatchSize, PollInterval and PublishTimeout must be positive")
	}
	return &Relay{cfg: cfg, logger: cfg.Logger.With().Str("component", "outbox").Logger()}, nil
}

// Run drains the outbox until ctx is done, then returns nil. A batch already
// claimed when ctx is cancelled is still published and completed (bounded by
// PublishTimeout). Failures are retried with exponential backoff and jitter;
// Run returns only when ctx is done, after the batch it was completing.
//
// Batches are pipelined: while one batch's confirmed rows are deleted (its
// transaction commits), the next batch is claimed and published. The rows
// of the completing batch stay locked until its commit, so the next claim
// (SKIP LOCKED) never takes them; at most one batch completes at a time,
// in claim order. A row is still deleted only after its confirm.
func (r *Relay) Run(ctx context.Context) error {
	// A failed batch (Postgres or RabbitMQ unreachable, the broker
	// blocking) is tried again with backoff capped at 5s, so publishing
	// resumes within seconds of an outage's end. (Waking on every commit
	// instead would turn a broker outage under load into a dial per event.)
	retry := backoff.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	ticker := time.NewTicker(r.cfg.PollInterval)
	defer ticker.Stop()
	var completing <-chan error // the previous batch's completion, or nil
	finish := func() error {
		if completing == nil {
			return nil
		}
		err := <-completing
		completing = nil
		return err
	}
	defer func() { _ = finish() }() // logged below when it matters; on return only waited for
	for {
		p, err := r.claimPublish(ctx)
		// The previous batch completes before this one starts completing:
		// completions stay one at a time and in order.
		// Both failures are reported: a completion that failed left its
		// confirmed rows undeleted (they will be published again).
		err = errors.Join(err, finish())
		if p != nil {
			done := make(chan error, 1)
			go func() { done <- p.complete() }()
			completing = done
		}
		if ctx.Err() != nil {
			if cerr := finish(); cerr != nil {
				r.logger.Warn().Err(cerr).Msg("outbox batch failed at shutdown; its rows stay for the next publisher")
			}
			return nil
		}
		if err != nil {
			wait := retry.Next()
			r.logger.Warn().Err(err).Str("retry_in", wait.String()).Msg("outbox batch failed")
			if !backoff.Sleep(ctx, wait) {
				if cerr := finish(); cerr != nil {
					r.logger.Warn().Err(cerr).Msg("outbox batch failed at shutdown; its rows stay for the next publisher")
				}
				return nil
			}
			continue
		}
		retry.Reset()
		if p != nil && p.n == r.cfg.BatchSize {
			continue // probably more waiting
		}
		// Idle: let the last batch finish first, so its failure is not
		// left unreported until the next wake-up.
		if cerr := finish(); cerr != nil {
			wait := retry.Next()
			r.logger.Warn().Err(cerr).Str("retry_in", wait.String()).Msg("outbox batch failed")
			if !backoff.Sleep(ctx, wait) {
				return nil
			}
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.cfg.Wake:
		case <-ticker.C:
		}
	}
}

// RunOnce claims, publishes and completes one batch and returns how many
// rows it claimed.
func (r *Relay) RunOnce(ctx context.Context) (int, error) {
	p, err := r.claimPublish(ctx)
	if p == nil {
		return 0, err
	}
	if cerr := p.complete(); cerr != nil {
		return p.n, cerr
	}
	return p.n, err
}

// published is a batch whose publish is over, waiting to be completed.
type published struct {
	r         *Relay
	batch     Batch
	msgs      []webhook.Message
	n         int
	confirmed []int64
	failed    []webhook.OutboxFailure
	// pubErr and unanswered are reported once the batch completed.
	pubErr     error
	unanswered int
}

// claimPublish claims a batch and publishes it. It returns nil and the
// error when there was nothing to publish or the claim failed; otherwise
// the batch to complete, and the error of its publish (the batch must be
// completed all the same: confirmed rows are deleted, refused ones
// counted).
func (r *Relay) claimPublish(ctx context.Context) (*published, error) {
	batch, err := r.cfg.Store.OutboxClaim(ctx, r.cfg.BatchSize)
	if err != nil {
		return nil, err
	}
	msgs := batch.Messages()
	if len(msgs) == 0 {
		return nil, batch.Release(ctx)
	}
	// From here the batch finishes even if shutdown begins.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.PublishTimeout)
	defer cancel()

	results, pubErr := r.cfg.Publisher.Publish(ctx, msgs)
	p := &published{r: r, batch: batch, msgs: msgs, n: len(msgs), confirmed: make([]int64, 0, len(msgs)), pubErr: pubErr}
	for i, m := range msgs {
		var res Result
		if i < len(results) {
			res = results[i]
		}
		switch {
		case res.Acked:
			p.confirmed = append(p.confirmed, m.OutboxID)
		case res.Failure != "":
			p.failed = append(p.failed, webhook.OutboxFailure{OutboxID: m.OutboxID, Reason: res.Failure, RetryIn: retryDelay(m.OutboxAttempts + 1)})
		}
	}
	p.unanswered = len(msgs) - len(p.confirmed) - len(p.failed)

	if r.cfg.AfterPublishFunc != nil {
		r.cfg.AfterPublishFunc()
	}
	if pubErr != nil {
		return p, pubErr
	}
	if p.unanswered > 0 {
		return p, fmt.Errorf("publisher reported no outcome for %d of %d messages; they stay in the outbox", p.unanswered, len(msgs))
	}
	return p, nil
}

// complete deletes the confirmed rows in one statement, records the
// refused ones and releases the rest, in the batch's transaction.
func (p *published) complete() error {
	r := p.r
	// Its own deadline: a slow publish must not leave confirmed rows
	// undeleted (they would all be published again).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.batch.Complete(ctx, p.confirmed, p.failed); err != nil {
		// The rows stay as they were; their messages will be published
		// again.
		return err
	}
	r.recordFailures(p.msgs, p.failed)
	if p.pubErr == nil && p.unanswered == 0 {
		r.logger.Debug().Int("published", len(p.confirmed)).Int("refused", len(p.failed)).Msg("outbox batch published")
	}
	return nil
}

// recordFailures counts and logs the refused rows once their backoff is
// stored. A row is logged on its first refusal and then whenever its
// attempts reach a power of two, so a row that keeps failing stays visible
// without a line per retry.
func (r *Relay) recordFailures(msgs []webhook.Message, failed []webhook.OutboxFailure) {
	if len(failed) == 0 {
		return
	}
	byID := make(map[int64]*webhook.Message, len(msgs))
	for i := range msgs {
		byID[msgs[i].OutboxID] = &msgs[i]
	}
	for _, f := range failed {
		if r.cfg.Metrics != nil {
			r.cfg.Metrics.failures.WithLabelValues(f.Reason).Inc()
		}
		m := byID[f.OutboxID]
		attempts := m.OutboxAttempts + 1
		if attempts&(attempts-1) != 0 {
			continue
		}
		ev := r.logger.Warn().Int64("outbox_id", f.OutboxID).Stringer("event_id", m.EventID).
			Str("reason", f.Reason).Int("attempts", attempts).Dur("retry_in", f.RetryIn)
		if m.Route != "" {
			ev = ev.Str("route", m.Route)
		} else {
			ev = ev.Str("routing_key", m.RoutingKey)
		}
		tp := m.TraceParent
		if tp == "" && m.Route == "" {
			tp = m.EventTraceParent // the first copy continues its event's trace
		}
		if id := tracing.TraceID(tp); id != "" {
			ev = ev.Str("trace_id", id)
		}
		ev.Msg("broker refused outbox row; retrying with backoff")
	}
}

// Stats reads the outbox backlog.
type Stats interface {
	OutboxStats(ctx context.Context) (backlog int64, oldest time.Duration, err error)
	OutboxBackoffCount(ctx context.Context) (int64, error)
}

// BacklogCollector reports the backlog, the rows waiting out a backoff and
// the age of the oldest row at scrape time, straight from Postgres, so
// every receiver reports the same truth.
type BacklogCollector struct {
	stats   Stats
	backlog *prometheus.Desc
	backoff *prometheus.Desc
	oldest  *prometheus.Desc
}

// NewBacklogCollector returns a collector over stats.
func NewBacklogCollector(stats Stats) *BacklogCollector {
	return &BacklogCollector{
		stats:   stats,
		backlog: prometheus.NewDesc("hookrelay_outbox_backlog", "Outbox rows not yet confirmed by RabbitMQ.", nil, nil),
		backoff: prometheus.NewDesc("hookrelay_outbox_backoff", "Outbox rows the broker refused, waiting out a backoff before their next try.", nil, nil),
		oldest:  prometheus.NewDesc("hookrelay_outbox_oldest_age_seconds", "Age of the oldest outbox row (0 when empty).", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *BacklogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.backlog
	ch <- c.backoff
	ch <- c.oldest
}

// Collect implements prometheus.Collector. A failed query fails the scrape
// for these metrics instead of reporting a misleading zero.
func (c *BacklogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	n, age, err := c.stats.OutboxStats(ctx)
	var inBackoff int64
	if err == nil {
		inBackoff, err = c.stats.OutboxBackoffCount(ctx)
	}
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.backlog, err)
		ch <- prometheus.NewInvalidMetric(c.backoff, err)
		ch <- prometheus.NewInvalidMetric(c.oldest, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.backlog, prometheus.GaugeValue, float64(n))
	ch <- prometheus.MustNewConstMetric(c.backoff, prometheus.GaugeValue, float64(inBackoff))
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, age.Seconds())
}
