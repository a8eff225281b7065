package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/api"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/console"
	"github.com/hookrelay/hookrelay/internal/httpserver"
	"github.com/hookrelay/hookrelay/internal/ingest"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/outbox"
	"github.com/hookrelay/hookrelay/internal/routeset"
	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/tracing"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"
)

// ReceiverOptions are the parts of a receiver that tests replace.
type ReceiverOptions struct {
	Logger zerolog.Logger
	// Listener serves HTTP; nil means listen on cfg.Receiver.Listen.
	Listener net.Listener
	// Registry collects metrics; nil means a new one.
	Registry *prometheus.Registry
	// AfterPublishFunc runs between a batch's confirms and its delete.
	AfterPublishFunc func()
	// DisablePublisher runs ingest only (tests that inspect the outbox).
	DisablePublisher bool
	// AdminListener serves the admin API; nil means cfg.Admin.Listen, and
	// the API is off when that is empty too.
	AdminListener net.Listener
	// MetricsListener serves the metrics and health; nil means
	// cfg.Receiver.MetricsListen, and no metrics are served when that is
	// empty too.
	MetricsListener net.Listener
	// ActivityInterval is how often the per-minute counts go to Postgres;
	// 0 means activityInterval.
	ActivityInterval time.Duration
	// Resolver looks up the destination of a team's route made through
	// the admin API when it is saved; nil means the system's.
	Resolver *net.Resolver
}

// receiverBrokerWait is how long a starting receiver waits for a broker
// that does not answer before it starts anyway (ingest needs only
// Postgres; the outbox keeps the events).
const receiverBrokerWait = 10 * time.Second

// receiverStopLimit bounds how long the receiver waits for its goroutines
// once told to stop: HTTP shutdowns take up to shutdown_timeout, a batch in
// flight up to publish_timeout, side by side.
func receiverStopLimit(cfg *config.Config) time.Duration {
	return max(cfg.Receiver.ShutdownTimeout, cfg.Outbox.PublishTimeout) + stopGrace
}

