// Package setup builds, from a validated config, what hookrelay's three
// binaries share: their command lines (cobra; see Daemon and Execute), the
// start-up of a daemon (its config and logger), the RabbitMQ topology and dialer, the routes a routing key
// reaches, and the operator service. It runs nothing itself: the daemons'
// wiring is internal/app, which the operator CLI does not need.
package setup

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ingest"
	"github.com/hookrelay/hookrelay/internal/netguard"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/routeset"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/webhook"
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
		tc.Routes = append(tc.Routes, amqp.RouteConfig{Name: r.Name, Bindings: r.Bindings, Filtered: r.Filter != ""})
	}
	return amqp.BuildTopology(tc)
}

// RoutesFor returns ingest's RouteFunc over cfg's routes: those whose
// bindings match an event's routing key, as the topic exchange routes it,
// and whose filter takes it.
func RoutesFor(cfg *config.Config) func(context.Context, *webhook.Event) ingest.Routing {
	set := routeset.Of(cfg.Routes...)
	return func(ctx context.Context, ev *webhook.Event) ingest.Routing { return RoutingOf(set.Route(ctx, ev)) }
}

// RoutingOf is routeset's answer as ingest takes it.
func RoutingOf(r routeset.Routed) ingest.Routing {
	out := ingest.Routing{Routes: r.Routes, Addressed: r.Addressed, Filtered: r.Filtered}
	for _, f := range r.Failed {
		out.Failed = append(out.Failed, ingest.RuleFailure(f))
	}
	return out
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
// dead-letter queues and the route queues' depths through dialer, and a
// function that closes its broker connections. connectionName names them
// in the management UI.
func Ops(cfg *config.Config, db *store.DB, dialer *amqp.Dialer, connectionName string, routes func() *routeset.Set) (*ops.Service, func(), error) {
	keyring, err := routeset.NewKeyring(cfg.Secrets.Key, cfg.Secrets.PreviousKeys)
	if err != nil {
		return nil, nil, err
	}
	guard, err := Guard(cfg)
	if err != nil {
		return nil, nil, err
	}
	names := Names(cfg)
	inspector := amqp.NewInspector(dialer, connectionName)
	svc := &ops.Service{
		Guard:        guard,
		Store:        db,
		DeadLetters:  deadLetters{amqp.NewDeadLetters(dialer, names, connectionName), names},
		RoutesNow:    routes,
		QueueOf:      names.RouteQueue,
		Config:       cfg,
		Keyring:      keyring,
		Broker:       broker{inspector},
		DedupeWindow: cfg.Retention.DedupeWindow,
	}
	return svc, func() { _ = inspector.Close() }, nil // questions' connection: nothing to flush
}

// Guard returns the guard of teams' run-time routes: it refuses the
// relay's own side (and this machine's addresses) but for
// team_routes.allowed_networks.
func Guard(cfg *config.Config) (*netguard.Guard, error) {
	own, err := netguard.OwnAddrs()
	if err != nil {
		return nil, err
	}
	return netguard.New(cfg.AllowedNetworks(), own...), nil
}

// broker adapts *amqp.Inspector to ops.Broker.
type broker struct{ in *amqp.Inspector }

func (b broker) QueueStats(ctx context.Context, queue string) (int, int, error) {
	q, err := b.in.Queue(ctx, queue)
	return q.Ready, q.Consumers, err
}

// deadLetters is *amqp.DeadLetters as ops.DeadLetters, naming the
// queues by names.
type deadLetters struct {
	*amqp.DeadLetters
	names amqp.Names
}

func (d deadLetters) Queue(route string) string { return d.names.DeadQueue(route) }

// OpenOps opens cfg's database (its schema checked current) and returns
// the operator service over it and the broker, and a function that
// closes both. The CLI reaches Postgres only through it.
func OpenOps(ctx context.Context, cfg *config.Config, connectionName string) (*ops.Service, func(), error) {
	db, err := store.Open(ctx, store.Config{URL: cfg.Database.URL, MaxConns: cfg.Database.MaxConns, ApplicationName: connectionName, QueryTimeout: cfg.Database.QueryTimeout})
	if err != nil {
		return nil, nil, err
	}
	if err := db.RequireSchema(ctx); err != nil {
		db.Close()
		return nil, nil, err
	}
	// The CLI sees every team: it refuses only where the processes do.
	if _, err := db.RequireIsolation(ctx); err != nil {
		db.Close()
		return nil, nil, err
	}
	dialer, err := Dialer(cfg, nil, zerolog.Nop())
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	keyring, err := routeset.NewKeyring(cfg.Secrets.Key, cfg.Secrets.PreviousKeys)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	// The routes as they are now: a command is short.
	follower := routeset.NewFollower(cfg, db, keyring, zerolog.Nop())
	if err := follower.Load(ctx); err != nil {
		db.Close()
		return nil, nil, err
	}
	svc, closeBroker, err := Ops(cfg, db, dialer, connectionName, follower.Current)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return svc, func() { closeBroker(); db.Close() }, nil
}

// Migrate applies cfg's database migrations as database.migrate_url's
// role (database.url's when unset) and returns the version it is at. With
// database.migrate_url set, it then creates or checks database.url's role
// (store.EnsureAppRole) and reports it in role.
func Migrate(ctx context.Context, cfg *config.Config) (version uint, role *store.AppRole, err error) {
	owner := cmp.Or(cfg.Database.MigrateURL, cfg.Database.URL)
	if version, err = store.Migrate(ctx, owner); err != nil {
		return version, nil, err
	}
	if cfg.Database.MigrateURL == "" {
		return version, nil, nil
	}
	r, err := store.EnsureAppRole(ctx, owner, cfg.Database.URL)
	if err != nil {
		return version, nil, err
	}
	return version, &r, nil
}

// Declare writes cfg's routes and sources with their teams (the platform
// team when they name none), as every receiver and dispatcher does at
// start.
func Declare(ctx context.Context, cfg *config.Config, db *store.DB) error {
	routes := make([]store.Owned, 0, len(cfg.Routes))
	for _, r := range cfg.Routes {
		routes = append(routes, store.Owned{Name: r.Name, Team: cmp.Or(r.Team, store.PlatformTeam)})
	}
	// The relay's own events (docs/alerts.md): every team may bind them,
	// and its routes receive those about its own routes and jobs only.
	sources := []store.Owned{{Name: store.RelaySource, Team: store.PlatformTeam, Subscribers: []string{"*"}}}
	for _, s := range cfg.Sources {
		sources = append(sources, store.Owned{Name: s.Name, Team: cmp.Or(s.Team, store.PlatformTeam), Subscribers: s.Subscribers})
	}
	return db.Declare(ctx, routes, sources)
}
