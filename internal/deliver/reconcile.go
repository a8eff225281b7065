package deliver

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
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

// ReconcileStore finds pairs of a route overdue by more than a margin and
// sends each again through the outbox, in one transaction (see
// store.DeliveryReconcile). commit is asked before that transaction
// commits, with the pairs found: its error rolls the re-sends back.
type ReconcileStore interface {
	DeliveryReconcile(ctx context.Context, route string, margin time.Duration, limit int, commit func() error) ([]Reconciled, error)
}

// QueueReading is what the broker says of a route's queue now.
type QueueReading struct {
	// Ready counts the messages not delivered to a consumer yet.
	Ready int
	// Consumers counts the queue's consumers.
	Consumers int
}

// QueueReadyFunc reads a route's queue, as the broker counts it now.
type QueueReadyFunc func(ctx context.Context, route string) (QueueReading, error)

// TiersFunc returns, for each retry tier, how many of its messages expired
// and wait to be dead-lettered to their route queues. Its counts may be
// some seconds old (RabbitMQ's statistics); Margin covers that.
type TiersFunc func(ctx context.Context) (map[string]int, error)

// Reasons a pair is sent again, as hookrelay_reconciled_total counts them.
const (
	// ReconciledLost: overdue by the margin, with its route queue drained
	// and no retry tier holding a message to dead-letter: no copy of the
	// pair is left anywhere in the broker.
	ReconciledLost = "lost"
	// ReconciledStranded: overdue by strand_after while a retry tier
	// keeps holding messages it does not dead-letter (RabbitMQ can strand
	// them after a leader change until its dead-letter worker gives up
	// waiting for a confirm): its copy is probably one of them.
	ReconciledStranded = "stranded"
)

// ReconcilerConfig configures a Reconciler.
type ReconcilerConfig struct {
	// Routes are reconciled, or those RoutesFunc returns at each round
	// when it is set.
	Routes     []string
	RoutesFunc func() []string
	Store      ReconcileStore
	QueueReady QueueReadyFunc
	Tiers      TiersFunc
	// Interval is the pause between rounds over every route.
	Interval time.Duration
	// Margin is how far past its due time a pair must be before it counts
	// as lost, when nothing in the broker can hold its copy. It covers a
	// dispatcher slow to take a message and the age of the broker's
	// statistics.
	Margin time.Duration
	// StrandAfter is how far past its due time a pair must be to be sent
	// again while a retry tier still holds messages waiting to be
	// dead-lettered: longer than such a backlog lasts when the broker is
	// merely slow. Default 5m.
	StrandAfter time.Duration
	// Batch is the most pairs one round re-sends per route; default 500.
	// One batch a round, and none while the route's queue holds ready
	// messages: the re-sent copies are taken before more are sent.
	Batch int
	// ClearTierFunc, when set, drops the messages a retry tier holds
	// waiting to be dead-lettered (see Reconciler: a tier stranding them).
	ClearTierFunc func(ctx context.Context, tier string) error
	// PingFunc, when set, asks Postgres whether it answers, at the start of
	// each round; a round whose ping fails counts as a failure to reach
	// Postgres (see LastStoreFailureFunc). A Postgres outage is every
	// dispatcher's: a delivery of another dispatcher may hold its message
	// waiting for it, and this process learns of the outage only by asking.
	PingFunc func(ctx context.Context) error
	// LastStoreFailureFunc says when this process's deliveries last failed
	// to reach Postgres (now while one holds its message retrying); nil:
	// never. A delivery waiting for Postgres holds its copy unacked and
	// unclaimed, out of the queue's ready count, so nothing is re-sent
	// until a margin after it (Handler.LastStoreFailure).
	LastStoreFailureFunc func() time.Time
	Registerer           prometheus.Registerer
	Logger               zerolog.Logger
	// NowFunc is the clock of the tiers' runs; time.Now when nil.
	NowFunc func() time.Time
}