// RunReceiver runs the receiver (ingest HTTP server plus outbox publisher)
// until ctx is done. It refuses to start on a database whose schema is
// behind. It opens its listeners first and starts no goroutine before
// everything that can fail at startup succeeded; it closes the listeners
// (also those given in opts) when it returns. On shutdown the server stops
// accepting, in-flight requests finish, and a claimed outbox batch is
// published or left for the next publisher; it returns nil after a clean
// shutdown. When a component fails, the others are stopped and the error
// names the cause.
func RunReceiver(ctx context.Context, cfg *config.Config, opts ReceiverOptions) error {
	logger := opts.Logger.With().Str("process", "receiver").Logger()
	reg := opts.Registry
	if reg == nil {
		reg = newRegistry()
	}
	var lns listeners
	defer lns.close()
	ln, err := lns.open(opts.Listener, cfg.Receiver.Listen, "receiver.listen")
	if err != nil {
		return err
	}
	var aln, mln net.Listener
	if opts.AdminListener != nil || cfg.Admin.Listen != "" {
		if aln, err = lns.open(opts.AdminListener, cfg.Admin.Listen, "admin.listen"); err != nil {
			return err
		}
	}
	if opts.MetricsListener != nil || cfg.Receiver.MetricsListen != "" {
		if mln, err = lns.open(opts.MetricsListener, cfg.Receiver.MetricsListen, "receiver.metrics_listen"); err != nil {
			return err
		}
	}
	// Every listener is served from now on: /healthz answers while the
	// receiver still connects to Postgres and RabbitMQ, /readyz says which
	// it waits for, and a webhook gets 503 (the sender retries).
	sv := &servers{}
	handedOver := false
	defer func() {
		if !handedOver {
			sv.stop(logger)
		}
	}()
	sv.public = httpserver.StartEarly(ln, receiverTimeouts(cfg), cfg.Receiver.ShutdownTimeout, nil)
	if aln != nil {
		sv.admin = httpserver.StartEarly(aln, adminTimeouts(cfg), cfg.Receiver.ShutdownTimeout, nil)
	}
	if mln != nil {
		sv.metrics = httpserver.StartEarly(mln, receiverTimeouts(cfg), cfg.Receiver.ShutdownTimeout, metricsHandler(reg))
	}
	sv.set("postgres", "connecting")
	sv.set("rabbitmq", "connecting")
	tr, err := tracing.Start(ctx, tracing.Settings{Enabled: cfg.Tracing.Enabled, Service: "hookrelay-receiver", Registerer: reg, Logger: logger})
	if err != nil {
		return err
	}
	// Deferred first, so it runs last: the spans of the stop are in.
	defer tr.Stop(logger)
	db, err := openDB(ctx, cfg, cfg.Database.MaxConns, "hookrelay-receiver", logger)
	if err != nil {
		if ctx.Err() != nil {
			logger.Info().Msg("receiver stopped while connecting to postgres")
			return nil
		}
		return err
	}
	defer closeWithin(logger, "postgres pool", db.Close, stopGrace)
	sv.set("postgres", "ok")

	sources, err := Sources(cfg, logger)
	if err != nil {
		return err
	}
	follower, err := newFollower(ctx, cfg, db, logger)
	if err != nil {
		return err
	}
	reg.MustRegister(newUnopenedCollector(follower))
	backfill := newPairBackfill(db, follower.Current, backfillAgain, logger)
	follower.Watch(backfill.watch)
	counter, stopCounting := startActivity(ctx, db, opts.ActivityInterval, logger)
	defer stopCounting()
	ingestMetrics := ingest.NewMetrics(reg)
	ingestMetrics.CountActivity(counter)
	dialer, err := setup.Dialer(cfg, amqp.NewNodeGauge(reg), logger)
	if err != nil {
		return err
	}
	// Ingest needs only Postgres: a broker that does not answer at start
	// is tried for a while, then the receiver starts anyway and events
	// wait in the outbox. A refusal is a config error: stop.
	rabbitmq := "ok"
	if err := checkRabbitMQ(ctx, dialer, connectionName(cfg, "hookrelay-receiver-check"), receiverBrokerWait, logger,
		func(state string) { sv.set("rabbitmq", state) }); err != nil {
		if errors.Is(err, amqp.ErrRefused) {
			return err
		}
		if ctx.Err() != nil {
			logger.Info().Msg("receiver stopped while waiting for rabbitmq")
			return nil
		}
		rabbitmq = "unreachable"
		logger.Error().Err(err).Msg("rabbitmq still does not answer; starting anyway: webhooks are stored in Postgres and published once it does")
	}
	sv.set("rabbitmq", rabbitmq)
	publisher := amqp.NewPublisher(amqp.PublisherConfig{
		Dialer:         dialer,
		TopologyFunc:   func() amqp.Topology { return topologyOf(cfg, follower.Current()) },
		Exchange:       setup.Names(cfg).Events(),
		Names:          setup.Names(cfg),
		ConfirmTimeout: cfg.Outbox.PublishTimeout,
		MaxBatch:       cfg.Outbox.BatchSize,
		ConnectionName: connectionName(cfg, "hookrelay-receiver"),
		Logger:         logger,
		Confirms:       amqp.NewConfirmsCounter(reg),
		Blocked:        amqp.NewBlockedGauge(reg).WithLabelValues("receiver_publisher"),
		Tracer:         tr.TracerOrNil(),
	})
	defer func() {
		if err := publisher.Close(); err != nil {
			logger.Warn().Err(err).Msg("closing rabbitmq connection")
		}
	}()
	reg.MustRegister(outbox.NewBacklogCollector(db))
	wake := make(chan struct{}, 1)
	var direct *outbox.Direct
	if !opts.DisablePublisher && cfg.Outbox.DirectHold > 0 {
		if direct, err = outbox.NewDirect(outbox.DirectConfig{
			Store:            db,
			Publisher:        outboxPublisher{publisher},
			Wake:             wake,
			BatchSize:        cfg.Outbox.BatchSize,
			MaxQueuedBytes:   directMaxQueuedBytes,
			DeleteAfter:      directDeleteAfter,
			PublishTimeout:   cfg.Outbox.PublishTimeout,
			Logger:           logger,
			Registerer:       reg,
			AfterPublishFunc: opts.AfterPublishFunc,
		}); err != nil {
			return err
		}
		db.HoldOutbox(cfg.Outbox.DirectHold)
	}
	var eventStore ingest.Store = db
	if direct != nil {
		eventStore = ingestStore{db: db, direct: direct}
	}
	handler, err := ingest.New(ingest.Config{
		Sources:      sources,
		Store:        eventStore,
		MaxBodyBytes: cfg.Receiver.MaxBodyBytes,
		BatchSize:    cfg.Receiver.BatchSize,
		BatchWait:    cfg.Receiver.BatchWait,
		RouteFunc: func(ctx context.Context, ev *webhook.Event) ingest.Routing {
			return setup.RoutingOf(follower.Current().Route(ctx, ev))
		},
		Metrics: ingestMetrics,
		Logger:  logger,
		Tracing: tr,
	})
	if err != nil {
		return err
	}
	checks := []httpserver.Check{
		{Name: "postgres", Func: db.Ping},
		{Name: "rabbitmq", Func: func(ctx context.Context) error { return rabbitmqReady(publisher.Ping(ctx)) }},
	}
	// The public listener serves the webhooks and health, not the metrics
	// (they go on receiver.metrics_listen).
	mux := http.NewServeMux()
	httpserver.Health(mux, logger, checks...)
	handler.Register(mux)
	rc := &receiver{cfg: cfg, logger: logger, ln: ln, adminLn: aln, db: db, mux: mux, wake: wake, direct: direct, rabbitmq: rabbitmq,
		servers: sv, metricsLn: mln, status: statusMux(reg, logger, checks...), follower: follower, backfill: backfill}
	if !opts.DisablePublisher {
		if rc.relay, err = newRelay(cfg, db, publisher, rc.wake, reg, logger, opts.AfterPublishFunc); err != nil {
			return err
		}
	}
	if aln != nil {
		// The API's own pool: each call sees the rows of the team its
		// token acts for (row-level security), where the engine's pool
		// sees every team's.
		apiDB, err := store.Open(ctx, store.Config{URL: cfg.Database.URL, MaxConns: cfg.Database.MaxConns, ApplicationName: "hookrelay-receiver-api",
			QueryTimeout: cfg.Database.QueryTimeout, TeamFromContext: true})
		if err != nil {
			return fmt.Errorf("database.url: %w", err)
		}
		defer apiDB.Close()
		svc, closeOps, err := setup.Ops(cfg, apiDB, dialer, "hookrelay-receiver-ops", follower.Current)
		if err != nil {
			return err
		}
		defer closeOps()
		svc.Resolver = opts.Resolver
		// Jobs end with the receiver, each stored as stopped, before the
		// pool closes (defers run last in, first out).
		jobCtx, stopJobs := context.WithCancel(ctx)
		svc.Jobs = ops.NewJobRunner(jobCtx, logger.With().Str("component", "jobs").Logger())
		svc.Jobs.Sweep(apiDB)
		defer svc.Jobs.Wait()
		defer stopJobs()
		// One count of failed authentications per address for the whole
		// listener: /api/v1, the console's sign-in and the profiles.
		limiter := api.NewFailLimiter(cfg.Admin.AuthFailuresPerMinute)
		// Streams (GET /api/v1/listen) end when the admin server shuts
		// down: they are never idle, and would hold the shutdown.
		streams, endStreams := context.WithCancel(context.Background())
		sv.admin.OnShutdown(endStreams)
		v1, err := api.Handler(svc, api.Options{ConfigToken: cfg.Admin.Token, Limiter: limiter, Streams: streams},
			logger.With().Str("component", "api").Logger())
		if err != nil {
			return err
		}
		web, err := console.Handler(jobCtx, svc, console.Options{
			DB: stdlib.OpenDBFromPool(db.Pool()), ConfigToken: cfg.Admin.Token, SecureCookie: cfg.Admin.CookieSecure,
			FailedSignIn: limiter.Fail, Blocked: limiter.Blocked,
		}, logger.With().Str("component", "console").Logger())
		if err != nil {
			return err
		}
		admin := http.NewServeMux()
		admin.Handle(api.Prefix+"/", v1)
		// Nothing else is served under /api/: the first API (/api/events,
		// /api/replay, ...) is gone, and a script still calling it gets a
		// 404 naming the way on rather than the console's sign-in page.
		admin.Handle("/api/", api.Gone())
		if cfg.Debug.Pprof {
			admin.Handle("/debug/pprof/", api.LimitFailures(limiter, withPprof(http.NotFoundHandler(), cfg.Admin.Token)))
			logger.Warn().Msg("debug.pprof: profiles served under /debug/pprof/ on the admin listener")
		}
		admin.Handle("/", web) // the web console
		rc.admin = admin
		logger.Info().Msg("admin API " + api.Prefix + ": named tokens (hookrelay tokens create) with roles; admin.token is accepted as an admin token, audited as " + ops.ConfigTokenActor)
	} else if cfg.Debug.Pprof {
		logger.Warn().Msg("debug.pprof is set but admin.listen is not: the receiver serves no profiles")
	}
	handedOver = true
	return rc.run(ctx)
}

