package app_test

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
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const testAdminToken = "admin-token-0123456789"

// readListener tells when the server has read a given number of bytes from
// one accepted connection, so a test knows its request is being served
// (not still waiting in the accept queue) before it acts.
type readListener struct {
	net.Listener
	want int64
	read chan struct{} // closed once a connection has delivered want bytes
}

func newReadListener(t *testing.T, want int) *readListener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return &readListener{Listener: ln, want: int64(want), read: make(chan struct{})}
}

func (l *readListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, l: l}, nil
}

type countingConn struct {
	net.Conn
	l    *readListener
	n    atomic.Int64
	done atomic.Bool
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.n.Add(int64(n)) >= c.l.want && c.done.CompareAndSwap(false, true) {
		close(c.l.read)
	}
	return n, err
}

// stalledBytes is a request to addr that announces a 4,000-byte body and
// carries only its first 100 bytes.
func stalledBytes(t *testing.T, addr, path string, header http.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 4000\r\n", path, addr)
	require.NoError(t, header.Write(&buf))
	buf.WriteString("\r\n")
	const start = `{"id":"evt_slow","type":"invoice.paid","pad":"`
	buf.WriteString(start + strings.Repeat("x", 100-len(start)))
	return buf.Bytes()
}

// stalledRequest sends stalledBytes to addr and stops, keeping the
// connection open.
func stalledRequest(t *testing.T, addr, path string, header http.Header) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	_, err = conn.Write(stalledBytes(t, addr, path, header))
	require.NoError(t, err)
	return conn
}

// requireCut waits for the server to end a stalled request: an answer other
// than 200, or a closed connection, within limit.
func requireCut(t *testing.T, conn net.Conn, limit time.Duration) {
	t.Helper()
	start := time.Now()
	require.NoError(t, conn.SetReadDeadline(start.Add(limit)))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("a request that announced 4000 bytes and sent 100 was still open after %s", limit)
	}
	if err == nil {
		resp.Body.Close()
		require.NotEqual(t, http.StatusOK, resp.StatusCode, "a body that never arrived must not be accepted")
	}
	t.Logf("stalled request ended after %s (answer: %v, err: %v)", time.Since(start).Round(time.Millisecond), status(resp, err), err)
}

func status(resp *http.Response, err error) string {
	if err != nil {
		return "none"
	}
	return resp.Status
}

// requireIdleClosed sends one complete request on a fresh keep-alive
// connection to addr, reads the answer, and then waits for the server to
// close the idle connection within limit.
func requireIdleClosed(t *testing.T, addr, path string, header http.Header, limit time.Duration) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	require.NoError(t, err)
	req.Header = header
	require.NoError(t, req.Write(conn))
	br := bufio.NewReader(conn)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	resp, err := http.ReadResponse(br, req)
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	require.False(t, resp.Close, "the server must offer keep-alive for this test to mean anything")

	start := time.Now()
	require.NoError(t, conn.SetReadDeadline(start.Add(limit)))
	_, err = br.ReadByte()
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("an idle keep-alive connection was still open after %s", limit)
	}
	require.ErrorIs(t, err, io.EOF, "the server closes the idle connection")
	t.Logf("idle connection closed after %s", time.Since(start).Round(time.Millisecond))
}

// Item 3: a sender that announces a body and stalls is cut within
// read_timeout, gets no 200, and nothing is stored; the admin API, served by
// the same process, cuts it too.
func TestStalledBodyIsCutWithinReadTimeout(t *testing.T) {
	t.Parallel()
	t.Run("receiver", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		h.cfg.Receiver.ReadTimeout = time.Second
		h.cfg.Receiver.WriteTimeout = 10 * time.Second
		h.start(app.ReceiverOptions{})
		conn := stalledRequest(t, strings.TrimPrefix(h.base, "http://"), "/webhooks/acme",
			http.Header{"X-Acme-Signature": {sign(acmeSecret, []byte("whatever"))}})
		requireCut(t, conn, h.cfg.Receiver.ReadTimeout+3*time.Second)
		count, err := h.db.EventCount(context.Background(), "")
		require.NoError(t, err)
		require.Zero(t, count, "nothing is stored from a body that never arrived")
	})
	t.Run("admin", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		h.cfg.Admin = config.Admin{Token: testAdminToken, ReadTimeout: time.Second, WriteTimeout: 10 * time.Second, IdleTimeout: time.Minute}
		aln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		h.start(app.ReceiverOptions{AdminListener: aln})
		conn := stalledRequest(t, aln.Addr().String(), "/api/v1/replay",
			http.Header{"Authorization": {"Bearer " + testAdminToken}})
		requireCut(t, conn, h.cfg.Admin.ReadTimeout+3*time.Second)
	})
}

