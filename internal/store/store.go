// Package store is hookrelay's Postgres layer: the pgx pool, every query, the
// embedded migrations and the schema check. Postgres is the source of truth:
// an event is accepted once its row and its outbox row commit together.
package store

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/hookrelay/hookrelay/internal/group"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DB is a pool of Postgres connections with hookrelay's queries.
type DB struct {
	pool         *pgxpool.Pool
	queryTimeout time.Duration
	// lax is a small second pool whose connections commit without waiting
	// for the WAL flush (synchronous_commit off), for the writes whose loss
	// in a crash of Postgres costs at most a duplicate, never an event or
	// an outcome: a delivery's claim and its release (see lax.go).
	lax *pgxpool.Pool
	// claims and records group the dispatcher's delivery writes when
	// GroupDeliveries set them (deliveries_batch.go); nil: each alone.
	claims  *group.Batcher[claimItem, claimOut]
	records *group.Batcher[recordItem, recordOut]
	// outboxHold is how long the outbox rows of new events wait before
	// they are due (HoldOutbox); zero: due at once.
	outboxHold time.Duration
}

// Config configures Open.
type Config struct {
	// URL is the postgres:// connection URL.
	URL string
	// MaxConns is the pool size.
	MaxConns int32
	// ApplicationName shows in pg_stat_activity.
	ApplicationName string
	// QueryTimeout bounds each call of the outbox publisher's and the
	// dispatcher's queries (a claim, a delivery lock, a record), including
	// the wait for a pool connection. Zero means DefaultQueryTimeout.
	QueryTimeout time.Duration
	// GenericPlans makes the connections reuse one plan per prepared
	// statement (plan_cache_mode force_generic_plan) unless the URL sets
	// plan_cache_mode. See genericPlansNote.
	GenericPlans bool
	// TeamFromContext makes each call see the rows of the team its context
	// names (WithTeam), none when it names none; without it the pool sees
	// every team's (TeamAll): the receiver, the dispatcher and the CLI.
	TeamFromContext bool
}

// genericPlansNote: the receiver's and the dispatcher's statements run
// thousands of times a second on tables partitioned by day. Postgres'
// default plan cache replans such a statement at every execution (a plan
// that prunes partitions looks cheaper than one that keeps them all and
// prunes when it runs), which cost more than the statements themselves:
// end to end at 200 events/s, Postgres spent 9.1 s per 4,000 events with
// it and 4.3 s with one generic plan per statement, which prunes the
// partitions when it runs (issue 21).

// DefaultQueryTimeout is the query timeout when Config leaves it zero. The
// calls it bounds touch a handful of rows by primary key or index, and take
// milliseconds on a healthy database; 5s leaves room for a busy one while
// keeping a silent connection far from RabbitMQ's consumer timeout (30 min).
const DefaultQueryTimeout = 5 * time.Second

// Open creates the pool and checks that Postgres answers. It does not check
// the schema; see DB.RequireSchema.
func Open(ctx context.Context, cfg Config) (*DB, error) {
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("parsing database url %s: %w", Redact(cfg.URL), errors.Unwrap(err))
	}
	if cfg.MaxConns > 0 {
		pc.MaxConns = cfg.MaxConns
	}
	if _, set := pc.ConnConfig.RuntimeParams["plan_cache_mode"]; cfg.GenericPlans && !set {
		pc.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	}
	if cfg.ApplicationName != "" {
		pc.ConnConfig.RuntimeParams["application_name"] = cfg.ApplicationName
	}
	if cfg.TeamFromContext {
		setTeamPerCall(pc)
	} else {
		pc.ConnConfig.RuntimeParams["hookrelay.team"] = TeamAll
	}
	// A connection attempt must not hang a request: the receiver answers 503
	// quickly when Postgres is unreachable so the sender retries.
	if pc.ConnConfig.ConnectTimeout == 0 || pc.ConnConfig.ConnectTimeout > 5*time.Second {
		pc.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	// Keepalive and a TCP user timeout: a connection whose peer went silent
	// (a dead host, a dropped route) fails on its own, also where no call
	// with a deadline is waiting on it (an idle pooled connection, the
	// LISTEN connection). See dial.go.
	pc.ConnConfig.DialFunc = dialFunc()
	pc.AfterConnect = serverKeepalive(pc.ConnConfig.RuntimeParams)
	timeout := cfg.QueryTimeout
	if timeout <= 0 {
		timeout = DefaultQueryTimeout
	}
	// The health check of an idle connection at acquire: without a bound,
	// a caller with no deadline of its own would wait on a silent one.
	pc.PingTimeout = timeout
	laxConfig := laxPoolConfig(pc)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("creating pool: %w", err)
	}
	lax, err := pgxpool.NewWithConfig(ctx, laxConfig)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("creating pool: %w", err)
	}
	return &DB{pool: pool, lax: lax, queryTimeout: timeout}, nil
}

// bound gives one call its deadline: the query timeout, or ctx's own if
// that comes first. When a deadline passes mid-query, pgx interrupts the
// socket read (a net.Conn deadline), returns an error wrapping
// context.DeadlineExceeded and closes the connection, which the pool then
// discards: a silent connection costs one failed call, not a hung one.
func (db *DB) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, db.queryTimeout)
}

// rollback ends tx after a failed call. It runs even when ctx is done (the
// failure may be ctx's deadline) but has a deadline of its own.
func (db *DB) rollback(ctx context.Context, tx pgx.Tx) {
	rctx, cancel := db.bound(context.WithoutCancel(ctx))
	defer cancel()
	// The caller returns the error that made it roll back; a failed
	// rollback leaves nothing committed either, and the pool discards a
	// connection whose transaction could not be ended.
	_ = tx.Rollback(rctx)
}

// Close closes every connection of the pool. Connections pgx is tearing down
// after a failed call may take it up to 15s on a silent network; callers
// that must stop sooner bound the wait.
func (db *DB) Close() {
	db.pool.Close()
	db.lax.Close()
}

// Ping checks that Postgres answers a query.
func (db *DB) Ping(ctx context.Context) error {
	if err := db.pool.Ping(ctx); err != nil {
		return fmt.Errorf("pinging postgres: %w", err)
	}
	return nil
}

// Pool exposes the pool for tests and for the LISTEN connection.
func (db *DB) Pool() *pgxpool.Pool { return db.pool }

// InTx runs fn in a transaction, committing when fn returns nil and rolling
// back otherwise.
func (db *DB) InTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("beginning transaction: %w", err)
	}
	if err := fn(tx); err != nil {
		db.rollback(ctx, tx)
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("committing transaction: %w", err)
	}
	return nil
}

// Redact returns a connection URL with its password replaced, for logs and
// errors.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable url)"
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}
