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

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DB is a pool of Postgres connections with hookrelay's queries.
type DB struct {
	pool *pgxpool.Pool
}

// Config configures Open.
type Config struct {
	// URL is the postgres:// connection URL.
	URL string
	// MaxConns is the pool size.
	MaxConns int32
	// ApplicationName shows in pg_stat_activity.
	ApplicationName string
}

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
	if cfg.ApplicationName != "" {
		pc.ConnConfig.RuntimeParams["application_name"] = cfg.ApplicationName
	}
	// A connection attempt must not hang a request: the receiver answers 503
	// quickly when Postgres is unreachable so the sender retries.
	if pc.ConnConfig.ConnectTimeout == 0 || pc.ConnConfig.ConnectTimeout > 5*time.Second {
		pc.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("creating pool: %w", err)
	}
	return &DB{pool: pool}, nil
}

// Close closes every connection of the pool.
func (db *DB) Close() { db.pool.Close() }

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
		// The rollback error adds nothing: fn's error is the cause, and a
		// failed rollback leaves nothing committed either.
		_ = tx.Rollback(context.WithoutCancel(ctx))
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
