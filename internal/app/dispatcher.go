package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/control"
	"github.com/hookrelay/hookrelay/internal/deliver"
	"github.com/hookrelay/hookrelay/internal/httpserver"
	"github.com/hookrelay/hookrelay/internal/routeset"
	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/tracing"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/prometheus/client_golang/prometheus"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"
)

// DispatcherOptions are the parts of a dispatcher that tests replace.
type DispatcherOptions struct {
	Logger zerolog.Logger
	// Listener serves health and metrics; nil means cfg.Dispatcher.Listen.
	Listener net.Listener
	// Registry collects metrics; nil means a new one.
	Registry *prometheus.Registry
	// ActivityInterval is how often the per-minute counts go to Postgres;
	// 0 means activityInterval.
	ActivityInterval time.Duration
	// Client makes the deliveries of the routes of config.yaml and of the
	// platform's; nil means deliver.NewClient(). A team's run-time routes
	// are delivered through a guarded client of their own.
	Client *http.Client
	// Resolver resolves the destinations of teams' run-time routes for
	// their guarded client; nil means the system's.
	Resolver *net.Resolver
	// AfterRecordFunc, when set, runs after each attempt's outcome is
	// recorded, before the ack; tests use it to kill the process there.
	AfterRecordFunc func(outcome webhook.DeliveryState)
	// ConsumerIdleCheck is how often the consumers look for one the
	// broker no longer delivers to (amqp.ConsumersConfig.IdleCheck); 0
	// means its default.
	ConsumerIdleCheck time.Duration
}