// servers are the receiver's listeners, each served since the start.
type servers struct {
	public, admin, metrics *httpserver.Early
}

func (sv *servers) all() []*httpserver.Early {
	var out []*httpserver.Early
	for _, e := range []*httpserver.Early{sv.public, sv.admin, sv.metrics} {
		if e != nil {
			out = append(out, e)
		}
	}
	return out
}

// set records a dependency's state on every listener's /readyz.
func (sv *servers) set(dependency, state string) {
	for _, e := range sv.all() {
		e.Set(dependency, state)
	}
}

func (sv *servers) stop(logger zerolog.Logger) {
	for _, e := range sv.all() {
		if err := e.Stop(); err != nil {
			logger.Warn().Err(err).Msg("stopping a listener")
		}
	}
}

// receiverTimeouts are the timeouts of the receiver's listeners.
func receiverTimeouts(cfg *config.Config) httpserver.Timeouts {
	return httpserver.Timeouts{Read: cfg.Receiver.ReadTimeout, Write: cfg.Receiver.WriteTimeout, Idle: cfg.Receiver.IdleTimeout}
}

// adminTimeouts are the timeouts of the admin listener.
func adminTimeouts(cfg *config.Config) httpserver.Timeouts {
	return httpserver.Timeouts{Read: cfg.Admin.ReadTimeout, Write: cfg.Admin.WriteTimeout, Idle: cfg.Admin.IdleTimeout}
}

