package bench

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/jackc/pgx/v5"
)

// pgSettings are the Postgres settings the numbers depend on, reported
// with every run: checkpoints and WAL shape write stalls (a checkpoint
// flushes dirty pages, and the first change of each page after it writes
// the whole page to the WAL), and synchronous_commit and fsync decide
// whether a commit waits for the disk.
var pgSettings = []string{
	"synchronous_commit", "fsync", "full_page_writes", "wal_level", "wal_compression",
	"checkpoint_timeout", "checkpoint_completion_target", "max_wal_size", "shared_buffers",
	"autovacuum", "max_connections",
}

// pgInfo is what the report says about Postgres.
type pgInfo struct {
	Version  string            `json:"version"`
	Settings map[string]string `json:"settings"`
	// postmaster is the server's main process, found as the parent of our
	// backend; 0 when Postgres is not on this machine.
	postmaster int
	versionNum int
}

func connect(ctx context.Context, dbURL string) (*pgx.Conn, error) {
	cc, err := pgx.ParseConfig(dbURL)
	if err != nil {
		return nil, fmt.Errorf("parsing database url %s: invalid", store.Redact(dbURL))
	}
	cc.ConnectTimeout = 10 * time.Second
	cc.RuntimeParams["application_name"] = "hookrelay-bench"
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", store.Redact(dbURL), err)
	}
	return conn, nil
}

func readPGInfo(ctx context.Context, conn *pgx.Conn) (info pgInfo, err error) {
	info = pgInfo{Settings: map[string]string{}}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := conn.QueryRow(ctx, `SHOW server_version`).Scan(&info.Version); err != nil {
		return pgInfo{}, fmt.Errorf("reading server version: %w", err)
	}
	for _, s := range pgSettings {
		var v string
		if err := conn.QueryRow(ctx, "SHOW "+s).Scan(&v); err != nil {
			return pgInfo{}, fmt.Errorf("reading setting %s: %w", s, err)
		}
		info.Settings[s] = v
	}
	var num string
	if err := conn.QueryRow(ctx, `SHOW server_version_num`).Scan(&num); err != nil {
		return pgInfo{}, fmt.Errorf("reading server version: %w", err)
	}
	if info.versionNum, err = strconv.Atoi(num); err != nil {
		return pgInfo{}, fmt.Errorf("reading server version: %q: %w", num, err)
	}
	var backend int
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		return pgInfo{}, fmt.Errorf("reading backend pid: %w", err)
	}
	if st, err := readPidStat(backend); err == nil {
		info.postmaster = st.PPID
	}
	return info, nil
}

// withDatabase returns dbURL with another database name.
func withDatabase(dbURL, name string) (string, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "", fmt.Errorf("parsing database url %s: invalid", store.Redact(dbURL))
	}
	u.Path = "/" + name
	return u.String(), nil
}

// createDatabase creates the database name.
func createDatabase(ctx context.Context, admin *pgx.Conn, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("creating database %s: %w", name, err)
	}
	return nil
}

// migrateDatabase applies hookrelay's migrations to dbURL.
func migrateDatabase(ctx context.Context, dbURL string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := store.Migrate(ctx, dbURL); err != nil {
		return fmt.Errorf("migrating %s: %w", store.Redact(dbURL), err)
	}
	return nil
}

// dropDatabase drops name, closing whatever connections are left.
func dropDatabase(ctx context.Context, admin *pgx.Conn, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("dropping database %s: %w", name, err)
	}
	return nil
}

// countRows returns the number of rows of table (events, outbox).
func countRows(ctx context.Context, conn *pgx.Conn, table string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var n int64
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{table}.Sanitize()).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting %s: %w", table, err)
	}
	return n, nil
}

// pgActivity is the server's WAL position and checkpoint count: their
// deltas over a phase say how much WAL each event cost and whether a
// checkpoint (the usual cause of a write stall) ran. Both are server-wide,
// so other databases' work on the same server counts too.
type pgActivity struct {
	wal         uint64
	checkpoints int64
}

func readPGActivity(ctx context.Context, conn *pgx.Conn, versionNum int) (pgActivity, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var lsn string
	var a pgActivity
	// Postgres 17 moved the checkpoint counts to pg_stat_checkpointer.
	q := `SELECT pg_current_wal_lsn()::text, checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter`
	if versionNum >= 170000 {
		q = `SELECT pg_current_wal_lsn()::text, num_timed + num_requested FROM pg_stat_checkpointer`
	}
	if err := conn.QueryRow(ctx, q).Scan(&lsn, &a.checkpoints); err != nil {
		return pgActivity{}, fmt.Errorf("reading WAL position and checkpoints: %w", err)
	}
	var err error
	if a.wal, err = parseLSN(lsn); err != nil {
		return pgActivity{}, err
	}
	return a, nil
}

// parseLSN reads a pg_lsn ("16/B374D848": two 32-bit hex halves) as a byte
// position in the WAL.
func parseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, fmt.Errorf("WAL position %q is not X/Y", s)
	}
	h, err := strconv.ParseUint(hi, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("WAL position %q: %w", s, err)
	}
	l, err := strconv.ParseUint(lo, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("WAL position %q: %w", s, err)
	}
	return h<<32 | l, nil
}

// deliveriesRecorded returns how many of the events ids the relay's
// database records as delivered to route, and how many of those took more
// than one attempt. The deliveries table and its states are the relay's
// documented source of truth (DESIGN.md).
func deliveriesRecorded(ctx context.Context, conn *pgx.Conn, route string, ids []string) (delivered, retried int, err error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = conn.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE state = 'delivered'),
		       count(*) FILTER (WHERE state = 'delivered' AND attempts > 1)
		FROM deliveries WHERE route = $1 AND event_id = ANY($2::uuid[])`,
		route, ids).Scan(&delivered, &retried)
	if err != nil {
		return 0, 0, fmt.Errorf("reading the relay's delivery records: %w", err)
	}
	return delivered, retried, nil
}
