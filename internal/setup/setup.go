// Package setup builds, from a validated config, what hookrelay's three
// binaries share: their command lines (cobra; see Daemon and Execute), the
// start-up of a daemon (its config and logger), the RabbitMQ topology and dialer, the routes a routing key
// reaches, and the operator service. It runs nothing itself: the daemons'
// wiring is internal/app, which the operator CLI does not need.
package setup

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/store"
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

// Names returns the RabbitMQ names for cfg's prefix.
func Names(cfg *config.Config) amqp.Names { return amqp.Names{Prefix: cfg.AMQP.Prefix} }

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

// RouteNames returns the configured route names, in config order.
func RouteNames(cfg *config.Config) []string {
	var names []string
	for _, r := range cfg.Routes {
		names = append(names, r.Name)
	}
	return names
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
	return &ops.Service{
		Store:        db,
		DeadLetters:  deadLetters{amqp.NewDeadLetters(dialer, Names(cfg), "hookrelay-cli"), Names(cfg)},
		RoutesFunc:   RoutesFor(cfg),
		Routes:       RouteNames(cfg),
		DedupeWindow: cfg.Retention.DedupeWindow,
		RoutePauser:  routePauser(db),
	}
}

// routePauser is db as an ops.RoutePauser; nil without a database (a
// nil *store.DB inside the interface would not read as nil).
func routePauser(db *store.DB) ops.RoutePauser {
	if db == nil {
		return nil
	}
	return db
}

// deadLetters adapts *amqp.DeadLetters to ops.DeadLetters.
type deadLetters struct {
	*amqp.DeadLetters
	names amqp.Names
}

func (d deadLetters) Queue(route string) string { return d.names.DeadQueue(route) }

func (d deadLetters) Scan(ctx context.Context, route string, batch int, visit func([]ops.DeadLetter) ([]bool, bool, error)) (int, error) {
	return d.DeadLetters.Scan(ctx, route, batch, func(infos []amqp.DeadLetterInfo) ([]bool, bool, error) {
		items := make([]ops.DeadLetter, len(infos))
		for i, it := range infos {
			items[i] = ops.DeadLetter{
				EventID: it.EventID, Source: it.Source, EventType: it.EventType, Attempts: it.Attempts,
				LastStatus: it.LastStatus, LastError: it.LastError, FirstAttemptAt: it.FirstAttemptAt,
				LastAttemptAt: it.LastAttemptAt, Reason: it.Reason,
			}
		}
		return visit(items)
	})
}