// Reconciler repairs what the broker loses, and only that. Postgres knows
// every undelivered pair and when its copy is due at a dispatcher; a pair
// long past that, not in flight and with nothing in the outbox, has a copy
// that is late or lost. Late is the common case (a backlog after an
// outage, a retry tier dead-lettering slowly), and sending a late pair
// again only adds to the backlog it waits in. So a pair is sent again only
// when nothing can be holding its copy:
//
//   - its route queue holds no ready message (read live): a copy that
//     arrived there was taken by a dispatcher, which would have claimed
//     the pair. The reading must show a consumer too: RabbitMQ answers 0
//     ready and 0 consumers for a quorum queue whose leader does not
//     answer its query within 250 ms (rabbit_quorum_queue:stat), as a
//     busy broker's may not while it moves a backlog; and a queue nobody
//     consumes gains nothing from a copy sent again;
//   - no retry tier holds a message waiting to be dead-lettered back to
//     its route queue (messages_dlx): a retry copy that expired left its
//     tier;
//   - Postgres has answered this process for a margin (the reconciler
//     asks it every round): a delivery waiting for Postgres, in any
//     dispatcher, holds its copy unacked and unclaimed, out of the
//     queue's ready count; a pair whose lease expired less than a margin
//     ago may be held by its holder still;
//   - the route's deliveries are not held (paused, circuit not closed,
//     rate limit or Retry-After: see store.DeliveryReconcile).
//
// Then the copy is gone (a queue purged or deleted by hand, a broker that
// lost it) and the pair is re-sent as a new generation (reason lost). A
// tier that keeps such messages for long is stranding them (RabbitMQ
// 3.10–4.x can, after a leader change, until its dead-letter worker's
// confirm timeout): once a tier has held such messages at every reading
// for StrandAfter, a pair overdue by StrandAfter is re-sent, even though
// the tier still holds messages (reason stranded); while tiers hold them
// for less, nothing is re-sent. With the tiers unreadable, pairs overdue
// by StrandAfter are re-sent. A stale copy that
// turns up later is dropped by the dispatcher. Safe with several
// dispatchers running.
type Reconciler struct {
	cfg        ReconcilerConfig
	logger     zerolog.Logger
	reconciled *prometheus.CounterVec
	tierGauge  *prometheus.GaugeVec
	cleared    *prometheus.CounterVec
	// stuck follows, per tier, since when its every reading counted
	// messages waiting to be dead-lettered, and the fewest it counted.
	stuck map[string]*tierRun
	// storeFailedAt is when the reconciler's own statement or ping last
	// failed (unix nanoseconds): Postgres was out, and deliveries may hold
	// copies waiting for it. answeredAt is when a ping first succeeded
	// after such a failure: the margin runs from there, not from the last
	// failure, which may be a ping timeout and an interval before Postgres
	// answers again (and deliveries, after their backoff, claim again).
	// failing says the last ping or statement failed. Times by NowFunc.
	storeFailedAt atomic.Int64
	answeredAt    atomic.Int64
	failing       atomic.Bool
}

// NewReconciler returns a Reconciler and registers
// hookrelay_reconciled_total and hookrelay_retry_tier_dead_lettering on
// cfg.Registerer.
func NewReconciler(cfg ReconcilerConfig) (*Reconciler, error) {
	if cfg.Store == nil || cfg.QueueReady == nil || cfg.Tiers == nil || cfg.Interval <= 0 || cfg.Margin <= 0 || cfg.Registerer == nil {
		return nil, errors.New("deliver: reconciler needs Store, QueueReady, Tiers, Registerer, and positive Interval and Margin")
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 500
	}
	if cfg.StrandAfter <= 0 {
		cfg.StrandAfter = 5 * time.Minute
	}
	if cfg.StrandAfter < cfg.Margin {
		cfg.StrandAfter = cfg.Margin
	}
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	return &Reconciler{
		cfg:        cfg,
		logger:     cfg.Logger.With().Str("component", "reconciler").Logger(),
		reconciled: NewReconciledCounter(cfg.Registerer, cfg.Routes),
		tierGauge:  NewTierGauge(cfg.Registerer),
		cleared:    NewTierClearedCounter(cfg.Registerer),
		stuck:      map[string]*tierRun{},
	}, nil
}

// tierRun is a run of readings of one tier that all counted messages
// waiting to be dead-lettered.
type tierRun struct {
	since  time.Time
	fewest int
}