// receiver is a receiver's parts, built before any of them runs.
type receiver struct {
	cfg      *config.Config
	logger   zerolog.Logger
	follower *routeset.Follower
	backfill *pairBackfill
	ln       net.Listener
	db       *store.DB
	mux      *http.ServeMux
	// servers serve the listeners since the start; run hands them mux,
	// admin and status.
	servers *servers
	// status serves health and metrics on metricsLn; nil listener: off.
	status    http.Handler
	metricsLn net.Listener
	// rabbitmq is what the start-up check found: ok or unreachable.
	rabbitmq string
	// relay drains the outbox, woken on wake; nil when disabled.
	relay *outbox.Relay
	wake  chan struct{}
	// direct publishes new events right after their commit; nil when off.
	direct *outbox.Direct
	// admin serves the admin API on adminLn; nil when it is off.
	admin   http.Handler
	adminLn net.Listener
}

// run runs every part until ctx is done or one fails. Nothing in it fails
// before a goroutine reports it: every failure stops the others through
// gctx.
func (rc *receiver) run(ctx context.Context) error {
	cfg, logger := rc.cfg, rc.logger
	g, gctx := errgroup.WithContext(ctx)
	serve := func(e *httpserver.Early, h http.Handler) {
		e.Ready(h)
		g.Go(func() error {
			select {
			case <-e.Done(): // serving failed
			case <-gctx.Done():
			}
			return e.Stop()
		})
	}
	if rc.direct != nil {
		// It drains what ingest offered once the public listener has
		// stopped (its requests answered), so a restart leaves no event
		// to wait out its hold.
		dctx, stopDirect := context.WithCancel(context.WithoutCancel(gctx))
		defer stopDirect()
		g.Go(func() error { return rc.direct.Run(dctx) })
		g.Go(func() error {
			select {
			case <-rc.servers.public.Done():
			case <-gctx.Done():
			}
			_ = rc.servers.public.Stop() // reported by its own goroutine below
			stopDirect()
			return nil
		})
	}
	serve(rc.servers.public, rc.mux)
	g.Go(func() error { return keepPartitions(gctx, rc.db, logger) })
	g.Go(func() error { return keepRetention(gctx, rc.db, rc.cfg.Retention, logger) })
	g.Go(func() error { return rc.follower.Run(gctx) })
	relayEvents := newRelayEvents(rc.db, rc.cfg.Alerts, rc.follower.Current, logger)
	g.Go(func() error { return relayEvents.Listen(gctx) })
	g.Go(func() error { return relayEvents.Run(gctx) })
	g.Go(func() error { return rc.backfill.Run(gctx) })
	if rc.servers.metrics != nil {
		serve(rc.servers.metrics, rc.status)
		logger.Info().Str("listen", rc.metricsLn.Addr().String()).Msg("metrics served")
	}
	if rc.relay != nil {
		g.Go(func() error { return rc.db.Listen(gctx, store.OutboxChannel, rc.wake, logger) })
		g.Go(func() error { return rc.relay.Run(gctx) })
	}
	if rc.admin != nil {
		serve(rc.servers.admin, rc.admin)
		admin := baseURL(rc.adminLn)
		logger.Info().Str("listen", rc.adminLn.Addr().String()).Str("console", admin+"/").Str("api", admin+"/api/v1").
			Msg("console and admin API started: " + admin + "/")
	}
	base := baseURL(rc.ln)
	var hooks []string
	for _, s := range cfg.Sources {
		hooks = append(hooks, base+"/webhooks/"+s.Name)
	}
	ready := "ready: POST " + strings.Join(hooks, ", ")
	if len(hooks) == 0 {
		ready = "ready: no sources configured, so no webhook is accepted"
	}
	logger.Info().Str("listen", rc.ln.Addr().String()).Strs("webhooks", hooks).Strs("routes", routeLines(cfg)).
		Str("rabbitmq", rc.rabbitmq).Msg(ready)
	if err := wait(gctx, g, receiverStopLimit(cfg)); err != nil {
		return fmt.Errorf("receiver: %w", err)
	}
	logger.Info().Msg("receiver stopped")
	return nil
}

