package deliver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Reconciled is one pair sent again because its copy was lost.
type Reconciled struct {
	EventID uuid.UUID
	Route   string
	Gen     int64
	Overdue time.Duration
}

// ReconcileStore finds overdue pairs of a route and sends each again
// through the outbox, in one transaction (see store.DeliveryReconcile).
type ReconcileStore interface {
	DeliveryReconcile(ctx context.Context, route string, margin time.Duration, limit int) ([]Reconciled, error)
}

// QueueReadyFunc returns the number of ready messages in a route's queue.
type QueueReadyFunc func(ctx context.Context, route string) (int, error)

// ReconcilerConfig configures a Reconciler.
type ReconcilerConfig struct {
	Routes     []string
	Store      ReconcileStore
	QueueReady QueueReadyFunc
	// Interval is the pause between rounds over every route.
	Interval time.Duration
	// Margin is how far past its due time a pair must be before it counts
	// as lost. It covers a dispatcher that is slow to take a message and a
	// retry tier that expires a little late, and stays far below any
	// destination's patience.
	Margin time.Duration
	// Batch is the most pairs one transaction re-sends; default 500.
	Batch int
	// ActiveFunc reports whether a route's dispatchers take messages now;
	// a paused route's pairs wait in its queue by design. Nil: always.
	ActiveFunc func(route string) bool
	Registerer prometheus.Registerer
	Logger     zerolog.Logger
}

// Reconciler repairs what the broker strands. RabbitMQ's at-least-once
// dead-lettering can leave a message in a retry tier after a leader change
// (rabbitmq-server issues 12625 and 16652), and a queue purged or deleted
// by hand loses its messages: Postgres still has the pair pending or
// retrying with a due time long past. For each route whose queue has no
// ready messages (so nothing is merely waiting in a backlog), it sends such
// pairs again as a new generation; the dispatcher drops the stranded copy
// if it ever turns up. Safe with several dispatchers running.
type Reconciler struct {
	cfg        ReconcilerConfig
	logger     zerolog.Logger
	reconciled *prometheus.CounterVec
}

// NewReconciler returns a Reconciler and registers
// hookrelay_reconciled_total on cfg.Registerer.
func NewReconciler(cfg ReconcilerConfig) (*Reconciler, error) {
	if cfg.Store == nil || cfg.QueueReady == nil || cfg.Interval <= 0 || cfg.Margin <= 0 || cfg.Registerer == nil {
		return nil, errors.New("deliver: reconciler needs Store, QueueReady, Registerer, and positive Interval and Margin")
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 500
	}
	return &Reconciler{
		cfg:        cfg,
		logger:     cfg.Logger.With().Str("component", "reconciler").Logger(),
		reconciled: NewReconciledCounter(cfg.Registerer, cfg.Routes),
	}, nil
}

// NewReconciledCounter registers hookrelay_reconciled_total on reg, with a
// series for each route from the start.
func NewReconciledCounter(reg prometheus.Registerer, routes []string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hookrelay_reconciled_total",
		Help: "Pairs sent again because their message was lost by the broker (overdue, not in flight, not in the outbox).",
	}, []string{"route"})
	reg.MustRegister(c)
	for _, route := range routes {
		c.WithLabelValues(route)
	}
	return c
}

// Run reconciles every Interval until ctx is done, then returns nil. A
// failed round is logged and tried again next time.
func (r *Reconciler) Run(ctx context.Context) error {
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		for _, route := range r.cfg.Routes {
			if _, err := r.ReconcileRoute(ctx, route); err != nil && ctx.Err() == nil {
				r.logger.Warn().Err(err).Str("route", route).Msg("reconcile round failed; trying again next interval")
			}
		}
	}
}

// ReconcileRoute runs one round for route and returns how many pairs it
// sent again.
func (r *Reconciler) ReconcileRoute(ctx context.Context, route string) (int, error) {
	if r.cfg.ActiveFunc != nil && !r.cfg.ActiveFunc(route) {
		return 0, nil
	}
	total := 0
	for {
		// Each step has its own deadline: a stuck broker or database must
		// not hold the round (and shutdown) for long.
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		ready, err := r.cfg.QueueReady(qctx, route)
		cancel()
		if err != nil {
			return total, fmt.Errorf("reading the queue of %s: %w", route, err)
		}
		if ready > 0 {
			return total, nil // a backlog: overdue pairs may be waiting in it
		}
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		done, err := r.cfg.Store.DeliveryReconcile(sctx, route, r.cfg.Margin, r.cfg.Batch)
		cancel()
		if err != nil {
			return total, err
		}
		if len(done) == 0 {
			return total, nil
		}
		total += len(done)
		r.reconciled.WithLabelValues(route).Add(float64(len(done)))
		var oldest time.Duration
		for _, d := range done {
			oldest = max(oldest, d.Overdue)
		}
		r.logger.Warn().Str("route", route).Int("pairs", len(done)).Stringer("first_event_id", done[0].EventID).
			Str("most_overdue", oldest.Round(time.Millisecond).String()).
			Msg("re-sent pairs whose messages the broker lost; stale copies will be dropped if they turn up")
		if len(done) < r.cfg.Batch {
			return total, nil
		}
	}
}