// NewTierClearedCounter registers hookrelay_retry_tier_cleared_total on reg.
func NewTierClearedCounter(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hookrelay_retry_tier_cleared_total",
		Help: "Times the reconciler cleared a retry tier that kept messages waiting to be dead-lettered for longer than reconcile.strand_after (stranded by the broker); their pairs are re-sent from Postgres.",
	}, []string{"tier"})
	reg.MustRegister(c)
	return c
}

// NewTierGauge registers hookrelay_retry_tier_dead_lettering on reg.
func NewTierGauge(reg prometheus.Registerer) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "hookrelay_retry_tier_dead_lettering",
		Help: "Messages of a retry tier that expired and wait to be dead-lettered back to their route queue (RabbitMQ's messages_dlx, as the reconciler last read it).",
	}, []string{"tier"})
	reg.MustRegister(g)
	return g
}

// NewReconciledCounter registers hookrelay_reconciled_total on reg, with a
// series for each route and reason from the start.
func NewReconciledCounter(reg prometheus.Registerer, routes []string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hookrelay_reconciled_total",
		Help: "Pairs sent again because no copy of theirs was left in the broker: reason lost (route queue drained, no retry tier dead-lettering) or stranded (overdue by reconcile.strand_after while a retry tier holds messages it does not dead-letter).",
	}, []string{"route", "reason"})
	reg.MustRegister(c)
	for _, route := range routes {
		for _, reason := range []string{ReconciledLost, ReconciledStranded} {
			c.WithLabelValues(route, reason)
		}
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
		if !r.ping(ctx) {
			clear(r.stuck) // a stranded run is one of readings that follow each other
			continue
		}
		tiers, err := r.readTiers(ctx)
		if err != nil && ctx.Err() == nil {
			r.logger.Warn().Err(err).Msg("reading the retry tiers; until they can be read, only pairs overdue by reconcile.strand_after are re-sent")
		}
		routes := r.cfg.Routes
		if r.cfg.RoutesFunc != nil {
			routes = r.cfg.RoutesFunc()
		}
		for _, route := range routes {
			if _, err := r.reconcileRoute(ctx, route, tiers); err != nil && ctx.Err() == nil {
				r.logger.Warn().Err(err).Str("route", route).Msg("reconcile round failed; trying again next interval")
			}
		}
		if tiers.known {
			r.clearStranded(ctx)
		}
	}
}

// tierState is what a round knows of the retry tiers.
type tierState struct {
	// known is false when they could not be read.
	known bool
	// deadLettering counts, per tier holding any, the messages waiting
	// to be dead-lettered.
	deadLettering map[string]int
	// longest is how long the tier counted at every reading for the
	// longest has held such messages.
	longest time.Duration
}

// quiet says no tier holds a message waiting to be dead-lettered.
func (t tierState) quiet() bool { return t.known && len(t.deadLettering) == 0 }

func (t tierState) String() string {
	if !t.known {
		return "the retry tiers could not be read"
	}
	var parts []string
	for name, n := range t.deadLettering {
		parts = append(parts, fmt.Sprintf("%s holds %d", name, n))
	}
	sort.Strings(parts)
	return "messages waiting to be dead-lettered: " + strings.Join(parts, ", ")
}

func (r *Reconciler) readTiers(ctx context.Context) (tierState, error) {
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	counts, err := r.cfg.Tiers(qctx)
	if err != nil {
		// A tier is stranding only when every reading over StrandAfter
		// counted messages: a run with a reading missing starts again.
		clear(r.stuck)
		return tierState{}, err
	}
	st := tierState{known: true, deadLettering: map[string]int{}}
	now := r.cfg.NowFunc()
	for name := range r.stuck {
		if _, ok := counts[name]; !ok {
			delete(r.stuck, name) // gone
		}
	}
	for name, n := range counts {
		r.tierGauge.WithLabelValues(name).Set(float64(n))
		if n == 0 {
			delete(r.stuck, name)
			continue
		}
		st.deadLettering[name] = n
		run := r.stuck[name]
		if run == nil {
			run = &tierRun{since: now, fewest: n}
			r.stuck[name] = run
		}
		run.fewest = min(run.fewest, n)
		st.longest = max(st.longest, now.Sub(run.since))
	}
	return st, nil
}