// Item 3: idle keep-alive connections are closed after idle_timeout on all
// three listeners.
func TestIdleKeepAliveConnectionsAreClosed(t *testing.T) {
	t.Parallel()
	const idle = time.Second
	limit := idle + 3*time.Second
	t.Run("receiver", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		h.cfg.Receiver.IdleTimeout = idle
		h.start(app.ReceiverOptions{})
		requireIdleClosed(t, strings.TrimPrefix(h.base, "http://"), "/healthz", http.Header{}, limit)
	})
	t.Run("admin", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		h.cfg.Admin = config.Admin{Token: testAdminToken, ReadTimeout: 10 * time.Second, WriteTimeout: time.Minute, IdleTimeout: idle}
		aln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		h.start(app.ReceiverOptions{AdminListener: aln})
		requireIdleClosed(t, aln.Addr().String(), "/api/v1/events?limit=1",
			http.Header{"Authorization": {"Bearer " + testAdminToken}}, limit)
	})
	t.Run("dispatcher", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		h.cfg.Dispatcher.IdleTimeout = idle
		h.startDispatcher(app.DispatcherOptions{})
		requireIdleClosed(t, strings.TrimPrefix(h.dispatcherBase, "http://"), "/healthz", http.Header{}, limit)
	})
}

// Item 3: SIGTERM while a sender stalls mid-body: the receiver still stops
// cleanly within receiver.shutdown_timeout.
func TestShutdownWithinTimeoutWhileBodyStalls(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.cfg.Receiver.ReadTimeout = time.Second
	h.cfg.Receiver.WriteTimeout = 10 * time.Second
	h.cfg.Receiver.ShutdownTimeout = 3 * time.Second

	// Act only once the server has read the whole stalled request: it is
	// then being served, not waiting in the accept queue.
	ln := newReadListener(t, 0)
	sig := http.Header{"X-Acme-Signature": {sign(acmeSecret, []byte("whatever"))}}
	ln.want = int64(len(stalledBytes(t, ln.Addr().String(), "/webhooks/acme", sig)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	opts := app.ReceiverOptions{Listener: ln, Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)}
	go func() { done <- app.RunReceiver(ctx, h.cfg, opts) }()
	stalledRequest(t, ln.Addr().String(), "/webhooks/acme", sig)
	select {
	case <-ln.read:
	case <-time.After(testenv.Scaled(10 * time.Second)):
		t.Fatal("the receiver never read the stalled request")
	}

	cancel()
	start := time.Now()
	select {
	case err := <-done:
		require.NoError(t, err, "shutdown must finish cleanly while a sender stalls")
		require.LessOrEqual(t, time.Since(start), h.cfg.Receiver.ShutdownTimeout)
	case <-time.After(testenv.Scaled(h.cfg.Receiver.ShutdownTimeout + 10*time.Second)):
		t.Fatalf("the receiver did not stop within %s of its shutdown timeout", 10*time.Second)
	}
}

// Item 4: /readyz on the public listener names the failing dependency and
// nothing of the driver's error: no host, port, user or database.
func TestReadyzHidesDriverErrors(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	proxy := proxied(t, &h.cfg.Database.URL)
	h.start(app.ReceiverOptions{})
	u, err := url.Parse(h.cfg.Database.URL)
	require.NoError(t, err)
	// The user last: it is "postgres" here, which "pinging postgres" would
	// match before a real leak shows.
	secretish := []string{strings.TrimPrefix(u.Path, "/"), u.Port(), u.Hostname(), u.User.Username()}

	get := func(t tb) (int, map[string]string) {
		t.Helper()
		resp, err := http.Get(h.base + "/readyz")
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		var body map[string]string
		require.NoError(t, json.Unmarshal(raw, &body), "%s", raw)
		return resp.StatusCode, body
	}
	waitReady(t, h.base)
	proxy.Cut()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		status, _ := get(c)
		require.Equal(c, http.StatusServiceUnavailable, status)
	}, testenv.Scaled(10*time.Second), 20*time.Millisecond)
	// Several answers: the first failure may be a broken pooled connection,
	// the next ones are connection attempts, whose errors name everything.
	var bodies []map[string]string
	for range 5 {
		status, body := get(t)
		require.Equal(t, http.StatusServiceUnavailable, status)
		bodies = append(bodies, body)
	}
	for _, s := range secretish {
		for _, body := range bodies {
			for _, v := range body {
				require.NotContains(t, v, s, "no connection detail on the public listener")
			}
		}
	}
	for _, body := range bodies {
		require.Equal(t, map[string]string{"postgres": "unavailable", "rabbitmq": "ok"}, body)
	}
}

