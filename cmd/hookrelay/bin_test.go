package main

// Tests through the built binaries (issue 12): each builds receiver,
// dispatcher and hookrelay once, runs them as an operator would in a new
// shell (a clean environment, a directory of its own) and checks what they
// print, their exit status and what they changed.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveBinaries()
	os.Exit(code)
}

// binDir builds the three binaries (once) and returns their folder. It
// skips under -short.
func binDir(t *testing.T) string {
	t.Helper()
	return testenv.Binaries(t)
}

// shell is a new shell: a clean environment (PATH and HOME only, plus
// what the test sets) and a working directory of its own.
type shell struct {
	t   *testing.T
	bin string
	dir string
	env map[string]string
}

func newShell(t *testing.T) *shell {
	t.Helper()
	return &shell{t: t, bin: binDir(t), dir: t.TempDir(), env: map[string]string{}}
}

// result is what a command printed and its exit status.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

func (s *shell) environ() []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + s.dir}
	for k, v := range s.env {
		env = append(env, k+"="+v)
	}
	return env
}

// run runs one of the binaries and waits for it, at most a minute.
func (s *shell) run(name string, args ...string) result {
	return s.runInput("", name, args...)
}

// runInput is run with stdin (not a terminal).
func (s *shell) runInput(stdin, name string, args ...string) result {
	s.t.Helper()
	return s.runFor(s.t, stdin, name, args...)
}

// runFor is runInput failing t: the test, or EventuallyWithT's collector
// inside a condition (which must not fail the test itself).
func (s *shell) runFor(t require.TestingT, stdin, name string, args ...string) result {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, name), args...)
	cmd.Dir, cmd.Env = s.dir, s.environ()
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := result{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		res.code = exit.ExitCode()
	default:
		require.FailNow(t, fmt.Sprintf("running %s %v: %v", name, args, err))
	}
	require.NoError(t, ctx.Err(), "%s %v did not finish within a minute", name, args)
	return res
}

// proc is a daemon started in the background; its stderr is read line by
// line.
type proc struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan struct{}
	code  int
	mu    sync.Mutex
	log   []string
}

// start starts a daemon, stopped (SIGTERM, then killed) when the test ends.
func (s *shell) start(name string, args ...string) *proc {
	s.t.Helper()
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir, cmd.Env = s.dir, s.environ()
	stderr, err := cmd.StderrPipe()
	require.NoError(s.t, err)
	require.NoError(s.t, cmd.Start())
	p := &proc{cmd: cmd, lines: make(chan string, 1000), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.log = append(p.log, sc.Text())
			p.mu.Unlock()
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		err := cmd.Wait()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			p.code = exit.ExitCode()
		}
		close(p.done)
	}()
	s.t.Cleanup(func() {
		p.stop(s.t)
		if s.t.Failed() {
			s.t.Logf("%s log:\n%s", name, p.output())
		}
	})
	return p
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.log, "\n")
}

// waitLine waits, at most timeout, for a log line containing want, and
// returns it.
func (p *proc) waitLine(t *testing.T, want string, timeout time.Duration) string {
	t.Helper()
	deadline := time.NewTimer(testenv.Scaled(timeout))
	defer deadline.Stop()
	for {
		select {
		case line := <-p.lines:
			if strings.Contains(line, want) {
				return line
			}
		case <-p.done:
			// Lines read before the exit may still be buffered.
			for {
				select {
				case line := <-p.lines:
					if strings.Contains(line, want) {
						return line
					}
				default:
					t.Fatalf("exited (%d) without logging %q:\n%s", p.code, want, p.output())
				}
			}
		case <-deadline.C:
			t.Fatalf("no log line with %q within %s:\n%s", want, timeout, p.output())
		}
	}
}

// exited waits, at most timeout, for the process to exit and returns its
// status.
func (p *proc) exited(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(testenv.Scaled(timeout)):
		t.Fatalf("still running after %s:\n%s", timeout, p.output())
		return 0
	}
}

func (p *proc) stop(t *testing.T) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(testenv.Scaled(40 * time.Second)):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Errorf("did not stop within 40s of SIGINT; killed")
	}
}

