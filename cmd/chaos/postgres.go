package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// postgres is a Postgres instance of the fault suite's own: initdb in a
// temporary folder, on a port of its own, so restarting it disturbs
// nothing else on the machine.
type postgres struct {
	bin  string // folder with initdb, pg_ctl
	dir  string
	port int
	log  string
	// settings are the server's -c name=value settings besides the port,
	// listen address and socket folder.
	settings []string
	// running is false once the server was stopped or killed (teardown
	// then leaves it be).
	running bool
}

// chaosSettings are the fault suite's: room for its connections, and no
// fsync (it counts events, not speed).
var chaosSettings = []string{"max_connections=200", "fsync=off", "synchronous_commit=on"}

// findPostgresBin returns the folder of Debian's Postgres server binaries.
func findPostgresBin() (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		// Through a link (/usr/local/bin/pg_ctl here) to the folder
		// that holds the other server tools too (pg_basebackup).
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		return filepath.Dir(p), nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(matches) == 0 {
		return "", fmt.Errorf("no pg_ctl on PATH or under /usr/lib/postgresql (run scripts/services.sh)")
	}
	return filepath.Dir(matches[len(matches)-1]), nil
}

func newPostgres(workDir string, port int) (*postgres, error) {
	bin, err := findPostgresBin()
	if err != nil {
		return nil, err
	}
	pg := &postgres{bin: bin, dir: filepath.Join(workDir, "pgdata"), port: port, log: filepath.Join(workDir, "postgres.log"), settings: chaosSettings}
	if err := os.MkdirAll(pg.dir, 0o700); err != nil {
		return nil, err
	}
	if err := chownToPostgres(workDir, pg.dir); err != nil {
		return nil, err
	}
	if err := pg.run("initdb", "-D", pg.dir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"); err != nil {
		return nil, fmt.Errorf("initdb: %w", err)
	}
	return pg, nil
}

// run runs a Postgres tool, as the postgres OS user when we are root
// (Postgres refuses to run as root).
func (pg *postgres) run(tool string, args ...string) error {
	path := filepath.Join(pg.bin, tool)
	var cmd *exec.Cmd
	if os.Geteuid() == 0 {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	} else {
		cmd = exec.Command(path, args...)
	}
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %v: %w\n%s", tool, args, err, out)
	}
	return nil
}

// start starts the server and waits until it accepts connections.
func (pg *postgres) start() error {
	opts := fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -c unix_socket_directories=%s", pg.port, pg.dir)
	for _, s := range pg.settings {
		opts += " -c " + s
	}
	if err := pg.run("pg_ctl", "-D", pg.dir, "-l", pg.log, "-o", opts, "-w", "-t", "60", "start"); err != nil {
		return err
	}
	pg.running = true
	return pg.waitReady(60 * time.Second)
}

// restart is a fast restart (in-flight transactions are rolled back, every
// connection is closed), as an operator's or a failover's would be.
func (pg *postgres) restart() error {
	if err := pg.run("pg_ctl", "-D", pg.dir, "-m", "fast", "-w", "-t", "60", "stop"); err != nil {
		return err
	}
	return pg.start()
}

// crash stops the server the way a crash would (immediate mode: no
// checkpoint, WAL not yet flushed is lost, recovery at the next start),
// and starts it again.
func (pg *postgres) crash() error {
	if err := pg.run("pg_ctl", "-D", pg.dir, "-m", "immediate", "-w", "-t", "60", "stop"); err != nil {
		return err
	}
	return pg.start()
}

func (pg *postgres) stop() error {
	if !pg.running {
		return nil
	}
	pg.running = false
	return pg.run("pg_ctl", "-D", pg.dir, "-m", "fast", "-w", "-t", "60", "stop")
}

// kill stops the server the way a crashed host would (immediate mode:
// every process gone at once, nothing flushed or checkpointed) and leaves
// it down.
func (pg *postgres) kill() error {
	if err := pg.run("pg_ctl", "-D", pg.dir, "-m", "immediate", "-w", "-t", "60", "stop"); err != nil {
		return err // maybe still running: teardown stops it
	}
	pg.running = false
	return nil
}

// newReplica makes a streaming replica of pg in workDir/name
// (pg_basebackup, which writes standby.signal and primary_conninfo) and
// starts it on port. It does not make it synchronous: see syncStandby.
func (pg *postgres) newReplica(workDir, name string, port int) (*postgres, error) {
	r := &postgres{bin: pg.bin, dir: filepath.Join(workDir, name), port: port, log: filepath.Join(workDir, name+".log"), settings: pg.settings}
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return nil, err
	}
	if err := chownToPostgres(r.dir); err != nil {
		return nil, err
	}
	if err := pg.run("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(pg.port), "-U", "postgres", "-D", r.dir,
		"-R", "-X", "stream", "-c", "fast", "--no-sync"); err != nil {
		return nil, fmt.Errorf("pg_basebackup: %w", err)
	}
	if err := r.start(); err != nil {
		return nil, err
	}
	return r, nil
}

// syncStandby makes every commit on pg wait for a standby's flush
// (synchronous_standby_names, through ALTER SYSTEM so it survives pg's
// restarts) and waits until the standby replicates synchronously. Set on
// the primary only: a promoted replica without it commits alone.
func (pg *postgres) syncStandby(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pg.url("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `ALTER SYSTEM SET synchronous_standby_names = '*'`); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
		return err
	}
	for {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync' AND state = 'streaming'`).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no synchronous standby streaming from port %d: %w", pg.port, ctx.Err())
		case <-time.After(100 * time.Millisecond): // polling the server's view
		}
	}
}

// promote ends a replica's recovery: it becomes a primary and accepts
// writes.
func (pg *postgres) promote() error {
	return pg.run("pg_ctl", "-D", pg.dir, "-w", "-t", "60", "promote")
}

// url is the URL of database db, straight to the server.
func (pg *postgres) url(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", pg.port, db)
}

func (pg *postgres) addr() string { return "127.0.0.1:" + strconv.Itoa(pg.port) }

// failoverURL is the URL of database db that lists hosts in order and
// connects to the first that accepts writes, as a client of a primary and
// its replica does.
func failoverURL(db string, hosts ...string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable&target_session_attrs=read-write", strings.Join(hosts, ","), db)
}

func (pg *postgres) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, pg.url("postgres"))
		if err == nil {
			err = conn.Close(ctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres on port %d not ready after %s: %w (log: %s)", pg.port, timeout, err, pg.log)
		}
		time.Sleep(200 * time.Millisecond) // polling a server start: nothing to wait on
	}
}

func (pg *postgres) createDatabase(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pg.url("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	return err
}

// chownToPostgres hands the folders to the postgres OS user when we run as
// root.
func chownToPostgres(paths ...string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("looking up the postgres user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	for _, p := range paths {
		if err := os.Chown(p, uid, gid); err != nil {
			return err
		}
	}
	return nil
}