// Item 12: the admin address already in use stops the receiver within
// seconds with an error naming the address, and its webhook listener (with
// /healthz) is closed, not left answering.
func TestReceiverStopsWhenAdminAddressInUse(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	h.cfg.Admin = config.Admin{Listen: taken.Addr().String(), Token: testAdminToken}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // ends a receiver that hangs, after the test failed
	done := make(chan error, 1)
	go func() {
		done <- app.RunReceiver(ctx, h.cfg, app.ReceiverOptions{Listener: ln, Logger: zerolog.New(zerolog.NewTestWriter(t))})
	}()
	select {
	case err := <-done:
		require.Error(t, err)
		require.Contains(t, err.Error(), taken.Addr().String())
		require.Contains(t, err.Error(), "address already in use")
	case <-time.After(testenv.Scaled(5 * time.Second)):
		t.Fatal("the receiver was still running 5s after its admin listener failed")
	}
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get("http://" + ln.Addr().String() + "/healthz")
	if err == nil {
		resp.Body.Close()
	}
	require.ErrorIs(t, err, syscall.ECONNREFUSED, "/healthz must not answer once the receiver gave up")
}

// Item 12, from outside: the built receiver binary exits non-zero within
// seconds and says which address is in use.
func TestReceiverBinaryExitsWhenAdminAddressInUse(t *testing.T) {
	t.Parallel()
	dbURL := storetest.NewDatabase(t)
	amqptest.Dial(t)
	prefix := amqptest.Prefix(t)
	cfg := &config.Config{AMQP: config.AMQP{Prefix: prefix}, Retry: config.Retry{Backoff: []time.Duration{time.Second}}}
	amqptest.DeleteTopology(t, setup.Topology(cfg))

	dir := t.TempDir()
	bin := filepath.Join(testenv.Binaries(t), "receiver")

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	listen := free.Addr().String()
	require.NoError(t, free.Close())
	path := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(fmt.Sprintf(`
database: {url: %q}
amqp: {url: %q, prefix: %q}
receiver: {listen: %q, metrics_listen: ""}
admin: {listen: %q, token: %q}
retry: {backoff: [1s]}
`, dbURL, testenv.AMQPURL(), prefix, listen, taken.Addr().String(), testAdminToken)), 0o600))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--config", path)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	require.NoError(t, ctx.Err(), "the receiver was still running after 10s; stderr:\n%s", stderr.String())
	var exitErr *exec.ExitError
	require.True(t, errors.As(err, &exitErr), "want a non-zero exit, got %v; stderr:\n%s", err, stderr.String())
	require.NotEqual(t, 0, exitErr.ExitCode())
	require.Contains(t, stderr.String(), taken.Addr().String(), "stderr names the address")
	require.Contains(t, stderr.String(), "address already in use")
}

// Item 12, the same review for the dispatcher: its listen address in use
// stops it within seconds, naming the address.
func TestDispatcherStopsWhenListenAddressInUse(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	h.cfg.Dispatcher.Listen = taken.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() {
		done <- app.RunDispatcher(ctx, h.cfg, app.DispatcherOptions{Logger: zerolog.New(zerolog.NewTestWriter(t))})
	}()
	select {
	case err := <-done:
		require.ErrorContains(t, err, "dispatcher.listen")
		require.ErrorContains(t, err, taken.Addr().String())
	case <-time.After(testenv.Scaled(5 * time.Second)):
		t.Fatal("the dispatcher was still running 5s after its listener failed")
	}
}

// Item 12: a component that fails once running (here the webhook listener,
// closed under the server) stops the others, admin API included, and
// RunReceiver returns an error naming it.
func TestReceiverStopsWhenAComponentFails(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.cfg.Admin = config.Admin{Token: testAdminToken}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	aln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() {
		done <- app.RunReceiver(ctx, h.cfg, app.ReceiverOptions{Listener: ln, AdminListener: aln, Logger: zerolog.New(zerolog.NewTestWriter(t))})
	}()
	waitReady(t, "http://"+ln.Addr().String())

	require.NoError(t, ln.Close())
	select {
	case err := <-done:
		require.ErrorContains(t, err, "serving http on "+ln.Addr().String())
	case <-time.After(testenv.Scaled(15 * time.Second)):
		t.Fatal("the receiver was still running 15s after its listener failed")
	}
	_, err = net.Dial("tcp", aln.Addr().String())
	require.ErrorIs(t, err, syscall.ECONNREFUSED, "the admin API stopped with it")
}
