package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	hamqp "github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// received is one request as the destination saw it.
type received struct {
	at      time.Time
	route   string
	eventID string
	attempt string
	status  int
	header  http.Header
	body    []byte
}

// destination is a local webhook target. respond decides each answer from
// the request and how many times this (event, route) pair came before.
type destination struct {
	t       *testing.T
	srv     *httptest.Server
	respond func(w http.ResponseWriter, r *http.Request, body []byte, route string, prior int) int

	mu       sync.Mutex
	requests []received
	notify   chan struct{}
}

func newDestination(t *testing.T, respond func(w http.ResponseWriter, r *http.Request, body []byte, route string, prior int) int) *destination {
	d := &destination{t: t, respond: respond, notify: make(chan struct{}, 1)}
	d.srv = httptest.NewServer(http.HandlerFunc(d.serve))
	t.Cleanup(func() { closeWithin(t, d.srv, testenv.Scaled(10*time.Second)) })
	return d
}

// closeWithin closes srv, failing t when a handler still runs after
// timeout instead of waiting for it: Close waits for every handler, and a
// handler a failed test left blocked would hang the whole package until
// its timeout, every other test in it reported as never ended.
func closeWithin(t *testing.T, srv *httptest.Server, timeout time.Duration) {
	srv.CloseClientConnections()
	closed := make(chan struct{})
	go func() {
		srv.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(timeout):
		t.Errorf("the destination's server still had a handler running %s after the test; left behind", timeout)
	}
}

func (d *destination) url(route string) string { return d.srv.URL + "/" + route }

