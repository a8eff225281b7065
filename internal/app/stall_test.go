package app_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// logWatch is a log destination a test can wait on. Lines also go to the
// test log.
type logWatch struct {
	t      *testing.T
	mu     sync.Mutex
	lines  []string
	notify chan struct{}
}

func newLogWatch(t *testing.T) *logWatch {
	return &logWatch{t: t, notify: make(chan struct{}, 1)}
}

func (w *logWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.lines = append(w.lines, string(p))
	w.mu.Unlock()
	w.t.Log(strings.TrimSpace(string(p)))
	select {
	case w.notify <- struct{}{}:
	default:
	}
	return len(p), nil
}

// count is how many lines so far contain s.
func (w *logWatch) count(s string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, l := range w.lines {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

// waitFor waits until more than after lines contain s.
func (w *logWatch) waitFor(s string, after int, timeout time.Duration) {
	w.t.Helper()
	deadline := time.After(testenv.Scaled(timeout))
	for w.count(s) <= after {
		select {
		case <-w.notify:
		case <-deadline:
			w.t.Fatalf("no new log line %q within %s", s, timeout)
		}
	}
}

// runDispatcher runs a dispatcher on cfg, logging to w, and returns a stop
// function that cancels it and reports how long it took to return.
func runDispatcher(t *testing.T, cfg *config.Config, w *logWatch) (stop func() time.Duration) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- app.RunDispatcher(ctx, cfg, app.DispatcherOptions{
			Listener: ln, Logger: zerolog.New(w).Level(zerolog.WarnLevel),
		})
	}()
	var once sync.Once
	var took time.Duration
	stop = func() time.Duration {
		once.Do(func() {
			start := time.Now()
			cancel()
			select {
			case err := <-done:
				took = time.Since(start)
				require.NoError(t, err, "dispatcher must stop cleanly")
			case <-time.After(testenv.Scaled(60 * time.Second)):
				took = time.Since(start)
				t.Error("dispatcher did not stop within 60s")
			}
		})
		return took
	}
	t.Cleanup(func() { stop() })
	waitReady(t, "http://"+ln.Addr().String())
	return stop
}

// insertEvents stores n acme invoice.paid events straight in Postgres, as
// the receiver would, and returns their ids.
func (h *harness) insertEvents(prefix string, n int, routes []string) []string {
	h.t.Helper()
	ids := make([]string, n)
	for i := range n {
		key := fmt.Sprintf("%s_%d", prefix, i)
		ev := &webhook.Event{
			ID: uuid.Must(uuid.NewV7()), Source: "acme", IdempotencyKey: key, EventType: "invoice.paid",
			ContentType: "application/json", Body: []byte(fmt.Sprintf(`{"id":%q,"type":"invoice.paid"}`, key)),
			ReceivedAt: time.Now(),
		}
		id, dup, err := h.db.EventInsert(context.Background(), ev, routes)
		require.NoError(h.t, err)
		require.False(h.t, dup)
		ids[i] = id.String()
	}
	return ids
}

const (
	holdingLine      = "claiming delivery failed; holding the message" // issue 11: a claim, not a lock
	outboxFailedLine = "outbox batch failed"
)