// clearStranded clears each tier that has held messages waiting to be
// dead-lettered at every reading for StrandAfter: RabbitMQ's dead-letter
// worker is waiting for a confirm it will not get (a leader change) and
// publishes them again only after its own timeout. Their pairs are
// overdue by StrandAfter by then and re-sent (reason stranded), so the
// stranded copies are stale: clearing drops them, and a pair whose copy
// was merely late becomes one the next rounds re-send as lost. The broker
// does not hand such messages to a client (they are neither ready nor
// unacked), so they cannot be taken and routed by hand.
func (r *Reconciler) clearStranded(ctx context.Context) {
	if r.cfg.ClearTierFunc == nil {
		return
	}
	for tier, run := range r.stuck {
		held := r.cfg.NowFunc().Sub(run.since)
		if held < r.cfg.StrandAfter {
			continue
		}
		log := r.logger.With().Str("tier", tier).Int("messages", run.fewest).Dur("held_for", held.Round(time.Second)).Logger()
		log.Warn().Msg("retry tier has kept messages waiting to be dead-lettered for longer than reconcile.strand_after: clearing them; their pairs are re-sent from Postgres")
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := r.cfg.ClearTierFunc(cctx, tier)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				log.Error().Err(err).Msg("clearing a stranded retry tier failed; trying again next round")
			}
			continue
		}
		r.cleared.WithLabelValues(tier).Inc()
		delete(r.stuck, tier)
		log.Info().Msg("stranded retry tier cleared")
	}
}

// pingTimeout bounds a round's ping of Postgres, and the time its re-send
// statement may take and still commit.
const pingTimeout = 2 * time.Second

// errReconcileLate rolls a round's re-sends back: see reconcileRoute.
var errReconcileLate = errors.New("reconcile: rolled back")

// ping asks Postgres whether it answers (PingFunc) and reports whether it
// did; a failure is remembered as a failure to reach Postgres.
func (r *Reconciler) ping(ctx context.Context) bool {
	if r.cfg.PingFunc == nil {
		return true
	}
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	err := r.cfg.PingFunc(pctx)
	cancel()
	if err == nil && r.failing.Swap(false) {
		r.answeredAt.Store(r.cfg.NowFunc().UnixNano())
	}
	if err != nil {
		r.failed()
		if ctx.Err() == nil {
			r.logger.Debug().Err(err).Msg("postgres does not answer; no round until a margin after it does")
		}
		return false
	}
	return true
}

// failed notes that Postgres did not answer the reconciler.
func (r *Reconciler) failed() {
	r.storeFailedAt.Store(r.cfg.NowFunc().UnixNano())
	r.failing.Store(true)
}

// postgresFailedWithin says whether this process failed to reach Postgres
// (a delivery, or the reconciler itself) less than d ago, or answers it
// again since less than d, or a delivery holds its message retrying now.
func (r *Reconciler) postgresFailedWithin(d time.Duration) bool {
	var last time.Time
	for _, at := range []int64{r.storeFailedAt.Load(), r.answeredAt.Load()} {
		if t := time.Unix(0, at); at != 0 && t.After(last) {
			last = t
		}
	}
	if r.cfg.LastStoreFailureFunc != nil {
		if t := r.cfg.LastStoreFailureFunc(); t.After(last) {
			last = t
		}
	}
	return !last.IsZero() && r.cfg.NowFunc().Sub(last) < d
}

// ReconcileRoute runs one round for route, reading the retry tiers first,
// and returns how many pairs it sent again.
func (r *Reconciler) ReconcileRoute(ctx context.Context, route string) (int, error) {
	if !r.ping(ctx) {
		return 0, nil
	}
	tiers, err := r.readTiers(ctx)
	if err != nil {
		r.logger.Warn().Err(err).Msg("reading the retry tiers; only pairs overdue by reconcile.strand_after are re-sent")
	}
	return r.reconcileRoute(ctx, route, tiers)
}

