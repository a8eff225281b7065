package store

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"time"

	"github.com/golang-migrate/migrate/v4"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

//go:embed migrations/*.sql
var migrationsFS embed.FS

// MigrationsFS returns the embedded migration files.
func MigrationsFS() fs.FS {
	sub, err := fs.Sub(migrationsFS, "migrations")
	if err != nil {
		panic(err) // the embed pattern guarantees the folder
	}
	return sub
}

var migrationName = regexp.MustCompile(`^(\d+)_.*\.up\.sql$`)

// LatestVersion is the highest embedded migration version: the schema this
// binary needs.
func LatestVersion() uint {
	entries, err := fs.ReadDir(MigrationsFS(), ".")
	if err != nil {
		panic(err)
	}
	var versions []int
	for _, e := range entries {
		if m := migrationName.FindStringSubmatch(e.Name()); m != nil {
			v, _ := strconv.Atoi(m[1]) // the regexp admits digits only
			versions = append(versions, v)
		}
	}
	sort.Ints(versions)
	if len(versions) == 0 {
		return 0
	}
	return uint(versions[len(versions)-1])
}

// Migrate applies every embedded migration that the database at url lacks.
// Two processes may run it at once: golang-migrate holds a Postgres advisory
// lock while it works, and the second finds nothing left to do. It returns
// the version the schema is at afterwards.
func Migrate(ctx context.Context, url string) (uint, error) {
	m, closeFn, err := newMigrator(url)
	if err != nil {
		return 0, err
	}
	defer closeFn()
	if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return 0, fmt.Errorf("applying migrations: %w", err)
	}
	v, dirty, err := m.Version()
	if err != nil {
		return 0, fmt.Errorf("reading schema version: %w", err)
	}
	if dirty {
		return v, fmt.Errorf("schema version %d is dirty: a migration failed half-way; fix it by hand, then force the version", v)
	}
	if v >= partitionedSince {
		if err := EnsurePartitionsAt(ctx, url, time.Now()); err != nil {
			return v, err
		}
	}
	return v, nil
}

// partitionedSince is the schema version that made events, deliveries and
// attempts partitioned by day (0021).
const partitionedSince = 21

func newMigrator(url string) (*migrate.Migrate, func(), error) {
	cc, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing database url %s: %w", Redact(url), errors.Unwrap(err))
	}
	// A migration that reads or moves rows sees them all, also as an owner
	// that is not a superuser: the policies are forced (migration 22).
	cc.RuntimeParams["hookrelay.team"] = TeamAll
	sqlDB := stdlib.OpenDB(*cc)
	driver, err := migratepgx.WithInstance(sqlDB, &migratepgx.Config{})
	if err != nil {
		_ = sqlDB.Close()
		return nil, nil, fmt.Errorf("connecting for migrations: %w", err)
	}
	src, err := iofs.New(MigrationsFS(), ".")
	if err != nil {
		_ = sqlDB.Close()
		return nil, nil, fmt.Errorf("reading embedded migrations: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "postgres", driver)
	if err != nil {
		_ = sqlDB.Close()
		return nil, nil, fmt.Errorf("preparing migrations: %w", err)
	}
	return m, func() {
		_, _ = m.Close()
		_ = sqlDB.Close()
	}, nil
}

// ErrSchemaBehind is returned by RequireSchema when the database lacks
// migrations this binary needs.
var ErrSchemaBehind = errors.New("database schema is behind")

// RequireSchema checks that the database is at LatestVersion or newer and
// not dirty. A database that is behind gives ErrSchemaBehind with the command
// that fixes it.
func (db *DB) RequireSchema(ctx context.Context) error {
	want := LatestVersion()
	var (
		version int64
		dirty   bool
	)
	err := db.pool.QueryRow(ctx, `SELECT version, dirty FROM schema_migrations LIMIT 1`).Scan(&version, &dirty)
	switch {
	case errors.Is(err, pgx.ErrNoRows) || isUndefinedTable(err):
		return fmt.Errorf("%w: no migrations applied, this binary needs version %d: run `hookrelay migrate`", ErrSchemaBehind, want)
	case err != nil:
		return fmt.Errorf("reading schema version: %w", err)
	case dirty:
		return fmt.Errorf("schema version %d is dirty: a migration failed half-way", version)
	case uint(version) < want:
		return fmt.Errorf("%w: at version %d, this binary needs %d: run `hookrelay migrate`", ErrSchemaBehind, version, want)
	}
	// A newer schema is fine: migrations expand before they contract, so a
	// binary one release behind keeps working during a rolling deploy.
	return nil
}
