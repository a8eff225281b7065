// Package app wires hookrelay's packages into the receiver and dispatcher
// processes from a validated config (RunReceiver, RunDispatcher). The
// cmd/* mains parse the command line and call it, through internal/setup's
// start-up; tests call it to run the real processes in-process.
package app

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/hookrelay/hookrelay/internal/activity"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/extract"
	"github.com/hookrelay/hookrelay/internal/httpserver"
	"github.com/hookrelay/hookrelay/internal/ingest"
	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/hookrelay/hookrelay/internal/signature"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
)

// Sources builds the ingest sources from cfg.
func Sources(cfg *config.Config, logger zerolog.Logger) ([]ingest.Source, error) {
	out := make([]ingest.Source, 0, len(cfg.Sources))
	for i, s := range cfg.Sources {
		key := fmt.Sprintf("sources[%d]", i)
		v, err := signature.New(s.Verify.Scheme, s.Verify.SchemeConfig())
		if err != nil {
			return nil, fmt.Errorf("%s.verify: %w", key, err)
		}
		if s.Verify.Scheme == "none" {
			logger.Warn().Str("source", s.Name).Msg("source accepts unsigned requests (verify.scheme none)")
		}
		x, err := extract.New(extractConfig(s))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		out = append(out, ingest.Source{Name: s.Name, Verifier: v, Extractor: x, DedupeBody: s.DedupesBody(), TrustTraceparent: s.TrustTraceparent})
	}
	return out, nil
}

// extractConfig is where s's idempotency key and event type come from; a
// single header or path is a list of one.
func extractConfig(s config.Source) extract.Config {
	idem := s.Idempotency
	ec := extract.Config{
		IdempotencySignedID: idem.SignedID,
		IdempotencyHeaders:  idem.Headers,
		IdempotencyPaths:    idem.JSONPaths,
		EventTypeHeader:     s.EventType.Header,
		EventTypePaths:      s.EventType.JSONPaths,
	}
	if s.EventType.JSONPath != "" {
		ec.EventTypePaths = []string{s.EventType.JSONPath}
	}
	if idem.Header != "" {
		ec.IdempotencyHeaders = []string{idem.Header}
	}
	if idem.JSONPath != "" {
		ec.IdempotencyPaths = []string{idem.JSONPath}
	}
	ec.OrderingResource = extract.Field{Header: s.Ordering.Resource.Header, Path: s.Ordering.Resource.JSONPath}
	ec.OrderingVersion = extract.Field{Header: s.Ordering.Version.Header, Path: s.Ordering.Version.JSONPath}
	// A version that is a time may be as far ahead as the signature's
	// timestamp may be: further, it is a clock or a bug, not an order.
	ec.VersionFutureLimit = s.Verify.Tolerance
	if ec.VersionFutureLimit <= 0 {
		ec.VersionFutureLimit = defaultVersionFutureLimit
	}
	return ec
}

// defaultVersionFutureLimit is the future limit of a time version for a
// source whose scheme has no timestamp tolerance: the schemes' default.
const defaultVersionFutureLimit = 5 * time.Minute

// newRegistry returns a registry with the Go runtime and process collectors.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// listen opens addr unless ln is already given.
func listen(ln net.Listener, addr string) (net.Listener, error) {
	if ln != nil {
		return ln, nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", addr, err)
	}
	return l, nil
}

// hostname names connections in pg_stat_activity and the management UI.
func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "unknown"
	}
	return h
}

// openDB opens the pool for a process, checks that Postgres answers (an
// error naming database.url otherwise), refuses a schema that is behind
// and a role that row-level security does not hold once teams exist, and
// declares the config's routes and sources with their teams.
func openDB(ctx context.Context, cfg *config.Config, maxConns int32, name string, logger zerolog.Logger) (*store.DB, error) {
	db, err := store.Open(ctx, store.Config{URL: cfg.Database.URL, MaxConns: maxConns, ApplicationName: name, QueryTimeout: cfg.Database.QueryTimeout,
		GenericPlans: true})
	if err != nil {
		return nil, fmt.Errorf("database.url: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = db.Ping(pctx)
	cancel()
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("database.url: %w", err)
	}
	if err := db.RequireSchema(ctx); err != nil {
		db.Close()
		return nil, err
	}
	warning, err := db.RequireIsolation(ctx)
	if err != nil {
		db.Close()
		return nil, err
	}
	if warning != "" {
		logger.Warn().Msg(warning)
	}
	if err := setup.Declare(ctx, cfg, db); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// connectionName names a process's RabbitMQ connection in the management
// UI: what it is for, the prefix and the host.
func connectionName(cfg *config.Config, what string) string {
	return what + " " + cfg.AMQP.Prefix + "@" + hostname()
}

// metricsHandler serves reg's metrics at GET /metrics.
func metricsHandler(reg *prometheus.Registry) map[string]http.Handler {
	return map[string]http.Handler{"GET /metrics": promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})}
}

// statusMux serves GET /healthz and /readyz (over checks) and /metrics
// (reg).
func statusMux(reg *prometheus.Registry, logger zerolog.Logger, checks ...httpserver.Check) *http.ServeMux {
	mux := http.NewServeMux()
	httpserver.Health(mux, logger, checks...)
	for pattern, h := range metricsHandler(reg) {
		mux.Handle(pattern, h)
	}
	return mux
}

// activityInterval is how often a process adds its per-minute counts
// (the console's overview) to Postgres.
const activityInterval = 10 * time.Second

// startActivity counts the process's requests or deliveries per minute
// and flushes them every interval (0: activityInterval) until the
// returned function is called, which flushes once more and waits: call
// it before the pool closes.
func startActivity(ctx context.Context, db *store.DB, interval time.Duration, logger zerolog.Logger) (*activity.Counter, func()) {
	c := activity.New(db, cmp.Or(interval, activityInterval), logger.With().Str("component", "activity").Logger())
	// Not ctx: the counts of requests still being served after the stop
	// began are flushed too, at the end.
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(runCtx)
	}()
	return c, func() {
		stop()
		<-done
	}
}