// The direct publish: at most directMaxQueuedBytes of bodies wait for it
// (past it, their rows go to the outbox publisher), and confirmed rows wait
// at most directDeleteAfter for their delete, so that at a few hundred
// events a second one statement deletes tens of rows.
const (
	directMaxQueuedBytes = 64 << 20
	directDeleteAfter    = 100 * time.Millisecond
)

// newRelay drains the outbox through publisher, woken on wake.
func newRelay(cfg *config.Config, db *store.DB, publisher *amqp.Publisher, wake <-chan struct{}, reg prometheus.Registerer, logger zerolog.Logger, afterPublish func()) (*outbox.Relay, error) {
	return outbox.New(outbox.Config{
		Store:            outboxStore{db},
		Publisher:        outboxPublisher{publisher},
		Metrics:          outbox.NewMetrics(reg),
		Wake:             wake,
		BatchSize:        cfg.Outbox.BatchSize,
		PollInterval:     cfg.Outbox.PollInterval,
		PublishTimeout:   cfg.Outbox.PublishTimeout,
		Logger:           logger,
		AfterPublishFunc: afterPublish,
	})
}

// outboxStore adapts *store.DB to outbox.Store: its claim returns the
// concrete *store.OutboxBatch, which is an outbox.Batch (Go has no
// covariant results).
type outboxStore struct{ db *store.DB }

func (s outboxStore) OutboxClaim(ctx context.Context, limit int) (outbox.Batch, error) {
	b, err := s.db.OutboxClaim(ctx, limit)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// outboxPublisher adapts *amqp.Publisher to outbox.Publisher. A nack, a
// return or a confirm timeout is the broker's answer about that message and
// counts against its row. After any other error the outcomes say nothing
// about the messages (a closing channel resolves every pending confirm as a
// nack), so those rows go back uncounted.
type outboxPublisher struct{ p *amqp.Publisher }

func (o outboxPublisher) Publish(ctx context.Context, msgs []webhook.Message) ([]outbox.Result, error) {
	outcomes, err := o.p.Publish(ctx, msgs)
	return outboxResults(outcomes, err), err
}

// outboxResults turns the broker's outcomes into the outbox's results: an
// ack deletes the row; a nack, a return or a confirm timeout counts against
// it; after any other error the outcomes say nothing about their messages.
func outboxResults(outcomes []amqp.Outcome, err error) []outbox.Result {
	answered := err == nil || errors.Is(err, amqp.ErrConfirmTimeout)
	results := make([]outbox.Result, len(outcomes))
	for i, oc := range outcomes {
		switch {
		case oc == amqp.Acked:
			results[i].Acked = true
		case answered:
			results[i].Failure = oc.String()
		}
	}
	return results
}
