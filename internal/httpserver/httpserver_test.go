package httpserver

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
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

func TestReadyzAnswersWordsAndLogsTheDetail(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	mux := http.NewServeMux()
	driverErr := errors.New("failed to connect to `user=alice database=billing`: db.internal:6432: dial error")
	Health(mux, zerolog.New(&logs),
		Check{Name: "postgres", Func: func(context.Context) error { return fmt.Errorf("pinging postgres: %w", driverErr) }},
		Check{Name: "rabbitmq", Func: func(context.Context) error {
			return &StateError{State: "blocked", Err: errors.New("connection blocked by amqp.example:5672: low on memory")}
		}},
		Check{Name: "cache", Func: func(context.Context) error { return nil }},
	)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	var body map[string]string
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
	require.Equal(t, map[string]string{"postgres": "unavailable", "rabbitmq": "blocked", "cache": "ok"}, body)
	for _, s := range []string{"alice", "billing", "db.internal", "6432", "amqp.example"} {
		require.NotContains(t, rec.Body.String(), s)
	}

	var lines []map[string]any
	for _, l := range bytes.Split(bytes.TrimSpace(logs.Bytes()), []byte("\n")) {
		var m map[string]any
		require.NoError(t, json.Unmarshal(l, &m))
		lines = append(lines, m)
	}
	require.Len(t, lines, 2, "one warning per failed dependency")
	byDep := map[string]map[string]any{}
	for _, l := range lines {
		require.Equal(t, "warn", l["level"])
		byDep[l["dependency"].(string)] = l
	}
	require.Contains(t, byDep["postgres"]["error"], "db.internal:6432", "the detail goes to the log")
	require.Contains(t, byDep["rabbitmq"]["error"], "low on memory")
}

func TestReadyzAllOK(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	Health(mux, zerolog.Nop(), Check{Name: "postgres", Func: func(context.Context) error { return nil }})
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.JSONEq(t, `{"postgres":"ok"}`, rec.Body.String())
}

// Checks run side by side, each with its own deadline: a dependency that
// hangs does not make the others look down.
func TestReadyzChecksDoNotShareOneDeadline(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	Health(mux, zerolog.Nop(),
		Check{Name: "slow", Func: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }},
		Check{Name: "fast", Func: func(ctx context.Context) error { return ctx.Err() }},
	)
	start := time.Now()
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	require.JSONEq(t, `{"slow":"unavailable","fast":"ok"}`, rec.Body.String())
	require.Less(t, time.Since(start), checkTimeout+time.Second)
}

func TestNewFillsEveryTimeout(t *testing.T) {
	t.Parallel()
	srv := New(http.NotFoundHandler(), Timeouts{Read: 3 * time.Second})
	require.Equal(t, 3*time.Second, srv.ReadTimeout)
	require.Equal(t, 3*time.Second, srv.ReadHeaderTimeout, "headers are part of the request")
	require.Equal(t, DefaultTimeouts.Write, srv.WriteTimeout)
	require.Equal(t, DefaultTimeouts.Idle, srv.IdleTimeout)
}

// A server given to Run without timeouts still gets them, and a body that
// stalls is cut at the read timeout.
func TestRunCutsAStalledBody(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	readErr := make(chan error, 1)
	srv := &http.Server{ReadTimeout: 300 * time.Millisecond, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		readErr <- err
		w.WriteHeader(http.StatusBadRequest)
	})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, ln, srv, 5*time.Second) }()

	conn, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4000\r\n\r\n%s", bytes.Repeat([]byte("a"), 100))
	require.NoError(t, err)
	select {
	case err := <-readErr:
		var ne net.Error
		require.True(t, errors.As(err, &ne) && ne.Timeout(), "the body read ends with a timeout, got %v", err)
	case <-time.After(testenv.Scaled(5 * time.Second)):
		t.Fatal("the stalled body was not cut")
	}
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.NotZero(t, srv.WriteTimeout, "Run bounds what the caller left unbounded")
	require.NotZero(t, srv.IdleTimeout)

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(testenv.Scaled(10 * time.Second)):
		t.Fatal("Run did not return after its context ended")
	}
}
