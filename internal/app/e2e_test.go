package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/deliver"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// eventIndex reads n from a body {"id":"evt_<n>",...}.
func eventIndex(body []byte) int {
	var ev struct{ ID string }
	if json.Unmarshal(body, &ev) != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimPrefix(ev.ID, "evt_"))
	if err != nil {
		return -1
	}
	return n
}

// postAll sends every event twice, concurrently, with workers in parallel,
// and returns the event ids by index.
func (h *harness) postAll(n, workers int, eventType func(i int) string) []string {
	h.t.Helper()
	ids := make([]string, n)
	var mu sync.Mutex
	jobs := make(chan int)
	var wg sync.WaitGroup
	var failed atomic.Int32
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				var inner sync.WaitGroup
				for range 2 { // the sender retries at once: a concurrent duplicate
					inner.Add(1)
					go func() {
						defer inner.Done()
						r, err := h.tryPostSigned(fmt.Sprint("evt_", i), eventType(i))
						if err != nil || r.status != http.StatusOK {
							failed.Add(1)
							return
						}
						mu.Lock()
						if ids[i] != "" && ids[i] != r.ID {
							failed.Add(1)
						}
						ids[i] = r.ID
						mu.Unlock()
					}()
				}
				inner.Wait()
			}
		}()
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	require.Zero(h.t, failed.Load(), "every POST got 200 and duplicates the first event's id")
	return ids
}

func TestEndToEndThousandEventsThreeRoutes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.cfg.Retry.Backoff = []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}
	dest := newDestination(t, func(_ http.ResponseWriter, _ *http.Request, body []byte, _ string, prior int) int {
		if eventIndex(body)%10 == 0 && prior < 2 {
			return http.StatusServiceUnavailable // 10% of events fail their first two attempts
		}
		return http.StatusOK
	})
	h.cfg.Routes = []config.Route{
		testRoute("billing", dest.url("billing"), "acme.invoice.*"),
		testRoute("ledger", dest.url("ledger"), "acme.#"),
		testRoute("audit", dest.url("audit"), "*.invoice.paid", "acme.customer.*"),
	}
	amqptestCleanup(t, h)
	types := []string{"invoice.paid", "invoice.created", "customer.created"}
	routesOf := map[string][]string{
		"invoice.paid":     {"billing", "ledger", "audit"},
		"invoice.created":  {"billing", "ledger"},
		"customer.created": {"ledger", "audit"},
	}
	h.start(app.ReceiverOptions{})
	h.startDispatcher(app.DispatcherOptions{})

	const n = 1000
	eventType := func(i int) string { return types[i%len(types)] }
	start := time.Now()
	ids := h.postAll(n, 16, eventType)
	t.Logf("posted %d events twice each in %s", n, time.Since(start))

	want := map[string]int{}
	flakyPairs := 0
	for i, id := range ids {
		for _, r := range routesOf[eventType(i)] {
			want[r+" "+id] = 1
			if i%10 == 0 {
				flakyPairs++
			}
		}
	}
	dest.waitFor(3*time.Minute, "every pair delivered", func([]received) bool { return len(dest.successes()) == len(want) })
	h.waitQueuesEmpty(30 * time.Second)
	t.Logf("delivered %d pairs (%d of them after two failures) in %s", len(want), flakyPairs, time.Since(start))

	require.Equal(t, want, dest.successes(), "each (event, route) pair reached the destination exactly once")
	require.Len(t, dest.snapshot(), len(want)+2*flakyPairs, "no POST beyond the failed attempts and one success")

	var delivered, attempts int
	require.NoError(t, h.db.Pool().QueryRow(context.Background(),
		`SELECT count(*) FILTER (WHERE state = 'delivered'), COALESCE(sum(attempts), 0) FROM deliveries`).Scan(&delivered, &attempts))
	require.Equal(t, len(want), delivered)
	require.Equal(t, len(want)+2*flakyPairs, attempts, "every attempt recorded")
	var rows int
	require.NoError(t, h.db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM delivery_attempts`).Scan(&rows))
	require.Equal(t, attempts, rows)
	count, err := h.db.EventCount(context.Background(), "acme")
	require.NoError(t, err)
	require.EqualValues(t, n, count)

	// The dispatcher's metrics tell the same story.
	m := scrape(t, h.dispatcherBase)
	perRoute := map[string]int{}
	flakyPerRoute := map[string]int{}
	for i := range n {
		for _, r := range routesOf[eventType(i)] {
			perRoute[r]++
			if i%10 == 0 {
				flakyPerRoute[r]++
			}
		}
	}
	for _, r := range []string{"billing", "ledger", "audit"} {
		require.Equal(t, float64(perRoute[r]), m[`hookrelay_deliveries_total{outcome="delivered",route="`+r+`"}`], r)
		require.Equal(t, float64(2*flakyPerRoute[r]), m[`hookrelay_deliveries_total{outcome="retry_scheduled",route="`+r+`"}`], r)
		require.Equal(t, float64(flakyPerRoute[r]), m[`hookrelay_retries_total{route="`+r+`",tier="100ms"}`], r)
		require.Equal(t, float64(flakyPerRoute[r]), m[`hookrelay_retries_total{route="`+r+`",tier="200ms"}`], r)
		require.Equal(t, 0.0, m[`hookrelay_deliveries_total{outcome="dead",route="`+r+`"}`], r)
		require.Equal(t, 0.0, m[`hookrelay_deliveries_in_flight{route="`+r+`"}`], r)
		require.Equal(t, float64(perRoute[r]+2*flakyPerRoute[r]), m[`hookrelay_delivery_duration_seconds_count{route="`+r+`"}`], r)
	}
}

// The child process of TestDispatcherKilledMidRun: a dispatcher whose
// config comes as JSON in the environment, killed by the parent.
func runDispatcherChild() {
	var cfg config.Config
	if err := json.Unmarshal([]byte(os.Getenv("HOOKRELAY_TEST_CHILD_CONFIG")), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "child config:", err)
		return
	}
	err := app.RunDispatcher(context.Background(), &cfg, app.DispatcherOptions{Logger: zerologStderr()})
	fmt.Fprintln(os.Stderr, "dispatcher returned:", err)
}

// startDispatcherChild runs this test binary as a dispatcher on cfg
// (runDispatcherChild), its output gathered in out; the test's end kills
// it.
func startDispatcherChild(t *testing.T, cfg *config.Config) (*exec.Cmd, *strings.Builder) {
	t.Helper()
	raw, err := json.Marshal(cfg)
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "HOOKRELAY_TEST_CHILD=dispatcher", "HOOKRELAY_TEST_CHILD_CONFIG="+string(raw))
	out := &strings.Builder{}
	// One writer for both: exec calls its Write from one goroutine at a time.
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd, out
}

func TestDispatcherKilledMidRun(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	dest := newDestination(t, func(http.ResponseWriter, *http.Request, []byte, string, int) int {
		return http.StatusOK
	})
	h.cfg.Routes[0].URL = dest.url("billing")
	h.start(app.ReceiverOptions{})

	const n = 300
	ids := h.postAll(n, 8, func(int) string { return "invoice.paid" })

	cmd, out := startDispatcherChild(t, h.cfg)

	dest.waitFor(60*time.Second, "a third of the deliveries", func(rs []received) bool { return len(rs) >= n/3 })
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	err := cmd.Wait()
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	require.True(t, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL, "child ended by %v\n%s", err, out.String())
	beforeRestart := len(dest.snapshot())

	// The restarted dispatcher marks its requests, so the destination can
	// tell which process sent each one.
	client := deliver.NewClient()
	client.Transport = markTransport{base: client.Transport}
	h.startDispatcher(app.DispatcherOptions{Client: client})
	dest.waitFor(2*time.Minute, "every pair delivered", func([]received) bool { return len(dest.successes()) == n })
	h.waitQueuesEmpty(30 * time.Second)

	byKilled, byRestarted := map[string]int{}, map[string]int{}
	for _, q := range dest.snapshot() {
		if q.header.Get("X-Test-Process") == "restarted" {
			byRestarted[q.eventID]++
		} else {
			byKilled[q.eventID]++
		}
	}
	duplicates := 0
	for _, id := range ids {
		require.Equal(t, 1, max(byKilled[id], byRestarted[id]), "each process POSTed %s at most once", id)
		if byKilled[id] == 1 && byRestarted[id] == 1 {
			// Only a POST in flight when the process died is sent again.
			duplicates++
		}
	}
	first := map[string]bool{}
	for _, q := range dest.snapshot() {
		first[q.eventID] = true
	}
	t.Logf("kill -9 after %d POSTs; %d pairs delivered; %d duplicate POSTs, all from the crash window (at most %d consumers were in flight)",
		beforeRestart, len(first), duplicates, h.cfg.Routes[0].Concurrency)
	require.LessOrEqual(t, duplicates, h.cfg.Routes[0].Concurrency, "at most one duplicate per consumer in flight at the kill")
}

// closeConnections closes, through the management API, every connection
// whose name contains substr, as a broker restart would.
func closeConnections(t tb, substr string) int {
	t.Helper()
	resp, err := http.Get(testenv.ManagementURL() + "/api/connections")
	require.NoError(t, err)
	var conns []struct {
		Name   string `json:"name"`
		Client struct {
			Name string `json:"connection_name"`
		} `json:"client_properties"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&conns))
	resp.Body.Close()
	closed := 0
	for _, c := range conns {
		if !strings.Contains(c.Client.Name, substr) {
			continue
		}
		req, err := http.NewRequest(http.MethodDelete, testenv.ManagementURL()+"/api/connections/"+url.PathEscape(c.Name), nil)
		require.NoError(t, err)
		req.Header.Set("X-Reason", "test: simulated broker restart")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		closed++
	}
	return closed
}

