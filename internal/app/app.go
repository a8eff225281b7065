// Package app wires hookrelay's packages into the receiver and dispatcher
// processes from a validated config. The cmd/* mains only parse flags and
// signals and call it; tests call it to run the real processes in-process.
package app

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/extract"
	"github.com/hookrelay/hookrelay/internal/ingest"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/signature"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"
)

// NewLogger returns the process logger described by cfg, writing to w.
func NewLogger(cfg config.Log, w io.Writer) (zerolog.Logger, error) {
	level, err := zerolog.ParseLevel(cfg.Level)
	if err != nil {
		return zerolog.Nop(), fmt.Errorf("log.level: %w", err)
	}
	if cfg.Format == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339}
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger(), nil
}

// Topology returns the RabbitMQ topology for cfg.
func Topology(cfg *config.Config) amqp.Topology {
	tc := amqp.TopologyConfig{
		Prefix:        cfg.AMQP.Prefix,
		RetryDelays:   cfg.Retry.Backoff,
		DeliveryLimit: cfg.Dispatcher.DeliveryLimit,
	}
	for _, r := range cfg.Routes {
		tc.Routes = append(tc.Routes, amqp.RouteConfig{Name: r.Name, Bindings: r.Bindings})
	}
	return amqp.BuildTopology(tc)
}

// RoutesFor returns a function naming the routes whose bindings match a
// routing key, as the topic exchange will route it.
func RoutesFor(cfg *config.Config) func(routingKey string) []string {
	return func(key string) []string {
		var out []string
		for _, r := range cfg.Routes {
			for _, b := range r.Bindings {
				if amqp.TopicMatch(b, key) {
					out = append(out, r.Name)
					break
				}
			}
		}
		return out
	}
}

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
		x, err := extract.New(ec)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		out = append(out, ingest.Source{Name: s.Name, Verifier: v, Extractor: x, DedupeBody: s.DedupesBody()})
	}
	return out, nil
}

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

// Dialer returns the RabbitMQ dialer for cfg's nodes, with TLS loaded from
// amqp.tls, reporting each connection's node on nodes (nil: nowhere).
func Dialer(cfg *config.Config, nodes *amqp.NodeGauge, logger zerolog.Logger) (*amqp.Dialer, error) {
	t := cfg.AMQP.TLS
	tlsCfg, err := amqp.TLSConfig{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile, ServerName: t.ServerName}.Load()
	if err != nil {
		return nil, fmt.Errorf("amqp.tls: %w", err)
	}
	return amqp.NewDialer(amqp.DialerConfig{URLs: cfg.AMQP.Nodes(), TLS: tlsCfg, Nodes: nodes, Logger: logger})
}

// Ops returns the operator service over db for cfg, reaching the
// dead-letter queues through dialer.
func Ops(cfg *config.Config, db *store.DB, dialer *amqp.Dialer) *ops.Service {
	var routes []string
	for _, r := range cfg.Routes {
		routes = append(routes, r.Name)
	}
	names := amqp.Names{Prefix: cfg.AMQP.Prefix}
	return &ops.Service{
		Store:        db,
		DeadLetters:  deadLetters{amqp.NewDeadLetters(dialer, names, "hookrelay-cli")},
		RoutesFunc:   RoutesFor(cfg),
		Routes:       routes,
		DedupeWindow: cfg.Retention.DedupeWindow,
	}
}

// deadLetters adapts *amqp.DeadLetters to ops.DeadLetters.
type deadLetters struct{ *amqp.DeadLetters }

func (d deadLetters) List(ctx context.Context, route string, limit int) (*ops.DeadLetterList, error) {
	page, err := d.DeadLetters.List(ctx, route, limit)
	if err != nil {
		return nil, err
	}
	items := make([]ops.DeadLetter, len(page.Items))
	for i, it := range page.Items {
		items[i] = ops.DeadLetter(it)
	}
	return &ops.DeadLetterList{Queue: page.Queue, Total: page.Total, Shown: len(items), Items: items}, nil
}