// Item 11: the dispatcher's Postgres stops answering without closing the
// connection. No call blocks past its deadline: the message is held (no
// POST) while Postgres is silent, delivered once it answers again, and a
// dispatcher asked to stop during the stall stops within its shutdown
// timeout; the messages it held are delivered by the next one. Every pair
// is delivered exactly once.
func TestDispatcherStalledPostgresHoldsMessagesAndStops(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	dest := newDestination(t, func(http.ResponseWriter, *http.Request, []byte, string, int) int { return http.StatusOK })
	h.cfg.Routes[0].URL = dest.url("billing")
	h.cfg.Database.QueryTimeout = time.Second
	h.start(app.ReceiverOptions{}) // the receiver talks to Postgres directly

	dcfg := *h.cfg
	proxy := proxied(t, &dcfg.Database.URL)
	logs := newLogWatch(t)
	stop := runDispatcher(t, &dcfg, logs)
	t.Cleanup(proxy.Cut) // runs first: ends any stall so nothing hangs the cleanup

	var ids []string
	post := func(prefix string, n int) {
		for i := range n {
			r := h.postSigned(fmt.Sprintf("%s_%d", prefix, i), "invoice.paid")
			require.Equal(t, http.StatusOK, r.status, r.Error)
			ids = append(ids, r.ID)
		}
	}
	allDelivered := func() bool {
		for _, id := range ids {
			state, _, err := h.db.DeliveryGet(context.Background(), uuid.MustParse(id), "billing")
			if err != nil || state != webhook.StateDelivered {
				return false
			}
		}
		return true
	}

	post("evt_before", 3)
	require.Eventually(t, allDelivered, testenv.Scaled(20*time.Second), 20*time.Millisecond)

	proxy.Stall()
	post("evt_stalled", 3)
	// The lock call fails at its deadline (1s) and the message is held.
	logs.waitFor(holdingLine, 0, 10*time.Second)
	require.Len(t, dest.snapshot(), 3, "no POST while the delivery cannot be recorded")
	proxy.Resume()
	require.Eventually(t, allDelivered, testenv.Scaled(30*time.Second), 20*time.Millisecond)

	proxy.Stall()
	post("evt_at_stop", 2)
	logs.waitFor(holdingLine, logs.count(holdingLine), 10*time.Second)
	took := stop()
	t.Logf("dispatcher stopped in %s during the stall", took)
	require.Less(t, took, dcfg.Dispatcher.ShutdownTimeout, "the dispatcher stops within its shutdown timeout while Postgres is stalled")
	proxy.Resume()

	runDispatcher(t, &dcfg, logs)
	require.Eventually(t, allDelivered, testenv.Scaled(30*time.Second), 20*time.Millisecond)
	h.waitQueuesEmpty(10 * time.Second)
	want := map[string]int{}
	for _, id := range ids {
		want["billing "+id] = 1
	}
	require.Equal(t, want, dest.successes(), "every pair delivered exactly once")
}

// Item 11: while the receiver's Postgres is stalled, a sender gets 503
// within the store timeout (5s), not a hung request; the outbox publisher's
// calls fail at their deadline, and it resumes when Postgres answers again,
// losing nothing.
func TestReceiverStalledPostgresAnswers503(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.cfg.Database.QueryTimeout = time.Second
	proxy := proxied(t, &h.cfg.Database.URL)
	logs := newLogWatch(t)
	h.logs = logs
	h.start(app.ReceiverOptions{})
	t.Cleanup(proxy.Cut) // runs first: ends any stall so nothing hangs the cleanup

	before := h.postSigned("evt_before", "invoice.paid")
	require.Equal(t, http.StatusOK, before.status, before.Error)
	h.waitOutboxEmpty(10 * time.Second)

	proxy.Stall()
	failed := logs.count(outboxFailedLine)
	start := time.Now()
	r := h.postSigned("evt_during", "invoice.paid")
	took := time.Since(start)
	require.Equal(t, http.StatusServiceUnavailable, r.status)
	require.Less(t, took, 7*time.Second, "503 within the 5s store timeout (plus scheduling slack)")
	// Committed by another receiver meanwhile: this one's publisher cannot
	// claim them until Postgres answers.
	direct := h.insertEvents("evt_direct", 10, []string{"billing"})
	require.EqualValues(t, 10, h.outboxBacklog())
	// The publisher is not hung on the silent connection: its claims fail
	// at their deadline and it keeps trying.
	logs.waitFor(outboxFailedLine, failed, 10*time.Second)

	proxy.Resume()
	var during reply
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var err error
		during, err = h.tryPostSigned("evt_during", "invoice.paid")
		require.NoError(c, err)
		require.Equal(c, http.StatusOK, during.status)
	}, testenv.Scaled(30*time.Second), 200*time.Millisecond, "the sender's retry succeeds once Postgres answers")
	// The publisher may be sleeping out its backoff after the failures
	// (at most 30s) when Postgres comes back.
	h.waitOutboxEmpty(60 * time.Second)

	want := map[string]bool{before.ID: true, during.ID: true}
	for _, id := range direct {
		want[id] = true
	}
	got := map[string]bool{}
	for _, id := range eventIDs(amqptest.Drain(t, h.ch, h.names.RouteQueue("billing"))) {
		got[id] = true
	}
	require.Equal(t, want, got, "every event reached the route queue")
}