// writeConfig writes content as path (relative to the shell's folder) and
// returns the absolute path.
func (s *shell) writeConfig(path, content string) string {
	s.t.Helper()
	abs := filepath.Join(s.dir, path)
	require.NoError(s.t, os.MkdirAll(filepath.Dir(abs), 0o755))
	require.NoError(s.t, os.WriteFile(abs, []byte(content), 0o600))
	return abs
}

// repoConfig is the repository's config.yaml with the database, the
// RabbitMQ prefix and the listeners replaced: what a new operator has,
// with the senders' and routes' secrets given as ${VAR}. The processes and
// the CLI log in as a role that owns nothing (database.url), as the file
// says; migrate as dbURL's owner (database.migrate_url).
func repoConfig(t *testing.T, dbURL, prefix string) string {
	t.Helper()
	return repoConfigAs(t, dbURL, storetest.AppURL(t, dbURL), prefix)
}

// repoConfigAs is repoConfig with database.url appURL, for a database that
// is not migrated (storetest.AppURL grants a migrated one's tables).
func repoConfigAs(t *testing.T, dbURL, appURL, prefix string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "config.yaml"))
	require.NoError(t, err)
	s := string(raw)
	for old, repl := range map[string]string{
		`"postgres://postgres:postgres@127.0.0.1:5432/hookrelay?sslmode=disable"`:           fmt.Sprintf("%q", dbURL),
		`"postgres://hookrelay_app:hookrelay_app@127.0.0.1:5432/hookrelay?sslmode=disable"`: fmt.Sprintf("%q", appURL),
		`"amqp://guest:guest@127.0.0.1:5672/"`:                                              fmt.Sprintf("%q", testenv.AMQPURL()),
		"prefix: hookrelay":                                                                 "prefix: " + prefix,
		`"127.0.0.1:8080"`:                                                                  fmt.Sprintf("%q", freeAddr(t)),
		`"127.0.0.1:8081"`:                                                                  fmt.Sprintf("%q", freeAddr(t)),
		`"127.0.0.1:8083"`:                                                                  fmt.Sprintf("%q", freeAddr(t)),
	} {
		require.Contains(t, s, old, "config.yaml changed: update repoConfig")
		s = strings.ReplaceAll(s, old, repl)
	}
	return s
}

// freeAddr returns a loopback address with a port nothing listens on now
// (the kernel's pick, released at once).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// emptyDatabase creates a database that nothing migrated, dropped when t
// ends, and returns its URL.
func emptyDatabase(t *testing.T) string {
	t.Helper()
	admin := testenv.AdminDatabaseURL()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var conn *pgx.Conn
	testenv.Require(t, "postgres", func() (err error) {
		conn, err = pgx.Connect(ctx, admin)
		return err
	})
	defer conn.Close(ctx)
	name := fmt.Sprintf("hookrelay_empty_%d", time.Now().UnixNano())
	_, err := conn.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Errorf("dropping %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("dropping %s: %v", name, err)
		}
	})
	u, err := url.Parse(admin)
	require.NoError(t, err)
	u.Path = "/" + name
	return u.String()
}

// tables lists the tables of the database at dbURL (schema_migrations
// included): empty for a database nothing migrated.
func tables(t *testing.T, dbURL string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1`)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return names
}

// brokerNames lists the queues, exchanges and policies on the broker whose
// names start with prefix.
func brokerNames(t *testing.T, prefix string) []string {
	t.Helper()
	var names []string
	for _, kind := range []string{"queues", "exchanges", "policies"} {
		var items []struct {
			Name string `json:"name"`
		}
		mgmtGet(t, "/api/"+kind+"/%2F", &items)
		for _, it := range items {
			if strings.HasPrefix(it.Name, prefix+".") {
				names = append(names, kind+":"+it.Name)
			}
		}
	}
	return names
}

// mgmtGet reads a management API path into v.
func mgmtGet(t *testing.T, path string, v any) {
	t.Helper()
	u, err := url.Parse(testenv.ManagementURL())
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodGet, u.Scheme+"://"+u.Host+path, nil)
	require.NoError(t, err)
	pw, _ := u.User.Password()
	req.SetBasicAuth(u.User.Username(), pw)
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, body)
	require.NoError(t, json.Unmarshal(body, v))
}