func (d *destination) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	arrived := time.Now()
	route := strings.TrimPrefix(r.URL.Path, "/")
	id := r.Header.Get("webhook-id")
	d.mu.Lock()
	prior := 0
	for _, q := range d.requests {
		if q.route == route && q.eventID == id {
			prior++
		}
	}
	d.mu.Unlock()
	status := d.respond(w, r, body, route, prior)
	d.mu.Lock()
	d.requests = append(d.requests, received{at: arrived, route: route, eventID: id, attempt: r.Header.Get("X-Hookrelay-Attempt"), status: status, header: r.Header.Clone(), body: body})
	d.mu.Unlock()
	select {
	case d.notify <- struct{}{}:
	default:
	}
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"status":%d}`, status)
}

// snapshot returns a copy of every request so far.
func (d *destination) snapshot() []received {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]received(nil), d.requests...)
}

// successes counts 2xx answers per "route event" pair.
func (d *destination) successes() map[string]int {
	out := map[string]int{}
	for _, q := range d.snapshot() {
		if q.status >= 200 && q.status < 300 {
			out[q.route+" "+q.eventID]++
		}
	}
	return out
}

// waitFor waits until cond holds on the requests, failing after timeout.
func (d *destination) waitFor(timeout time.Duration, what string, cond func([]received) bool) {
	d.t.Helper()
	deadline := time.After(testenv.Scaled(timeout))
	for !cond(d.snapshot()) {
		select {
		case <-d.notify:
		case <-deadline:
			d.t.Fatalf("timed out after %s waiting for %s (%d requests so far)", timeout, what, len(d.snapshot()))
		}
	}
}

// startDispatcher runs the dispatcher until the test ends.
func (h *harness) startDispatcher(opts app.DispatcherOptions) (stop func()) {
	h.t.Helper()
	return h.startDispatcherWith(h.cfg, opts)
}

// startDispatcherWith is startDispatcher with a config of its own.
func (h *harness) startDispatcherWith(cfg *config.Config, opts app.DispatcherOptions) (stop func()) {
	h.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(h.t, err)
	opts.Listener = ln
	var logs io.Writer = zerolog.NewTestWriter(h.t)
	if h.dispatcherLogs != nil {
		logs = h.dispatcherLogs
	}
	opts.Logger = zerolog.New(logs).Level(zerolog.WarnLevel)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.RunDispatcher(ctx, cfg, opts) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				require.NoError(h.t, err, "dispatcher must stop cleanly")
			case <-time.After(testenv.Scaled(30 * time.Second)):
				h.t.Error("dispatcher did not stop within 30s")
			}
		})
	}
	h.t.Cleanup(stop)
	h.dispatcherBase = "http://" + ln.Addr().String()
	waitReady(h.t, h.dispatcherBase)
	return stop
}

// waitReady waits until base/readyz answers 200: connected to Postgres and
// RabbitMQ, topology declared.
func waitReady(t *testing.T, base string) {
	t.Helper()
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, testenv.Scaled(20*time.Second), 20*time.Millisecond, "%s never became ready", base)
}

// queuesEmpty waits until every queue of the harness's topology has no
// ready message.
func (h *harness) waitQueuesEmpty(timeout time.Duration) {
	h.t.Helper()
	for _, q := range setup.Topology(h.cfg).Queues {
		amqptest.WaitCount(h.t, h.ch, q.Name, 0, timeout)
	}
}

func (h *harness) attemptRows(route string) map[string]int {
	h.t.Helper()
	rows, err := h.db.Pool().Query(context.Background(), `
		SELECT d.event_id::text, count(a.id) FROM deliveries d
		JOIN delivery_attempts a ON a.delivery_id = d.id
		WHERE d.route = $1 GROUP BY d.event_id`, route)
	require.NoError(h.t, err)
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		require.NoError(h.t, rows.Scan(&id, &n))
		out[id] = n
	}
	require.NoError(h.t, rows.Err())
	return out
}

func TestDeliverySignedAndRecorded(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	dest := newDestination(t, func(http.ResponseWriter, *http.Request, []byte, string, int) int { return http.StatusOK })
	h.cfg.Routes[0].URL = dest.url("billing")
	h.cfg.Routes[0].Headers = map[string]string{"X-Api-Key": "k1"}
	// A second secret, as during a rotation: both sign.
	h.cfg.Routes[0].SigningSecrets = []string{otherStandard}
	h.start(app.ReceiverOptions{})
	h.startDispatcher(app.DispatcherOptions{})

	r := h.postSigned("evt_sig", "invoice.paid")
	require.Equal(t, http.StatusOK, r.status)
	dest.waitFor(15*time.Second, "one delivery", func(rs []received) bool { return len(rs) == 1 })

	got := dest.snapshot()[0]
	for _, secret := range []string{testSigningSecret, otherStandard} {
		wh, err := standardwebhooks.NewWebhook(secret)
		require.NoError(t, err)
		require.NoError(t, wh.Verify(got.body, got.header), "the reference library accepts our signature")
	}
	require.Len(t, strings.Fields(got.header.Get("webhook-signature")), 2, "one signature per secret")
	require.Equal(t, r.ID, got.header.Get("webhook-id"))
	require.Equal(t, "acme", got.header.Get("X-Hookrelay-Source"))
	require.Equal(t, "invoice.paid", got.header.Get("X-Hookrelay-Event-Type"))
	require.Equal(t, "1", got.header.Get("X-Hookrelay-Attempt"))
	require.Equal(t, "application/json", got.header.Get("Content-Type"))
	require.Equal(t, "k1", got.header.Get("X-Api-Key"))
	require.JSONEq(t, `{"id":"evt_sig","type":"invoice.paid","amount":42}`, string(got.body))

	require.Eventually(t, func() bool {
		state, attempts, err := h.db.DeliveryGet(context.Background(), uuid.MustParse(r.ID), "billing")
		return err == nil && state == webhook.StateDelivered && attempts == 1
	}, testenv.Scaled(10*time.Second), 20*time.Millisecond)
	var status int
	var respBody []byte
	require.NoError(t, h.db.Pool().QueryRow(context.Background(), `
		SELECT a.status, a.response_body FROM delivery_attempts a JOIN deliveries d ON d.id = a.delivery_id
		WHERE d.event_id = $1`, r.ID).Scan(&status, &respBody))
	require.Equal(t, 200, status)
	require.Equal(t, `{"status":200}`, string(respBody))
	h.waitQueuesEmpty(10 * time.Second)
}

// A redelivered message whose pair is already delivered is acked without a
// new POST.
func TestRedeliveryOfDeliveredPairIsSkipped(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	dest := newDestination(t, func(http.ResponseWriter, *http.Request, []byte, string, int) int { return http.StatusOK })
	h.cfg.Routes[0].URL = dest.url("billing")
	reg := prometheus.NewRegistry()
	h.start(app.ReceiverOptions{})
	h.startDispatcher(app.DispatcherOptions{Registry: reg})

	r := h.postSigned("evt_once", "invoice.paid")
	dest.waitFor(15*time.Second, "the delivery", func(rs []received) bool { return len(rs) == 1 })

	// The same message again, as a crashed publisher would send it.
	require.NoError(t, h.ch.PublishWithContext(context.Background(), h.names.Events(), "acme.invoice.paid", false, false,
		amqpPublishing(r.ID)))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.Equal(c, 1.0, scrape(c, h.dispatcherBase)[`hookrelay_deliveries_total{outcome="skipped_duplicate",route="billing"}`])
	}, testenv.Scaled(15*time.Second), 20*time.Millisecond)
	require.Len(t, dest.snapshot(), 1, "no second POST")
	h.waitQueuesEmpty(10 * time.Second)
}

func TestRetryTiersAndDeadLetter(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	dest := newDestination(t, func(http.ResponseWriter, *http.Request, []byte, string, int) int {
		return http.StatusInternalServerError
	})
	h.cfg.Routes[0].URL = dest.url("billing")
	h.cfg.Routes[0].MaxAttempts = 4 // tiers 200ms, 400ms, 800ms
	h.start(app.ReceiverOptions{})
	h.startDispatcher(app.DispatcherOptions{})

	r := h.postSigned("evt_fail", "invoice.paid")
	dest.waitFor(30*time.Second, "four attempts", func(rs []received) bool { return len(rs) == 4 })
	reqs := dest.snapshot()
	for i, want := range []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond} {
		gap := reqs[i+1].at.Sub(reqs[i].at)
		t.Logf("gap %d: %s (tier %s)", i+1, gap, want)
		require.GreaterOrEqual(t, gap, want, "attempt %d came before its tier's delay", i+2)
		require.Less(t, gap, want+time.Second, "attempt %d came far later than its tier", i+2)
		require.Equal(t, fmt.Sprint(i+2), reqs[i+1].attempt)
	}

	dead := h.names.DeadQueue("billing")
	amqptest.WaitCount(t, h.ch, dead, 1, 10*time.Second)
	msgs := peekManagement(t, dead)
	require.Len(t, msgs, 1)
	hdr := msgs[0].Properties.Headers
	require.Equal(t, r.ID, hdr["x-hookrelay-event-id"])
	require.Equal(t, "acme", hdr["x-hookrelay-source"])
	require.Equal(t, "invoice.paid", hdr["x-hookrelay-event-type"])
	require.Equal(t, "billing", hdr["x-hookrelay-route"])
	require.EqualValues(t, 4, hdr["x-hookrelay-attempts"])
	require.EqualValues(t, 500, hdr["x-hookrelay-last-status"])
	require.Equal(t, "HTTP 500", hdr["x-hookrelay-last-error"])
	require.NotEmpty(t, hdr["x-hookrelay-first-attempt-at"])
	require.NotEmpty(t, hdr["x-hookrelay-last-attempt-at"])
	require.NotContains(t, hdr, "x-death", "the tiers' TTL hops are not why it is dead")
	require.Equal(t, "max_attempts", hdr["x-hookrelay-dead-reason"])
	require.JSONEq(t, `{"id":"evt_fail","type":"invoice.paid","amount":42}`, msgs[0].Payload)

	state, attempts, err := h.db.DeliveryGet(context.Background(), uuid.MustParse(r.ID), "billing")
	require.NoError(t, err)
	require.Equal(t, webhook.StateDead, state)
	require.Equal(t, 4, attempts)
	amqptest.WaitCount(t, h.ch, dead, 1, 5*time.Second) // peeking through the API left it there
	for _, q := range setup.Topology(h.cfg).Queues {
		if q.Name != dead {
			amqptest.WaitCount(t, h.ch, q.Name, 0, 5*time.Second)
		}
	}
}

func TestDeliveryFailureModes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.cfg.Retry.Backoff = []time.Duration{100 * time.Millisecond, 1500 * time.Millisecond, 2 * time.Second}
	h.cfg.Routes[0].Timeout = 300 * time.Millisecond
	h.cfg.Routes[0].NoRetryStatuses = []int{422}
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	refusedURL := "http://" + closed.Addr().String() + "/hooks"
	require.NoError(t, closed.Close()) // nothing listens there now
	refused := testRoute("refused", refusedURL, "acme.refused.*")
	refused.MaxAttempts = 2
	h.cfg.Routes = append(h.cfg.Routes, refused)
	amqptestCleanup(t, h)

	dest := newDestination(t, func(w http.ResponseWriter, r *http.Request, body []byte, _ string, prior int) int {
		var ev struct{ ID string }
		_ = json.Unmarshal(body, &ev)
		switch ev.ID {
		case "evt_gone":
			return http.StatusGone
		case "evt_unprocessable":
			return http.StatusUnprocessableEntity
		case "evt_slow":
			if prior == 0 {
				<-r.Context().Done() // hang until the dispatcher gives up
			}
		case "evt_throttled":
			if prior == 0 {
				w.Header().Set("Retry-After", "1")
				return http.StatusTooManyRequests
			}
		}
		return http.StatusOK
	})
	h.cfg.Routes[0].URL = dest.url("billing")
	h.start(app.ReceiverOptions{})
	h.startDispatcher(app.DispatcherOptions{})

	ids := map[string]string{}
	for _, k := range []string{"evt_gone", "evt_unprocessable", "evt_slow", "evt_throttled"} {
		r := h.postSigned(k, "invoice.paid")
		require.Equal(t, http.StatusOK, r.status)
		ids[k] = r.ID
	}
	r := h.postSigned("evt_refused", "refused.thing")
	require.Equal(t, http.StatusOK, r.status)
	ids["evt_refused"] = r.ID

	type want struct {
		route    string
		state    webhook.DeliveryState
		attempts int
		status   int
		errText  string
	}
	wants := map[string]want{
		"evt_gone":          {"billing", webhook.StateDead, 1, 410, "HTTP 410"},
		"evt_unprocessable": {"billing", webhook.StateDead, 1, 422, "HTTP 422"},
		"evt_slow":          {"billing", webhook.StateDelivered, 2, 200, ""},
		"evt_throttled":     {"billing", webhook.StateDelivered, 2, 200, ""},
		"evt_refused":       {"refused", webhook.StateDead, 2, 0, "connection refused"},
	}
	for k, w := range wants {
		require.Eventually(t, func() bool {
			state, attempts, err := h.db.DeliveryGet(context.Background(), uuid.MustParse(ids[k]), w.route)
			return err == nil && state == w.state && attempts == w.attempts
		}, testenv.Scaled(30*time.Second), 20*time.Millisecond, "%s should end %s after %d attempts", k, w.state, w.attempts)
		var status *int
		var lastErr *string
		require.NoError(t, h.db.Pool().QueryRow(context.Background(),
			`SELECT last_status, last_error FROM deliveries WHERE event_id = $1 AND route = $2`, ids[k], w.route).Scan(&status, &lastErr))
		if w.status == 0 {
			require.Nil(t, status, k)
		} else {
			require.Equal(t, w.status, *status, k)
		}
		if w.errText == "" {
			require.Nil(t, lastErr, k)
		} else {
			require.Contains(t, *lastErr, w.errText, k)
		}
	}

	var firstErr string
	require.NoError(t, h.db.Pool().QueryRow(context.Background(), `
		SELECT a.error FROM delivery_attempts a JOIN deliveries d ON d.id = a.delivery_id
		WHERE d.event_id = $1 AND a.attempt = 1`, ids["evt_slow"]).Scan(&firstErr))
	require.Equal(t, "timeout after 300ms", firstErr)

	var throttled []received
	for _, q := range dest.snapshot() {
		if q.eventID == ids["evt_throttled"] {
			throttled = append(throttled, q)
		}
	}
	require.Len(t, throttled, 2)
	gap := throttled[1].at.Sub(throttled[0].at)
	t.Logf("Retry-After: 1 on a 100ms first tier: next attempt after %s", gap)
	require.GreaterOrEqual(t, gap, time.Second, "Retry-After picked the first tier at least 1s long")

	amqptest.WaitCount(t, h.ch, h.names.DeadQueue("billing"), 2, 10*time.Second)
	amqptest.WaitCount(t, h.ch, h.names.DeadQueue("refused"), 1, 10*time.Second)
}

// amqptestCleanup registers cleanup of the harness's topology again after a
// test changed its routes.
func amqptestCleanup(t *testing.T, h *harness) {
	amqptest.DeleteTopology(t, setup.Topology(h.cfg))
}

// peeked is a message read through the management API.
type peeked struct {
	Payload    string `json:"payload"`
	Properties struct {
		Headers map[string]any `json:"headers"`
	} `json:"properties"`
}

// peekManagement reads queue's messages through the management HTTP API,
// requeueing them, as an operator's "Get messages" does.
//
// The broker answers the peek before a quorum queue has taken the peeked
// messages back: until then they are not ready, and a requeue of "all
// there are now" would find none. peekManagement returns once the queue
// holds as many ready messages as before.
func peekManagement(t *testing.T, queue string) []peeked {
	t.Helper()
	amqptest.RequireManagement(t)
	ch, err := amqptest.Dial(t).Channel()
	require.NoError(t, err)
	defer ch.Close()
	before := amqptest.Count(t, ch, queue)
	body := strings.NewReader(`{"count":10,"ackmode":"ack_requeue_true","encoding":"auto","truncate":50000}`)
	resp, err := http.Post(testenv.ManagementURL()+"/api/queues/%2F/"+queue+"/get", "application/json", body)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var out []peeked
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		if assert.NoError(c, err) {
			assert.GreaterOrEqual(c, q.Messages, before, "the peeked messages back in %s", queue)
		}
	}, testenv.Scaled(10*time.Second), 20*time.Millisecond)
	return out
}

// amqpPublishing is an event message as the outbox publishes it.
func amqpPublishing(eventID string) amqp091.Publishing {
	return amqp091.Publishing{
		DeliveryMode: amqp091.Persistent,
		ContentType:  "application/json",
		MessageId:    eventID,
		Headers: amqp091.Table{
			hamqp.HeaderEventID:   eventID,
			hamqp.HeaderSource:    "acme",
			hamqp.HeaderEventType: "invoice.paid",
		},
		Body: []byte(`{"id":"evt_once"}`),
	}
}

// While Postgres cannot be reached, the dispatcher holds the message
// unacked (no POST, no ack, no drift toward the delivery limit) and delivers
// it once Postgres is back.
func TestDispatcherHoldsMessageWhilePostgresIsDown(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	dest := newDestination(t, func(http.ResponseWriter, *http.Request, []byte, string, int) int { return http.StatusOK })
	h.cfg.Routes[0].URL = dest.url("billing")
	h.start(app.ReceiverOptions{}) // the receiver talks to Postgres directly

	dcfg := *h.cfg
	proxy := proxied(t, &dcfg.Database.URL)
	hd := *h
	hd.cfg = &dcfg
	hd.startDispatcher(app.DispatcherOptions{})

	proxy.Cut()
	r := h.postSigned("evt_pg_down", "invoice.paid")
	require.Equal(t, http.StatusOK, r.status)
	// The dispatcher took the message off the queue and holds it.
	amqptest.WaitCount(t, h.ch, h.names.RouteQueue("billing"), 0, 15*time.Second)
	require.Empty(t, dest.snapshot(), "no POST before the delivery can be recorded")

	proxy.Restore()
	dest.waitFor(60*time.Second, "the delivery after Postgres is back", func(rs []received) bool { return len(rs) == 1 })
	require.Eventually(t, func() bool {
		state, _, err := h.db.DeliveryGet(context.Background(), uuid.MustParse(r.ID), "billing")
		return err == nil && state == webhook.StateDelivered
	}, testenv.Scaled(15*time.Second), 20*time.Millisecond)
	h.waitQueuesEmpty(10 * time.Second)
	require.Len(t, dest.snapshot(), 1)
}

// A consumer whose queue disappears (the broker cancels it) does not vanish
// silently: the dispatcher reconnects, re-declares the topology and
// delivers again.
func TestDispatcherRecoversWhenItsQueueIsDeleted(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	dest := newDestination(t, func(http.ResponseWriter, *http.Request, []byte, string, int) int { return http.StatusOK })
	h.cfg.Routes[0].URL = dest.url("billing")
	h.cfg.Routes[0].Concurrency = 1
	logs := newLogWatch(t)
	h.dispatcherLogs = logs
	h.start(app.ReceiverOptions{})
	h.startDispatcher(app.DispatcherOptions{})

	_, err := h.ch.QueueDelete(h.names.RouteQueue("billing"), false, false, false)
	require.NoError(t, err)
	// Nobody declares it again at once here: the broker cancels the
	// consumer (basic.cancel), which says so.
	logs.waitFor("cancelled by the broker (basic.cancel", 0, 15*time.Second)
	// The receiver re-declares on its next connect; make sure the queue is
	// back before posting, so the event is routed there and not unrouted.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		// A connection of each try's own: a passive declare of a missing
		// queue closes the channel.
		conn, err := amqp091.Dial(testenv.AMQPURL())
		require.NoError(c, err)
		defer conn.Close()
		ch, err := conn.Channel()
		require.NoError(c, err)
		_, err = ch.QueueDeclarePassive(h.names.RouteQueue("billing"), true, false, false, false, nil)
		require.NoError(c, err)
		// And its bindings, declared after every queue of the topology:
		// an event published before them is not routed to the queue (the
		// receiver publishes right after the commit).
		resp, err := http.Get(testenv.ManagementURL() + "/api/queues/%2F/" + url.PathEscape(h.names.RouteQueue("billing")) + "/bindings")
		require.NoError(c, err)
		defer resp.Body.Close()
		var bindings []mgmtBinding
		require.NoError(c, json.NewDecoder(resp.Body).Decode(&bindings))
		require.True(c, slices.ContainsFunc(bindings, func(b mgmtBinding) bool { return b.Source == h.names.Events() }), "bound: %v", bindings)
	}, testenv.Scaled(30*time.Second), 100*time.Millisecond, "the dispatcher re-declared its queue and its bindings")
	r := h.postSigned("evt_after_delete", "invoice.paid")
	require.Equal(t, http.StatusOK, r.status)
	dest.waitFor(30*time.Second, "delivery after the queue came back", func(rs []received) bool { return len(rs) == 1 })
	require.Equal(t, r.ID, dest.snapshot()[0].eventID)
}

// A message whose event was purged from Postgres cannot be recorded: it is
// parked (reason event_missing) at once, not POSTed and not retried.
func TestMessageForPurgedEventIsParked(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	dest := newDestination(t, func(http.ResponseWriter, *http.Request, []byte, string, int) int { return http.StatusOK })
	h.cfg.Routes[0].URL = dest.url("billing")
	h.startDispatcher(app.DispatcherOptions{})
	gone := uuid.NewString()
	require.NoError(t, h.ch.PublishWithContext(context.Background(), "", h.names.RouteQueue("billing"), false, false, amqpPublishing(gone)))
	amqptest.WaitCount(t, h.ch, h.names.DeadQueue("billing"), 1, 15*time.Second)
	dead := amqptest.Drain(t, h.ch, h.names.DeadQueue("billing"))
	require.Equal(t, "event_missing", dead[0].Headers["x-hookrelay-dead-reason"])
	require.Equal(t, gone, dead[0].Headers["x-hookrelay-event-id"])
	require.Empty(t, dest.snapshot())
}
