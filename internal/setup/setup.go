// Package setup builds, from a validated config, what hookrelay's three
// binaries share: the start-up of a daemon (its command line, config and
// logger), the RabbitMQ topology and dialer, the routes a routing key
// reaches, and the operator service. It runs nothing itself: the daemons'
// wiring is internal/app, which the operator CLI does not need.
package setup

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/rs/zerolog"
)

// UsageError is a command line that cannot be parsed; the flag package
// has already said so, with the usage. A binary exits with status 2.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// ConfigError is a config that cannot be loaded or is invalid; its
// message names each key and its problem. A binary exits with status 2.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// Daemon is the start-up the receiver and the dispatcher share. It parses
// args, which take one flag, --config PATH (default $HOOKRELAY_CONFIG or
// config.yaml); --help prints the usage to stderr and returns
// flag.ErrHelp, and changes nothing. It then loads and validates the
// config (the environment from lookupEnv overrides the file) and builds the
// logger, which writes to stderr. A bad flag is a *UsageError, a bad config
// a *ConfigError.
func Daemon(name string, args []string, lookupEnv config.LookupEnvFunc, stderr io.Writer) (*config.Config, zerolog.Logger, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "config file (default $HOOKRELAY_CONFIG or config.yaml)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, zerolog.Nop(), err
		}
		return nil, zerolog.Nop(), &UsageError{err}
	}
	cfg, err := config.Load(config.Path(*configPath, lookupEnv), lookupEnv)
	if err != nil {
		return nil, zerolog.Nop(), &ConfigError{err}
	}
	logger, err := NewLogger(cfg.Log, stderr)
	if err != nil {
		return nil, zerolog.Nop(), &ConfigError{err}
	}
	return cfg, logger, nil
}

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
		DeadLetters:  deadLetters{amqp.NewDeadLetters(dialer, Names(cfg), "hookrelay-cli")},
		RoutesFunc:   RoutesFor(cfg),
		Routes:       RouteNames(cfg),
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