// RunDispatcher consumes every route queue and delivers until ctx is done.
// It refuses to start on a schema that is behind, and applies the delivery
// limit policy first. It opens its listener first and starts no goroutine
// before everything that can fail at startup succeeded; it closes the
// listener (also one given in opts) when it returns. On shutdown it stops
// consuming and lets in-flight deliveries finish, record and ack for up to
// dispatcher.shutdown_timeout; then it cancels the rest (nothing recorded,
// not acked: RabbitMQ redelivers them) and returns nil. When a component
// fails, the others are stopped and the error names the cause.
func RunDispatcher(ctx context.Context, cfg *config.Config, opts DispatcherOptions) error {
	logger := opts.Logger.With().Str("process", "dispatcher").Logger()
	reg := opts.Registry
	if reg == nil {
		reg = newRegistry()
	}
	var lns listeners
	defer lns.close()
	ln, err := lns.open(opts.Listener, cfg.Dispatcher.Listen, "dispatcher.listen")
	if err != nil {
		return err
	}
	// Health and metrics are served from now on: /healthz answers while
	// the dispatcher still waits for Postgres or RabbitMQ, and /readyz says
	// which it waits for.
	early := httpserver.StartEarly(ln, dispatcherTimeouts(cfg), cfg.Dispatcher.ShutdownTimeout, metricsHandler(reg))
	handedOver := false
	defer func() {
		if !handedOver {
			if err := early.Stop(); err != nil {
				logger.Warn().Err(err).Msg("stopping the health listener")
			}
		}
	}()
	early.Set("postgres", "connecting")
	early.Set("rabbitmq", "connecting")
	db, err := openDB(ctx, cfg, cfg.DispatcherMaxConns(), "hookrelay-dispatcher", logger)
	if err != nil {
		if ctx.Err() != nil {
			logger.Info().Msg("dispatcher stopped while connecting to postgres")
			return nil
		}
		return err
	}
	early.Set("postgres", "ok")
	defer closeWithin(logger, "postgres pool", db.Close, stopGrace)
	// The claims' pool opens on demand; open its first connection now, so
	// the first deliveries do not pay for it (nor arrive bunched behind it
	// on a rate-limited route). Only that: a Postgres too slow to open it
	// in time (CI run ci37, right after a stall) leaves it to the first
	// claim, which opens one on demand.
	if err := db.WarmClaims(ctx); err != nil {
		if ctx.Err() != nil {
			logger.Info().Msg("dispatcher stopped while connecting to postgres")
			return nil
		}
		logger.Warn().Err(err).Msg("the claims' first connection is opened by the first claim instead")
	}

	dialer, err := setup.Dialer(cfg, amqp.NewNodeGauge(reg), logger)
	if err != nil {
		return err
	}
	// RabbitMQ first: the management API below would blame a bad user or
	// password on itself (401).
	if err := checkRabbitMQ(ctx, dialer, connectionName(cfg, "hookrelay-dispatcher-check"), 0, logger,
		func(state string) { early.Set("rabbitmq", state) }); err != nil {
		if ctx.Err() != nil {
			logger.Info().Msg("dispatcher stopped while waiting for rabbitmq")
			return nil
		}
		return err
	}
	early.Set("rabbitmq", "ok")
	follower, err := newFollower(ctx, cfg, db, logger)
	if err != nil {
		return err
	}
	names := setup.Names(cfg)
	if err := amqp.ApplyPolicies(ctx, cfg.AMQP.Management(), cfg.AMQP.Nodes()[0], topologyOf(cfg, follower.Current()).Policies); err != nil {
		return err
	}
	// Retries and dead letters go out on a connection of their own: a
	// broker alarm blocks publishing connections, and must not freeze the
	// acks on the consuming one.
	publisher := amqp.NewConfirmPublisher(amqp.ConfirmPublisherConfig{
		Dialer:         dialer,
		ConnectionName: connectionName(cfg, "hookrelay-dispatcher-publisher"),
		ConfirmTimeout: cfg.Outbox.PublishTimeout,
		Blocked:        amqp.NewBlockedGauge(reg).WithLabelValues("dispatcher_publisher"),
		Logger:         logger,
	})
	defer func() {
		if err := publisher.Close(); err != nil {
			logger.Warn().Err(err).Msg("closing rabbitmq publishing connection")
		}
	}()
	metrics := deliver.NewMetrics(reg, follower.Current().Names())
	counter, stopCounting := startActivity(ctx, db, opts.ActivityInterval, logger)
	defer stopCounting()
	metrics.CountActivity(counter)
	db.GroupDeliveries(cfg.Dispatcher.BatchSize, metrics.ObserveBatch)
	controls, err := newController(cfg, db, controlRoutes(cfg, follower.Current()), reg, logger)
	if err != nil {
		return err
	}
	// Before any consumer starts: a paused route or an open circuit is
	// followed from the first message on.
	if err := controls.Init(ctx); err != nil {
		return err
	}
	tr, err := tracing.Start(ctx, tracing.Settings{Enabled: cfg.Tracing.Enabled, Service: "hookrelay-dispatcher", Registerer: reg, Logger: logger})
	if err != nil {
		return err
	}
	defer tr.Stop(logger)
	guard, err := setup.Guard(cfg)
	if err != nil {
		return err
	}
	// Routes of kind amqp publish to their brokers on connections of
	// their own, a team's through the guard like its HTTP requests.
	destinations := amqp.NewDestinations(amqp.DestinationsConfig{
		ConnectionName: connectionName(cfg, "hookrelay-dispatcher-destination"),
		GuardControl:   guard.Control,
		Resolver:       opts.Resolver,
		Logger:         logger,
	})
	defer func() {
		if err := destinations.Close(); err != nil {
			logger.Warn().Err(err).Msg("closing the destination brokers' connections")
		}
	}()
	handler, err := deliver.New(deliver.Config{
		Routes:    deliverRoutes(follower.Current()),
		Tiers:     deliverTiers(cfg),
		Store:     deliverStore{db},
		Ordering:  deliverStore{db},
		Lanes:     deliverStore{db},
		Rules:     db,
		Publisher: amqp.NewDispatchPublisher(publisher, names),
		Client:    opts.Client,
		// A team's route: the dialer refuses the relay's own side at
		// each connect, after the name resolved (DNS rebinding).
		GuardedClient: deliver.NewGuardedClient(guard.Control, opts.Resolver),
		Exchanges:     destinations,
		Tracer:        tr.TracerOrNil(),
		// A fifo route's record hands its holder the resource's next
		// event, read as its copy would be.
		Handed:  func(m webhook.Message) webhook.RouteMessage { return amqp.HandedMessage(names, m) },
		Metrics: metrics,
		Logger:  logger,
		// Route controls: each attempt's answer counts toward the circuit
		// breaker; a Retry-After holds the route.
		ObserveFunc: controls.Observe,
		// A lease, not a pinned connection, guards each in-flight pair.
		LeaseMargin:     cfg.Dispatcher.LeaseMargin,
		AfterRecordFunc: opts.AfterRecordFunc,
	})
	if err != nil {
		return err
	}
	unparkUnordered(ctx, db, follower.Current(), logger)
	reg.MustRegister(deliver.NewRouteCollector(routeStats(db), func() []string { return follower.Current().Names() }), newUnopenedCollector(follower))
	// The route engine needs the consumers, whose connects need it: it is
	// set before they run.
	var engine *routeEngine
	consumers := amqp.NewConsumers(amqp.ConsumersConfig{
		Dialer:         dialer,
		ConnectionName: connectionName(cfg, "hookrelay-dispatcher"),
		TopologyFunc:   func() amqp.Topology { return topologyOf(cfg, follower.Current()) },
		OnConnect: func(ctx context.Context, ch *amqp091.Channel) error {
			return engine.unbindStale(ctx, ch)
		},
		Groups:          consumerGroups(cfg, follower.Current(), names, handler, controls),
		ShutdownTimeout: cfg.Dispatcher.ShutdownTimeout,
		Logger:          logger,
		// A message given back for the route's controls (paused, circuit
		// open, held) is republished, not requeued: a requeue counts
		// toward the delivery limit.
		GiveBack:  publisher.GiveBack,
		IdleCheck: opts.ConsumerIdleCheck,
	})
	inspector := amqp.NewInspector(dialer, connectionName(cfg, "hookrelay-dispatcher-inspector"))
	defer func() { _ = inspector.Close() }() // a question's connection; nothing to flush
	reconciler, err := newReconciler(cfg, db, inspector, follower, handler.LastStoreFailure, reg, logger)
	if err != nil {
		return err
	}
	mgmt, err := amqp.NewManagement(cfg.AMQP.Management(), cfg.AMQP.Nodes()[0])
	if err != nil {
		return fmt.Errorf("amqp.management_url: %w", err)
	}
	engine = &routeEngine{cfg: cfg, names: names, handler: handler, controls: controls, consumers: consumers, db: db, mgmt: mgmt, destinations: destinations,
		follower: follower, logger: logger}
	follower.Watch(engine.apply)
	mux := statusMux(reg, logger,
		httpserver.Check{Name: "postgres", Func: db.Ping},
		httpserver.Check{Name: "rabbitmq", Func: func(ctx context.Context) error {
			if err := consumers.Ping(ctx); err != nil {
				return err
			}
			return rabbitmqReady(publisher.Ping(ctx))
		}},
	)

	var status http.Handler = mux
	if cfg.Debug.Pprof {
		status = withPprof(mux, "")
		logger.Warn().Str("listen", ln.Addr().String()).Msg("debug.pprof: profiles served under /debug/pprof/ on the health and metrics listener; keep it private")
	}
	handedOver = true
	return (&dispatcher{cfg: cfg, logger: logger, db: db, ln: ln, early: early, mux: status, consumers: consumers, reconciler: reconciler,
		metrics: metrics, controls: controls, follower: follower, engine: engine}).run(ctx)
}

