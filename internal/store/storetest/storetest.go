// Package storetest gives each test its own Postgres database, cloned from a
// template that the embedded migrations built once (the clone is a file copy,
// far faster than migrating every time).
package storetest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/jackc/pgx/v5"
)

// NewDatabase creates a migrated database for t, drops it when t ends, and
// returns its URL. It skips or fails t per testenv.Require when Postgres does
// not answer.
func NewDatabase(t testing.TB) string {
	t.Helper()
	admin := testenv.AdminDatabaseURL()
	testenv.Require(t, "postgres", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			return err
		}
		return conn.Close(ctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	tpl, err := ensureTemplate(ctx, admin)
	if err != nil {
		t.Fatalf("preparing template database: %v", err)
	}
	name := "hookrelay_test_" + randomHex(6)
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("connecting to postgres: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, tpl)); err != nil {
		t.Fatalf("creating test database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Errorf("connecting to drop %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name)); err != nil {
			t.Errorf("dropping %s: %v", name, err)
		}
	})
	// The template may be from another day: its day partitions end two
	// days after that day.
	if err := store.EnsurePartitionsAt(ctx, WithDatabase(admin, name), time.Now()); err != nil {
		t.Fatalf("creating day partitions in %s: %v", name, err)
	}
	return WithDatabase(admin, name)
}

// Open returns a store.DB on a fresh database (see NewDatabase), closed when
// t ends, with the database URL.
func Open(t testing.TB) (*store.DB, string) {
	t.Helper()
	dbURL := NewDatabase(t)
	db, err := store.Open(context.Background(), store.Config{URL: dbURL, MaxConns: 10, ApplicationName: "hookrelay-test"})
	if err != nil {
		t.Fatalf("opening store: %v", err)
	}
	t.Cleanup(db.Close)
	return db, dbURL
}

// WithDatabase returns rawURL pointing at database name.
func WithDatabase(rawURL, name string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		panic(err)
	}
	u.Path = "/" + name
	return u.String()
}

// ensureTemplate builds, once per set of migrations, a database that later
// tests clone. Parallel test binaries serialise on an advisory lock.
func ensureTemplate(ctx context.Context, admin string) (string, error) {
	name := "hookrelay_tpl_" + migrationsHash()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtext('hookrelay_test_template'))`); err != nil {
		return "", fmt.Errorf("locking: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(hashtext('hookrelay_test_template'))`) //nolint:errcheck // closing the connection unlocks too

	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		return name, nil
	}
	// Build under a temporary name and rename at the end, so a run that died
	// half-way never leaves a template that looks complete.
	building := name + "_building"
	if _, err := conn.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", building)); err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s", building)); err != nil {
		return "", err
	}
	if _, err := store.Migrate(ctx, WithDatabase(admin, building)); err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s RENAME TO %s", building, name)); err != nil {
		return "", err
	}
	return name, nil
}

func migrationsHash() string {
	h := sha256.New()
	err := fs.WalkDir(store.MigrationsFS(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(store.MigrationsFS(), path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		panic(err)
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// AppRole is the role the tests' processes log in as where row-level
// security matters: it owns nothing (store.EnsureAppRole).
const AppRole = "hookrelay_test_app"

// AppURL makes AppRole the application role of the database at dbURL
// (created once per cluster, granted per database, as hookrelay migrate
// does with database.migrate_url set) and returns dbURL logging in as it.
func AppURL(t testing.TB, dbURL string) string {
	t.Helper()
	appURL := AppURLOf(dbURL)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := store.EnsureAppRole(ctx, dbURL, appURL); err != nil {
		t.Fatalf("making the application role: %v", err)
	}
	return appURL
}

// AppURLOf is dbURL logging in as AppRole, granting nothing.
func AppURLOf(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		panic(err)
	}
	u.User = url.UserPassword(AppRole, AppRole)
	return u.String()
}
