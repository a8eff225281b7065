package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
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
}

// chaosSettings are the fault suite's: room for its connections, and no
// fsync (it counts events, not speed).
var chaosSettings = []string{"max_connections=200", "fsync=off", "synchronous_commit=on"}

// findPostgresBin returns the folder of Debian's Postgres server binaries.
func findPostgresBin() (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
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
	return pg.run("pg_ctl", "-D", pg.dir, "-m", "fast", "-w", "-t", "60", "stop")
}

// url is the URL of database db, straight to the server.
func (pg *postgres) url(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", pg.port, db)
}

func (pg *postgres) addr() string { return "127.0.0.1:" + strconv.Itoa(pg.port) }

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