// dispatcherTimeouts are the timeouts of the dispatcher's listener.
func dispatcherTimeouts(cfg *config.Config) httpserver.Timeouts {
	return httpserver.Timeouts{Read: cfg.Dispatcher.ReadTimeout, Write: cfg.Dispatcher.WriteTimeout, Idle: cfg.Dispatcher.IdleTimeout}
}

// dispatcher is a dispatcher's parts, built before any of them runs.
type dispatcher struct {
	cfg    *config.Config
	logger zerolog.Logger
	db     *store.DB
	ln     net.Listener
	// early serves ln since the start; run hands it mux.
	early      *httpserver.Early
	mux        http.Handler
	consumers  *amqp.Consumers
	reconciler *deliver.Reconciler
	metrics    *deliver.Metrics
	controls   *control.Controller
	follower   *routeset.Follower
	engine     *routeEngine
}

// run runs every part until ctx is done or one fails, which stops the
// others.
func (d *dispatcher) run(ctx context.Context) error {
	cfg := d.cfg
	g, gctx := errgroup.WithContext(ctx)
	d.early.Ready(d.mux)
	g.Go(func() error {
		select {
		case <-d.early.Done(): // serving failed
		case <-gctx.Done():
		}
		return d.early.Stop()
	})
	g.Go(func() error { return d.consumers.Run(gctx) })
	g.Go(func() error { return d.follower.Run(gctx) })
	g.Go(func() error { return d.engine.retire(gctx) })
	g.Go(func() error { return d.reconciler.Run(gctx) })
	g.Go(func() error { return d.controls.Run(gctx) })
	g.Go(func() error { return d.summarize(gctx) })
	g.Go(func() error { return keepPartitions(gctx, d.db, d.logger) })
	g.Go(func() error { return keepRetention(gctx, d.db, cfg.Retention, d.logger) })
	names := setup.Names(cfg)
	var serving []string
	for _, r := range d.follower.Current().All() {
		serving = append(serving, fmt.Sprintf("%s to %s (queue %s, %d consumer(s))", r.Name, destination(r.URL), names.RouteQueue(r.Name), r.Concurrency))
	}
	d.logger.Info().Str("listen", d.ln.Addr().String()).Strs("routes", routeLines(cfg)).
		Msg("ready: delivering " + strings.Join(serving, "; "))
	// shutdown_timeout bounds the HTTP shutdown and the in-flight
	// deliveries (Consumers aborts what is left, then waits a short
	// grace); past it and stopGrace, stop waiting.
	if err := wait(gctx, g, cfg.Dispatcher.ShutdownTimeout+stopGrace); err != nil {
		return fmt.Errorf("dispatcher: %w", err)
	}
	d.logger.Info().Msg("dispatcher stopped")
	return nil
}

