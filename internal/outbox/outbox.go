// Package outbox moves committed events from Postgres to RabbitMQ. The relay
// claims outbox rows (FOR UPDATE SKIP LOCKED, so any number of receivers
// share the work), publishes them with publisher confirms, and deletes a row
// only after the broker confirmed its message. Anything else (a nack, a
// return, a timeout, a lost connection, a crash) leaves the row for the next
// claim: a message may be published twice, never lost.
package outbox

import (
	"context"
	"errors"
	"time"

	"github.com/hookrelay/hookrelay/internal/backoff"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Batch is a set of claimed rows, locked until Complete or Release.
type Batch interface {
	Messages() []webhook.Message
	// Complete deletes the confirmed rows and releases the others.
	Complete(ctx context.Context, confirmed []int64) error
	// Release gives every row back.
	Release(ctx context.Context) error
}

// Store claims outbox rows.
type Store interface {
	OutboxClaim(ctx context.Context, limit int) (Batch, error)
}

// Publisher sends a batch and reports, per message, whether the broker
// confirmed it. An error means the connection failed.
type Publisher interface {
	Publish(ctx context.Context, msgs []webhook.Message) (acked []bool, err error)
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
// Run returns only when ctx is done.
func (r *Relay) Run(ctx context.Context) error {
	retry := backoff.Backoff{Min: 100 * time.Millisecond, Max: 30 * time.Second}
	ticker := time.NewTicker(r.cfg.PollInterval)
	defer ticker.Stop()
	for {
		n, err := r.RunOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			wait := retry.Next()
			r.logger.Warn().Err(err).Dur("retry_in", wait).Msg("outbox batch failed")
			if !backoff.Sleep(ctx, wait) {
				return nil
			}
			continue
		}
		retry.Reset()
		if n == r.cfg.BatchSize {
			continue // probably more waiting
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.cfg.Wake:
		case <-ticker.C:
		}
	}
}

// RunOnce claims and publishes one batch and returns how many rows it
// claimed.
func (r *Relay) RunOnce(ctx context.Context) (int, error) {
	batch, err := r.cfg.Store.OutboxClaim(ctx, r.cfg.BatchSize)
	if err != nil {
		return 0, err
	}
	msgs := batch.Messages()
	if len(msgs) == 0 {
		return 0, batch.Release(ctx)
	}
	// From here the batch finishes even if shutdown begins.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.PublishTimeout)
	defer cancel()

	acked, pubErr := r.cfg.Publisher.Publish(ctx, msgs)
	confirmed := make([]int64, 0, len(msgs))
	for i, m := range msgs {
		if i < len(acked) && acked[i] {
			confirmed = append(confirmed, m.OutboxID)
		}
	}

	if r.cfg.AfterPublishFunc != nil {
		r.cfg.AfterPublishFunc()
	}
	// Its own deadline: a slow publish must not leave confirmed rows
	// undeleted (they would all be published again).
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer ccancel()
	if err := batch.Complete(cctx, confirmed); err != nil {
		// The rows stay; their messages will be published again.
		return len(msgs), err
	}
	if pubErr != nil {
		return len(msgs), pubErr
	}
	if len(confirmed) < len(msgs) {
		return len(msgs), errors.New("broker did not confirm every message; the rest stay in the outbox")
	}
	r.logger.Debug().Int("published", len(confirmed)).Msg("outbox batch published")
	return len(msgs), nil
}

// Stats reads the outbox backlog.
type Stats interface {
	OutboxStats(ctx context.Context) (backlog int64, oldest time.Duration, err error)
}

// BacklogCollector reports the backlog and the age of the oldest row at
// scrape time, straight from Postgres, so every receiver reports the same
// truth.
type BacklogCollector struct {
	stats   Stats
	backlog *prometheus.Desc
	oldest  *prometheus.Desc
}

// NewBacklogCollector returns a collector over stats.
func NewBacklogCollector(stats Stats) *BacklogCollector {
	return &BacklogCollector{
		stats:   stats,
		backlog: prometheus.NewDesc("hookrelay_outbox_backlog", "Outbox rows not yet confirmed by RabbitMQ.", nil, nil),
		oldest:  prometheus.NewDesc("hookrelay_outbox_oldest_age_seconds", "Age of the oldest outbox row (0 when empty).", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *BacklogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.backlog
	ch <- c.oldest
}

// Collect implements prometheus.Collector. A failed query fails the scrape
// for these metrics instead of reporting a misleading zero.
func (c *BacklogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	n, age, err := c.stats.OutboxStats(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.backlog, err)
		ch <- prometheus.NewInvalidMetric(c.oldest, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.backlog, prometheus.GaugeValue, float64(n))
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, age.Seconds())
}