// reconcileRoute re-sends at most one batch of route's pairs that no copy
// in the broker can be waiting for.
func (r *Reconciler) reconcileRoute(ctx context.Context, route string, tiers tierState) (int, error) {
	// Each step has its own deadline: a stuck broker or database must not
	// hold the round (and shutdown) for long.
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	q, err := r.cfg.QueueReady(qctx, route)
	cancel()
	if err != nil {
		return 0, fmt.Errorf("reading the queue of %s: %w", route, err)
	}
	if q.Ready > 0 {
		return 0, nil // a backlog: overdue pairs may be waiting in it
	}
	if q.Consumers == 0 {
		// Not an answer (the leader was too busy to count) or nobody
		// consumes the queue: either way, nothing to learn this round.
		r.logger.Debug().Str("route", route).Msg("route queue read 0 ready and 0 consumers (a quorum queue's leader too busy to answer reads so); no pair re-sent this round")
		return 0, nil
	}
	if r.postgresFailedWithin(r.cfg.Margin) {
		return 0, nil // deliveries may hold copies waiting for Postgres
	}
	reason, overdue := ReconciledLost, r.cfg.Margin
	switch {
	case tiers.quiet():
	case tiers.known && tiers.longest < r.cfg.StrandAfter:
		// A tier is dead-lettering, not for long: on a busy broker its
		// expired copies come back late, not never. Re-sending their
		// pairs now would only add copies the dispatchers drop.
		return 0, nil
	default:
		// The tiers cannot be read, or one has held messages at every
		// reading for StrandAfter: it may be stranding them.
		reason, overdue = ReconciledStranded, r.cfg.StrandAfter
	}
	// What was just checked holds for the statement only if Postgres runs
	// it now. One that stalls on its socket (Postgres unreachable with the
	// connection open) runs when the outage ends, when deliveries of every
	// dispatcher hold copies they could not claim: overdue, not in the
	// queue, not leased. So the re-sends commit only if the statement
	// came back within what a ping may take, and this process's deliveries
	// still did not fail to reach Postgres for a margin; a slow statement
	// counts as a failure to reach it (the margin starts again).
	asked := r.cfg.NowFunc()
	commit := func() error {
		if took := r.cfg.NowFunc().Sub(asked); took > pingTimeout {
			r.failed()
			return fmt.Errorf("%w: the statement took %s", errReconcileLate, took.Round(time.Millisecond))
		}
		if r.postgresFailedWithin(r.cfg.Margin) {
			return fmt.Errorf("%w: a delivery failed to reach Postgres meanwhile", errReconcileLate)
		}
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	done, err := r.cfg.Store.DeliveryReconcile(sctx, route, overdue, r.cfg.Batch, commit)
	cancel()
	if errors.Is(err, errReconcileLate) {
		r.logger.Info().Str("route", route).Err(err).Msg("overdue pairs not re-sent: Postgres was slow or out meanwhile, and copies may be held waiting for it; asking again a margin after it answers")
		return 0, nil
	}
	if err != nil {
		r.failed()
		return 0, err
	}
	if len(done) == 0 {
		return 0, nil
	}
	r.reconciled.WithLabelValues(route, reason).Add(float64(len(done)))
	least, most := done[0].Overdue, done[0].Overdue
	for _, d := range done {
		least, most = min(least, d.Overdue), max(most, d.Overdue)
	}
	ev := r.logger.Warn().Str("route", route).Str("reason", reason).Int("pairs", len(done)).
		Stringer("first_event_id", done[0].EventID).
		Str("overdue_from", least.Round(time.Millisecond).String()).Str("overdue_to", most.Round(time.Millisecond).String())
	if reason == ReconciledLost {
		ev.Msg("re-sent pairs with no copy left in the broker: overdue, their route queue drained, no retry tier dead-lettering; a copy that turns up after all is dropped as stale")
	} else {
		ev.Str("tiers", tiers.String()).Dur("strand_after", r.cfg.StrandAfter).
			Msg("re-sent pairs overdue by more than reconcile.strand_after while a retry tier keeps messages it does not dead-letter; their stranded copies are dropped as stale if they turn up")
	}
	return len(done), nil
}