// summarize logs, every dispatcher.summary_interval, a line per route
// with what its messages came to since the last line (delivered,
// retrying, dead, superseded, duplicates), so deliveries are visible at
// info; a route with nothing to report stays quiet. It returns nil when
// ctx is done.
func (d *dispatcher) summarize(ctx context.Context) error {
	interval := d.cfg.Dispatcher.SummaryInterval
	if interval <= 0 {
		interval = time.Minute // a config built by hand, not loaded: the default
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	last := map[string]map[string]float64{}
	for _, name := range d.follower.Current().Names() {
		last[name] = d.metrics.Outcomes(name)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		for _, name := range d.follower.Current().Names() {
			now := d.metrics.Outcomes(name)
			delta := map[string]int64{}
			var any bool
			for outcome, n := range now {
				delta[outcome] = int64(n - last[name][outcome])
				any = any || delta[outcome] != 0
			}
			last[name] = now
			if !any {
				continue
			}
			d.logger.Info().Str("route", name).
				Int64("delivered", delta["delivered"]).Int64("retrying", delta["retry_scheduled"]).Int64("dead", delta["dead"]).
				Int64("superseded", delta["superseded"]).Int64("duplicates", delta["skipped_duplicate"]).Int64("stale", delta["stale"]).
				Int64("waiting", delta["waiting"]).Dur("interval", interval).Msg("route summary")
		}
	}
}

// deliverTiers are the retry tiers, one per retry.backoff entry.
func deliverTiers(cfg *config.Config) []deliver.Tier {
	var tiers []deliver.Tier
	for _, d := range cfg.Retry.Backoff {
		tiers = append(tiers, deliver.Tier{Name: amqp.FormatDelay(d), Delay: d})
	}
	return tiers
}

// consumerGroups consume each route's queue with the route's concurrency,
// while controls let them (pause, circuit); each delivery first waits for
// the route's rate limit and Retry-After hold. A route this dispatcher
// cannot deliver (broken) is not consumed: its messages wait. Every wait
// of a delivery (the controls, another holder's lease, a failing
// dependency) ends when the route's cfg.HoldBudget is spent, so the
// message is acked or back in the queue before the broker's consumer
// timeout.
func consumerGroups(cfg *config.Config, set *routeset.Set, names amqp.Names, handler *deliver.Handler, controls *control.Controller) []amqp.ConsumerGroup {
	var groups []amqp.ConsumerGroup
	for _, r := range set.All() {
		if r.Broken != nil {
			continue
		}
		route := r.Name
		gate := controls.Gate(route)
		budget := cfg.HoldBudget(r.Route)
		groups = append(groups, amqp.ConsumerGroup{
			Queue:       names.RouteQueue(route),
			Concurrency: r.Concurrency,
			// A change of a run-time route restarts its consumers: they
			// take the new gate (its controls' settings may have changed).
			Version: r.Version,
			Handle: func(ctx context.Context, m webhook.RouteMessage, stopping <-chan struct{}) error {
				stop, done := holdBudget(stopping, budget)
				err := admitAndHandle(ctx, route, m, stop, handler, controls)
				if spent := done(); err != nil && spent {
					err = fmt.Errorf("held for %s, what amqp.consumer_timeout leaves the route's waits; given back: %w", budget, err)
				}
				return err
			},
			Gate: gate,
		})
	}
	return groups
}

// admitAndHandle delivers m once the route's controls admit it.
func admitAndHandle(ctx context.Context, route string, m webhook.RouteMessage, stopping <-chan struct{}, handler *deliver.Handler, controls *control.Controller) error {
	if err := controls.Admit(ctx, route, stopping); err != nil {
		if errors.Is(err, control.ErrGateClosed) || errors.Is(err, control.ErrStopping) {
			// Paused, tripped or stopping while held: not a failure, and
			// nothing was sent.
			return fmt.Errorf("%w: %w", amqp.ErrGiveBack, err)
		}
		return err
	}
	// The events of m's resource handed over after it (a fifo route) are
	// each admitted as m was.
	return handler.HandleThen(ctx, route, m, stopping, func(ctx context.Context) error {
		return controls.Admit(ctx, route, stopping)
	})
}

// holdBudget returns a channel that closes when stopping does or budget
// has passed (never for a budget of 0), which ends a delivery's waits, and
// done, which lets the timer go and reports whether budget passed first.
// Call done once the delivery is over, whatever its outcome.
func holdBudget(stopping <-chan struct{}, budget time.Duration) (<-chan struct{}, func() bool) {
	if budget <= 0 {
		return stopping, func() bool { return false }
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	var spent atomic.Bool
	go func() {
		t := time.NewTimer(budget)
		defer t.Stop()
		select {
		case <-stopping:
		case <-t.C:
			spent.Store(true)
		case <-done:
			return
		}
		close(stop)
	}()
	return stop, func() bool {
		close(done)
		return spent.Load()
	}
}

// newReconciler re-sends overdue pairs of cfg's routes that no copy in the
// broker can be waiting for, reading their queues through inspector (live)
// and the retry tiers through the management API.
func newReconciler(cfg *config.Config, db *store.DB, inspector *amqp.Inspector, follower *routeset.Follower, lastStoreFailure func() time.Time,
	reg prometheus.Registerer, logger zerolog.Logger) (*deliver.Reconciler, error) {
	names := setup.Names(cfg)
	mgmt, err := amqp.NewManagement(cfg.AMQP.Management(), cfg.AMQP.Nodes()[0])
	if err != nil {
		return nil, fmt.Errorf("amqp.management_url: %w", err)
	}
	tiers := map[string]bool{}
	for _, d := range cfg.Retry.Backoff {
		tiers[names.Retry(d)] = true
	}
	return deliver.NewReconciler(deliver.ReconcilerConfig{
		Routes:     follower.Current().Names(),
		RoutesFunc: func() []string { return follower.Current().Names() },
		Store:      reconcileStore{db},
		QueueReady: func(ctx context.Context, route string) (deliver.QueueReading, error) {
			q, err := inspector.Queue(ctx, names.RouteQueue(route))
			return deliver.QueueReading{Ready: q.Ready, Consumers: q.Consumers}, err
		},
		Tiers: func(ctx context.Context) (map[string]int, error) {
			// Every tier of the prefix, this config's or not: a tier
			// another dispatcher's config has can hold this route's copies.
			stats, err := mgmt.QueueStats(ctx, names.RetryPrefix())
			if err != nil {
				return nil, err
			}
			out := map[string]int{}
			for name := range tiers {
				out[name] = 0
			}
			for _, q := range stats {
				out[q.Name] = q.DeadLettering
			}
			return out, nil
		},
		Interval:             cfg.Reconcile.Interval,
		Margin:               cfg.Reconcile.Margin,
		StrandAfter:          cfg.Reconcile.StrandAfter,
		LastStoreFailureFunc: lastStoreFailure,
		PingFunc:             db.Ping,
		ClearTierFunc: func(ctx context.Context, tier string) error {
			return mgmt.ClearDeadLettering(ctx, names.Prefix+".clear-stranded-tier", tier)
		},
		Registerer: reg,
		Logger:     logger,
	})
}

// rabbitmqReady maps a publisher's Ping to readiness. A broker alarm that
// blocks publishing is shown as "blocked" but keeps the process ready: it
// is broker-wide, so no other instance would do better, and ingest (which
// needs only Postgres) and deliveries that need no publish go on.
func rabbitmqReady(err error) error {
	if errors.Is(err, amqp.ErrBlocked) {
		return &httpserver.Degraded{State: "blocked", Err: err}
	}
	return err
}

// reconcileStore adapts *store.DB to deliver.ReconcileStore.
type reconcileStore struct{ db *store.DB }

func (s reconcileStore) DeliveryReconcile(ctx context.Context, route string, margin time.Duration, limit int, commit func() error) ([]deliver.Reconciled, error) {
	list, err := s.db.DeliveryReconcile(ctx, route, margin, limit, commit)
	if err != nil {
		return nil, err
	}
	out := make([]deliver.Reconciled, len(list))
	for i, r := range list {
		out[i] = deliver.Reconciled(r)
	}
	return out, nil
}

// routeStats adapts store.RouteStatsList to the collector.
func routeStats(db *store.DB) deliver.RouteStatsFunc {
	return func(ctx context.Context) ([]deliver.RouteStat, error) {
		list, err := db.RouteStatsList(ctx)
		if err != nil {
			return nil, err
		}
		out := make([]deliver.RouteStat, len(list))
		for i, s := range list {
			out[i] = deliver.RouteStat{Route: s.Route, Undelivered: s.Undelivered, OldestUndelivered: s.OldestUndelivered, Dead: s.Dead,
				Waiting: s.Waiting, WaitingResources: s.WaitingResources, LongestWait: s.LongestWait}
		}
		return out, nil
	}
}

// deliverStore adapts *store.DB to deliver.Store and
// deliver.OrderingStore.
type deliverStore struct{ db *store.DB }

// DeliveryClaim is store.DB.DeliveryClaim, its lease as a deliver.Lease.
func (s deliverStore) DeliveryClaim(ctx context.Context, owner, eventID uuid.UUID, route string, attempt int, gen int64, ttl time.Duration) (deliver.Lease, error) {
	l, err := s.db.DeliveryClaim(ctx, owner, eventID, route, attempt, gen, ttl)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// DeliveryClaimInOrder is store.DB.DeliveryClaimInOrder, its lease as a
// deliver.Lease.
func (s deliverStore) DeliveryClaimInOrder(ctx context.Context, owner, eventID uuid.UUID, route string, attempt int, gen int64, ttl time.Duration, skipDead bool) (deliver.Lease, error) {
	l, err := s.db.DeliveryClaimInOrder(ctx, owner, eventID, route, attempt, gen, ttl, skipDead)
	if err != nil {
		return nil, err
	}
	return orderedLease{l}, nil
}

// orderedLease is a store lease claimed in order as a deliver.HandOver.
type orderedLease struct{ *store.DeliveryLease }

// Next is store.DeliveryLease.Next, its lease as a deliver.Lease.
func (l orderedLease) Next() (deliver.Lease, webhook.Message, bool) {
	n, m, ok := l.DeliveryLease.Next()
	if !ok {
		return nil, m, false
	}
	return orderedLease{n}, m, true
}

// DeliveryStale adapts store.DB.DeliveryStale to deliver.OrderingStore.
func (s deliverStore) DeliveryStale(ctx context.Context, eventID uuid.UUID, route string) (*deliver.Staleness, error) {
	st, err := s.db.DeliveryStale(ctx, eventID, route)
	if err != nil || st == nil {
		return nil, err
	}
	return &deliver.Staleness{Resource: st.Resource, Version: st.Version, Delivered: st.Delivered}, nil
}
