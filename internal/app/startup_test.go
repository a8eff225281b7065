package app_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// get answers a GET of url: its status and its JSON body.
func get(c require.TestingT, url string) (int, map[string]string) {
	client := &http.Client{Timeout: time.Second}
	resp, err := client.Get(url)
	require.NoError(c, err)
	defer resp.Body.Close()
	var body map[string]string
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body
}

// Issue 18, item 9: a dispatcher whose broker does not answer at start
// serves /healthz at once (an orchestrator's liveness probe must not
// restart it in a loop) and /readyz says what it waits for; when the
// broker comes back it says so and becomes ready.
func TestDispatcherAnswersHealthWhileTheBrokerIsAway(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	cfg := *h.cfg
	proxy := proxied(t, &cfg.AMQP.URL)
	proxy.Stall() // packets black-holed: each dial waits out its timeout
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	base := "http://" + ln.Addr().String()
	logs := &lockedBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	started := time.Now()
	go func() {
		done <- app.RunDispatcher(ctx, &cfg, app.DispatcherOptions{Listener: ln, Logger: zerolog.New(logs)})
	}()

	status, body := get(t, base+"/healthz")
	require.Equal(t, http.StatusOK, status, "alive from the first moment")
	require.Less(t, time.Since(started), 2*time.Second)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		status, body = get(c, base+"/readyz")
		require.Equal(c, http.StatusServiceUnavailable, status)
		require.Equal(c, map[string]string{"status": "starting", "postgres": "ok", "rabbitmq": "waiting"}, body)
	}, testenv.Scaled(20*time.Second), 50*time.Millisecond, "readyz says what it waits for")
	require.Contains(t, logs.String(), "rabbitmq does not answer; check amqp.url/urls")

	proxy.Resume()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		status, _ := get(c, base+"/readyz")
		require.Equal(c, http.StatusOK, status)
	}, testenv.Scaled(30*time.Second), 50*time.Millisecond, "ready once the broker answers")
	require.Contains(t, logs.String(), "rabbitmq answers now")
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(testenv.Scaled(30 * time.Second)):
		t.Fatal("the dispatcher did not stop")
	}
	require.Contains(t, logs.String(), "dispatcher stopped")
}

// A SIGTERM while the dispatcher waits for its broker stops it cleanly,
// saying so.
func TestDispatcherStopsWhileWaitingForTheBroker(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := closed.Addr().String()
	require.NoError(t, closed.Close()) // nothing listens there now
	cfg := *h.cfg
	cfg.AMQP.URL = "amqp://guest:guest@" + addr + "/"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	base := "http://" + ln.Addr().String()
	logs := &lockedBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- app.RunDispatcher(ctx, &cfg, app.DispatcherOptions{Listener: ln, Logger: zerolog.New(logs)})
	}()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, body := get(c, base+"/readyz")
		require.Equal(c, "waiting", body["rabbitmq"])
	}, testenv.Scaled(20*time.Second), 50*time.Millisecond)
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(testenv.Scaled(10 * time.Second)):
		t.Fatal("the dispatcher did not stop")
	}
	require.Contains(t, logs.String(), "dispatcher stopped while waiting for rabbitmq")
}

// Issue 18, item 10: the receiver's metrics are not on its public
// listener (they name sources, routes and rates), but on
// receiver.metrics_listen, with the health endpoints.
func TestReceiverServesMetricsOffThePublicListener(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.start(app.ReceiverOptions{})
	require.Equal(t, http.StatusOK, h.postSigned("evt_metrics", "invoice.paid").status)
	resp, err := http.Get(h.base + "/metrics")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "no metrics on the public listener")
	status, _ := get(t, h.base+"/healthz")
	require.Equal(t, http.StatusOK, status, "health stays on the public listener")
	require.Contains(t, scrape(t, h.metricsBase), `hookrelay_ingest_requests_total{outcome="accepted",reason="",source="acme"}`)
	status, _ = get(t, h.metricsBase+"/readyz")
	require.Equal(t, http.StatusOK, status)
}
