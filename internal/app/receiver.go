package app

import (
	"context"
	"fmt"
	"net"
	"net/http"

	"github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/httpserver"
	"github.com/hookrelay/hookrelay/internal/ingest"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/outbox"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
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
}

// RunReceiver runs the receiver (ingest HTTP server plus outbox publisher)
// until ctx is done. It refuses to start on a database whose schema is
// behind. On shutdown the server stops accepting, in-flight requests finish,
// and a claimed outbox batch is published or left for the next publisher; it
// returns nil after a clean shutdown.
func RunReceiver(ctx context.Context, cfg *config.Config, opts ReceiverOptions) error {
	logger := opts.Logger.With().Str("process", "receiver").Logger()
	reg := opts.Registry
	if reg == nil {
		reg = newRegistry()
	}

	db, err := store.Open(ctx, store.Config{URL: cfg.Database.URL, MaxConns: cfg.Database.MaxConns, ApplicationName: "hookrelay-receiver"})
	if err != nil {
		return err
	}
	defer db.Close()
	if err := db.RequireSchema(ctx); err != nil {
		return err
	}

	sources, err := Sources(cfg, logger)
	if err != nil {
		return err
	}
	handler, err := ingest.New(ingest.Config{
		Sources:      sources,
		Store:        db,
		MaxBodyBytes: cfg.Receiver.MaxBodyBytes,
		RoutesFunc:   RoutesFor(cfg),
		Metrics:      ingest.NewMetrics(reg),
		Logger:       logger,
	})
	if err != nil {
		return err
	}

	topo := Topology(cfg)
	publisher := amqp.NewPublisher(amqp.PublisherConfig{
		URL:            cfg.AMQP.URL,
		Topology:       topo,
		Exchange:       amqp.Names{Prefix: cfg.AMQP.Prefix}.Events(),
		Names:          amqp.Names{Prefix: cfg.AMQP.Prefix},
		ConfirmTimeout: cfg.Outbox.PublishTimeout,
		MaxBatch:       cfg.Outbox.BatchSize,
		ConnectionName: "hookrelay-receiver " + cfg.AMQP.Prefix + "@" + hostname(),
		Logger:         logger,
		Confirms:       amqp.NewConfirmsCounter(reg),
		Blocked:        amqp.NewBlockedGauge(reg).WithLabelValues("receiver_publisher"),
	})
	defer func() {
		if err := publisher.Close(); err != nil {
			logger.Warn().Err(err).Msg("closing rabbitmq connection")
		}
	}()
	reg.MustRegister(outbox.NewBacklogCollector(db))

	mux := http.NewServeMux()
	handler.Register(mux)
	httpserver.Health(mux,
		httpserver.Check{Name: "postgres", Func: db.Ping},
		httpserver.Check{Name: "rabbitmq", Func: func(ctx context.Context) error { return rabbitmqReady(publisher.Ping(ctx)) }},
	)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))

	ln, err := listen(opts.Listener, cfg.Receiver.Listen)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return httpserver.Run(gctx, ln, &http.Server{Handler: mux}, cfg.Receiver.ShutdownTimeout)
	})
	if !opts.DisablePublisher {
		wake := make(chan struct{}, 1)
		relay, err := outbox.New(outbox.Config{
			Store:            outboxStore{db},
			Publisher:        publisher,
			Wake:             wake,
			BatchSize:        cfg.Outbox.BatchSize,
			PollInterval:     cfg.Outbox.PollInterval,
			PublishTimeout:   cfg.Outbox.PublishTimeout,
			Logger:           logger,
			AfterPublishFunc: opts.AfterPublishFunc,
		})
		if err != nil {
			return err
		}
		g.Go(func() error { return db.Listen(gctx, store.OutboxChannel, wake, logger) })
		g.Go(func() error { return relay.Run(gctx) })
	}
	if opts.AdminListener != nil || cfg.Admin.Listen != "" {
		aln, err := listen(opts.AdminListener, cfg.Admin.Listen)
		if err != nil {
			return err
		}
		admin := ops.Handler(Ops(cfg, db), cfg.Admin.Token, logger)
		g.Go(func() error {
			return httpserver.Run(gctx, aln, &http.Server{Handler: admin}, cfg.Receiver.ShutdownTimeout)
		})
		logger.Info().Str("listen", aln.Addr().String()).Msg("admin API started")
	}
	logger.Info().Str("listen", ln.Addr().String()).Int("sources", len(sources)).Msg("receiver started")
	if err := g.Wait(); err != nil {
		return fmt.Errorf("receiver: %w", err)
	}
	logger.Info().Msg("receiver stopped")
	return nil
}

// outboxStore adapts *store.DB to outbox.Store.
type outboxStore struct{ db *store.DB }

func (s outboxStore) OutboxClaim(ctx context.Context, limit int) (outbox.Batch, error) {
	return s.db.OutboxClaim(ctx, limit)
}