func TestBrokerConnectionsClosedMidRun(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	amqptest.RequireManagement(t)
	dest := newDestination(t, func(http.ResponseWriter, *http.Request, []byte, string, int) int { return http.StatusOK })
	h.cfg.Routes[0].URL = dest.url("billing")
	h.start(app.ReceiverOptions{})
	h.startDispatcher(app.DispatcherOptions{})

	const n = 200
	var ids []string
	for i := range n {
		r := h.postSigned(fmt.Sprint("evt_", i), "invoice.paid")
		require.Equal(t, http.StatusOK, r.status)
		ids = append(ids, r.ID)
		if i == n/2 {
			// Both processes lose RabbitMQ in the middle of the run.
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				require.GreaterOrEqual(c, closeConnections(c, h.names.Prefix), 2)
			}, testenv.Scaled(10*time.Second), 100*time.Millisecond, "found the receiver's and dispatcher's connections")
		}
	}
	dest.waitFor(2*time.Minute, "every event delivered after the reconnect", func([]received) bool { return len(dest.successes()) == n })
	h.waitQueuesEmpty(30 * time.Second)
	h.waitOutboxEmpty(10 * time.Second)
	for _, id := range ids {
		require.Equal(t, 1, dest.successes()["billing "+id], id)
	}
}

// markTransport tags each request as coming from the restarted dispatcher.
type markTransport struct{ base http.RoundTripper }

func (m markTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Test-Process", "restarted")
	return m.base.RoundTrip(r)
}
