package app_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	hamqp "github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/routeset"
	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const acmeSecret = "acme-test-secret"

// harness is one receiver test's world: its own database, its own RabbitMQ
// names, and a config pointing at both.
type harness struct {
	t     *testing.T
	cfg   *config.Config
	db    *store.DB
	dbURL string
	ch    *amqp091.Channel
	names hamqp.Names
	base  string // receiver base URL once started
	// metricsBase is the receiver's metrics listener's base URL.
	metricsBase string

	dispatcherBase string // dispatcher base URL once started

	logs io.Writer // where start sends the receiver's log; nil means the test log
	// dispatcherLogs is where startDispatcher sends the dispatcher's log;
	// nil means the test log.
	dispatcherLogs io.Writer

	client *http.Client // the senders' client
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	conn := amqptest.Dial(t)
	db, dbURL := storetest.Open(t)
	prefix := amqptest.Prefix(t)
	cfg := &config.Config{
		Database:   config.Database{URL: dbURL, MaxConns: 10},
		AMQP:       config.AMQP{URL: testenv.AMQPURL(), Prefix: prefix, ManagementURL: testenv.ManagementURL()},
		Receiver:   config.Receiver{Listen: "127.0.0.1:0", MaxBodyBytes: 4096, ShutdownTimeout: 5 * time.Second},
		Outbox:     config.Outbox{BatchSize: 50, PollInterval: 200 * time.Millisecond, PublishTimeout: 5 * time.Second, DirectHold: 6 * time.Second},
		Dispatcher: config.Dispatcher{Listen: "127.0.0.1:0", ShutdownTimeout: 10 * time.Second, DeliveryLimit: 20},
		Retry:      config.Retry{Backoff: []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond}},
		// The reconciler runs, but only a test about it shortens the
		// margin: a pair held a few seconds (Postgres down, a broker
		// alarm) is not lost.
		Reconcile: config.Reconcile{Interval: time.Second, Margin: time.Minute},
		Log:       config.Log{Level: "warn", Format: "json"},
		Sources: []config.Source{{
			Name:        "acme",
			Verify:      config.Verify{Scheme: "hmac", Secrets: []string{acmeSecret}, Header: "X-Acme-Signature", Prefix: "sha256="},
			Idempotency: config.Idempotency{JSONPath: "id"},
			EventType:   config.EventType{JSONPath: "type"},
		}},
		Routes: []config.Route{testRoute("billing", "http://127.0.0.1:9/", "acme.invoice.*")},
	}
	// The routes a test adds to cfg before it starts the processes are
	// deleted with the rest.
	amqptest.DeleteTopologyOf(t, func() hamqp.Topology { return setup.Topology(cfg) })
	return &harness{
		t: t, cfg: cfg, db: db, dbURL: dbURL, ch: amqptest.Channel(t, conn), names: hamqp.Names{Prefix: prefix},
		client: &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone(), Timeout: 30 * time.Second},
	}
}

const testSigningSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func testRoute(name, url string, bindings ...string) config.Route {
	return config.Route{
		Name: name, URL: url, Bindings: bindings, Timeout: 5 * time.Second, Concurrency: 4,
		SigningSecret: testSigningSecret, MaxAttempts: 4,
	}
}

// start runs the receiver until the test ends; the test fails if it does not
// stop cleanly.
func (h *harness) start(opts app.ReceiverOptions) {
	h.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(h.t, err)
	opts.Listener = ln
	if opts.MetricsListener == nil {
		mln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(h.t, err)
		opts.MetricsListener = mln
	}
	h.metricsBase = "http://" + opts.MetricsListener.Addr().String()
	var logs io.Writer = zerolog.NewTestWriter(h.t)
	if h.logs != nil {
		logs = h.logs
	}
	opts.Logger = zerolog.New(logs).Level(zerolog.WarnLevel)
	h.base = "http://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.RunReceiver(ctx, h.cfg, opts) }()
	h.t.Cleanup(func() {
		// Connections the client opened but never used would hold the
		// server's Shutdown for 5s (net/http treats them as new, not idle).
		h.client.CloseIdleConnections()
		cancel()
		select {
		case err := <-done:
			require.NoError(h.t, err, "receiver must stop cleanly")
		case <-time.After(testenv.Scaled(20 * time.Second)):
			h.t.Error("receiver did not stop within 20s")
		}
	})
	// The listener answers from the first moment (503 "starting" to a
	// webhook): wait until the receiver has started.
	h.waitStarted(done)
}

// waitStarted waits until the receiver's /readyz no longer says it is
// starting (it may say a dependency is unavailable: some tests start it so),
// or it returned.
func (h *harness) waitStarted(done chan error) {
	h.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-done:
			done <- err // for the cleanup
			h.t.Fatalf("the receiver returned while starting: %v", err)
		default:
		}
		resp, err := http.Get(h.base + "/readyz")
		if err == nil {
			var body map[string]string
			derr := json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if derr == nil && body["status"] != "starting" {
				return
			}
		}
		if time.Now().After(deadline) {
			h.t.Fatal("the receiver did not start within 30s")
		}
		time.Sleep(10 * time.Millisecond) // polling a start-up: nothing to wait on
	}
}

// proxied puts a TCP proxy between *rawURL's host and the code under test,
// rewriting *rawURL to go through it.
func proxied(t *testing.T, rawURL *string) *testenv.Proxy {
	t.Helper()
	u, err := url.Parse(*rawURL)
	require.NoError(t, err)
	proxy := testenv.NewProxy(t, u.Host)
	u.Host = proxy.Addr()
	*rawURL = u.String()
	return proxy
}

func sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

type reply struct {
	status int
	ID     string `json:"id"`
	Dup    bool   `json:"duplicate"`
	Error  string `json:"error"`
}

// tb is what a test helper needs to fail: the test's *testing.T on the
// test goroutine, or, in a require.EventuallyWithT condition (which runs
// on a goroutine of its own, where a *testing.T must not fail), its
// *assert.CollectT.
type tb interface {
	require.TestingT
	Helper()
}

func (h *harness) post(source string, body []byte, header http.Header) reply {
	h.t.Helper()
	r, err := h.tryPost(source, body, header)
	require.NoError(h.t, err)
	return r
}

// tryPost is post for a goroutine other than the test's: it returns what
// went wrong instead of failing the test.
func (h *harness) tryPost(source string, body []byte, header http.Header) (reply, error) {
	req, err := http.NewRequest(http.MethodPost, h.base+"/webhooks/"+source, bytes.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	req.Header = header
	if req.Header == nil {
		req.Header = http.Header{}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.client.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		return reply{}, fmt.Errorf("content type %q, body %s", ct, raw)
	}
	var r reply
	if err := json.Unmarshal(raw, &r); err != nil {
		return reply{}, fmt.Errorf("decoding %s: %w", raw, err)
	}
	r.status = resp.StatusCode
	return r, nil
}

// postSigned sends a correctly signed acme event.
func (h *harness) postSigned(id, eventType string) reply {
	h.t.Helper()
	r, err := h.tryPostSigned(id, eventType)
	require.NoError(h.t, err)
	return r
}

// tryPostSigned is postSigned for a goroutine other than the test's.
func (h *harness) tryPostSigned(id, eventType string) (reply, error) {
	body := []byte(fmt.Sprintf(`{"id":%q,"type":%q,"amount":42}`, id, eventType))
	return h.tryPost("acme", body, http.Header{"X-Acme-Signature": {sign(acmeSecret, body)}})
}

func (h *harness) outboxBacklog() int64 {
	h.t.Helper()
	n, _, err := h.db.OutboxStats(context.Background())
	require.NoError(h.t, err)
	return n
}

func (h *harness) waitOutboxEmpty(timeout time.Duration) {
	h.t.Helper()
	require.EventuallyWithT(h.t, func(c *assert.CollectT) {
		n, _, err := h.db.OutboxStats(context.Background())
		require.NoError(c, err)
		require.Zero(c, n, "outbox rows")
	}, testenv.Scaled(timeout), 20*time.Millisecond, "the outbox empties")
}

func eventIDs(ds []amqp091.Delivery) []string {
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.MessageId
	}
	return ids
}

func TestConcurrentDuplicatePostsStoreAndPublishOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.start(app.ReceiverOptions{})

	const n = 10
	replies := make([]reply, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies[i], errs[i] = h.tryPostSigned("evt_same", "invoice.paid")
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	firsts := 0
	for _, r := range replies {
		require.Equal(t, http.StatusOK, r.status, r.Error)
		require.Equal(t, replies[0].ID, r.ID, "every reply names the first event")
		if !r.Dup {
			firsts++
		}
	}
	require.Equal(t, 1, firsts, "exactly one reply says duplicate=false")

	count, err := h.db.EventCount(context.Background(), "acme")
	require.NoError(t, err)
	require.EqualValues(t, 1, count, "one event row")

	h.waitOutboxEmpty(10 * time.Second)
	msgs := amqptest.Drain(t, h.ch, h.names.RouteQueue("billing"))
	require.Equal(t, []string{replies[0].ID}, eventIDs(msgs), "one published message")
	m := msgs[0]
	require.Equal(t, "acme.invoice.paid", m.RoutingKey)
	require.Equal(t, "application/json", m.ContentType)
	require.Equal(t, uint8(amqp091.Persistent), m.DeliveryMode)
	require.Equal(t, "acme", m.Headers["x-hookrelay-source"])
	require.Equal(t, "invoice.paid", m.Headers["x-hookrelay-event-type"])
	require.JSONEq(t, `{"id":"evt_same","type":"invoice.paid","amount":42}`, string(m.Body))
}

func TestPostgresUnreachableAnswers503AndStoresNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.cfg.Database.URL = h.dbURL
	proxy := proxied(t, &h.cfg.Database.URL)
	h.start(app.ReceiverOptions{})

	require.Equal(t, http.StatusOK, h.postSigned("evt_before", "invoice.paid").status)

	proxy.Cut()
	r := h.postSigned("evt_during", "invoice.paid")
	require.Equal(t, http.StatusServiceUnavailable, r.status)
	require.NotEmpty(t, r.Error)

	// Straight to Postgres, not through the proxy: nothing of that request.
	var during int
	require.NoError(t, h.db.Pool().QueryRow(context.Background(),
		`SELECT count(*) FROM events WHERE idempotency_key = 'evt_during'`).Scan(&during))
	require.Zero(t, during)

	proxy.Restore()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		r, err := h.tryPostSigned("evt_during", "invoice.paid")
		require.NoError(c, err)
		require.Equal(c, http.StatusOK, r.status)
	}, testenv.Scaled(15*time.Second), 100*time.Millisecond, "the sender's retry succeeds once Postgres is back")
	count, err := h.db.EventCount(context.Background(), "acme")
	require.NoError(t, err)
	require.EqualValues(t, 2, count)
}

func TestRabbitMQDownOutboxGrowsAndDrainsWhenBack(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	proxy := proxied(t, &h.cfg.AMQP.URL)
	h.start(app.ReceiverOptions{})

	// Connected first, so the cut also breaks a live connection.
	first := h.postSigned("evt_0", "invoice.paid")
	require.Equal(t, http.StatusOK, first.status)
	h.waitOutboxEmpty(10 * time.Second)

	proxy.Cut()
	want := map[string]bool{first.ID: true}
	const n = 20
	for i := 1; i <= n; i++ {
		r := h.postSigned(fmt.Sprintf("evt_%d", i), "invoice.paid")
		require.Equal(t, http.StatusOK, r.status, "ingest does not need RabbitMQ")
		want[r.ID] = true
	}
	require.EqualValues(t, n, h.outboxBacklog(), "the outbox keeps every event while RabbitMQ is away")

	proxy.Restore()
	h.waitOutboxEmpty(30 * time.Second)
	got := map[string]bool{}
	for _, id := range eventIDs(amqptest.Drain(t, h.ch, h.names.RouteQueue("billing"))) {
		got[id] = true
	}
	require.Equal(t, want, got, "every event reached the route queue")
}

func TestUnroutableEventLandsInUnroutedQueue(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.start(app.ReceiverOptions{})
	r := h.postSigned("evt_nobody", "customer.created") // no route binds acme.customer.*
	require.Equal(t, http.StatusOK, r.status)
	h.waitOutboxEmpty(10 * time.Second)
	msgs := amqptest.Drain(t, h.ch, h.names.Unrouted())
	require.Equal(t, []string{r.ID}, eventIDs(msgs))
	require.Equal(t, "acme.customer.created", msgs[0].RoutingKey)
	require.Zero(t, amqptest.Count(t, h.ch, h.names.RouteQueue("billing")))
}

func TestBadInputIsRejectedAndStoresNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.start(app.ReceiverOptions{DisablePublisher: true})

	good := []byte(`{"id":"evt_1","type":"invoice.paid"}`)
	big := []byte(`{"id":"evt_big","type":"invoice.paid","pad":"` + strings.Repeat("x", 5000) + `"}`)
	unreadable := []byte(`{"type":"invoice.paid"}`) // no id
	notJSON := []byte(`id=evt_1&type=invoice.paid`)
	tests := []struct {
		name    string
		source  string
		body    []byte
		sig     string
		status  int
		wantErr string
	}{
		{"unknown source", "nobody", good, sign(acmeSecret, good), http.StatusNotFound, "unknown source"},
		{"body over the limit", "acme", big, sign(acmeSecret, big), http.StatusRequestEntityTooLarge, "body exceeds 4096 bytes"},
		{"missing signature", "acme", good, "", http.StatusUnauthorized, "missing header X-Acme-Signature"},
		{"wrong secret", "acme", good, sign("not-the-secret", good), http.StatusUnauthorized, "signature mismatch"},
		{"tampered body", "acme", []byte(`{"id":"evt_1","type":"invoice.paid" }`), sign(acmeSecret, good), http.StatusUnauthorized, "signature mismatch"},
		{"no idempotency key", "acme", unreadable, sign(acmeSecret, unreadable), http.StatusBadRequest, `field "id" is missing`},
		{"not json", "acme", notJSON, sign(acmeSecret, notJSON), http.StatusBadRequest, "body is not valid JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hdr := http.Header{}
			if tt.sig != "" {
				hdr.Set("X-Acme-Signature", tt.sig)
			}
			r := h.post(tt.source, tt.body, hdr)
			require.Equal(t, tt.status, r.status)
			require.Contains(t, r.Error, tt.wantErr)
			require.NotContains(t, r.Error, acmeSecret)
		})
	}
	count, err := h.db.EventCount(context.Background(), "")
	require.NoError(t, err)
	require.Zero(t, count, "no rejected request stored an event")
	require.Zero(t, h.outboxBacklog(), "nor an outbox row")
}

func TestReceiverRefusesSchemaBehind(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	_, err := h.db.Pool().Exec(context.Background(), `UPDATE schema_migrations SET version = 0`)
	require.NoError(t, err)
	err = app.RunReceiver(context.Background(), h.cfg, app.ReceiverOptions{Logger: zerolog.Nop()})
	require.ErrorIs(t, err, store.ErrSchemaBehind)
	require.Contains(t, err.Error(), "hookrelay migrate")
}

func TestReadiness(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	proxy := proxied(t, &h.cfg.AMQP.URL)
	h.start(app.ReceiverOptions{})

	get := func(t tb, path string) (int, map[string]string) {
		t.Helper()
		resp, err := http.Get(h.base + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		var body map[string]string
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		return resp.StatusCode, body
	}
	status, body := get(t, "/readyz")
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, map[string]string{"postgres": "ok", "rabbitmq": "ok"}, body)

	proxy.Cut()
	// The client notices the closed socket asynchronously; readiness
	// follows within moments.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var status int
		status, body = get(c, "/readyz")
		require.Equal(c, http.StatusServiceUnavailable, status)
	}, testenv.Scaled(10*time.Second), 20*time.Millisecond)
	require.Equal(t, "ok", body["postgres"])
	require.NotEqual(t, "ok", body["rabbitmq"])

	status, _ = get(t, "/healthz")
	require.Equal(t, http.StatusOK, status, "alive even when a dependency is not")
}

func TestMetricsCountRequests(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	reg := prometheus.NewRegistry()
	h.start(app.ReceiverOptions{Registry: reg})

	require.Equal(t, http.StatusOK, h.postSigned("evt_a", "invoice.paid").status)
	require.Equal(t, http.StatusOK, h.postSigned("evt_b", "invoice.paid").status)
	require.True(t, h.postSigned("evt_a", "invoice.paid").Dup)
	require.Equal(t, http.StatusUnauthorized, h.post("acme", []byte(`{}`), http.Header{"X-Acme-Signature": {sign("x", []byte(`{}`))}}).status)
	require.Equal(t, http.StatusNotFound, h.post("nobody", []byte(`{}`), nil).status)
	h.waitOutboxEmpty(10 * time.Second)

	m := scrape(t, h.metricsBase)
	require.Equal(t, 2.0, m[`hookrelay_ingest_requests_total{outcome="accepted",reason="",source="acme"}`])
	require.Equal(t, 1.0, m[`hookrelay_ingest_requests_total{outcome="duplicate",reason="",source="acme"}`])
	require.Equal(t, 1.0, m[`hookrelay_ingest_requests_total{outcome="rejected",reason="signature_mismatch",source="acme"}`])
	require.Equal(t, 1.0, m[`hookrelay_ingest_requests_total{outcome="rejected",reason="unknown_source",source="unknown"}`])
	require.Equal(t, 2.0, m[`hookrelay_ingest_duration_seconds_count{outcome="accepted",source="acme"}`])
	require.Equal(t, 2.0, m[`hookrelay_publish_confirms_total{outcome="ack"}`])
	require.Equal(t, 0.0, m[`hookrelay_publish_confirms_total{outcome="nack"}`])
	require.Equal(t, 0.0, m[`hookrelay_outbox_backlog`])
	require.Contains(t, m, `hookrelay_outbox_oldest_age_seconds`)
}

func TestMetricsReportOutboxBacklog(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.start(app.ReceiverOptions{DisablePublisher: true})
	for i := range 3 {
		require.Equal(t, http.StatusOK, h.postSigned(fmt.Sprint("evt_", i), "invoice.paid").status)
	}
	// Age the oldest row so the gauge has something to show.
	_, err := h.db.Pool().Exec(context.Background(), `UPDATE outbox SET created_at = now() - interval '90 seconds' WHERE id = (SELECT min(id) FROM outbox)`)
	require.NoError(t, err)
	m := scrape(t, h.metricsBase)
	require.Equal(t, 3.0, m[`hookrelay_outbox_backlog`])
	require.GreaterOrEqual(t, m[`hookrelay_outbox_oldest_age_seconds`], 90.0)
}

// scrape reads /metrics into "name{labels}" -> value, labels sorted as the
// text format prints them.
func scrape(t tb, base string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	out := map[string]float64{}
	for _, line := range strings.Split(string(raw), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		var v float64
		_, err := fmt.Sscan(line[i+1:], &v)
		require.NoError(t, err, line)
		out[line[:i]] = v
	}
	return out
}

// testOps is the operator service over h's database and dialer, closed
// with the test.
func testOps(t *testing.T, h *harness, dialer *hamqp.Dialer) *ops.Service {
	t.Helper()
	return testOpsWith(t, h, h.cfg, dialer)
}

// testOpsWith is testOps with a config of its own (its secrets keys, say).
func testOpsWith(t *testing.T, h *harness, cfg *config.Config, dialer *hamqp.Dialer) *ops.Service {
	t.Helper()
	keyring, err := routeset.NewKeyring(cfg.Secrets.Key, cfg.Secrets.PreviousKeys)
	require.NoError(t, err)
	// The routes as they are at each call: a test makes them and then
	// asks.
	f := routeset.NewFollower(cfg, h.db, keyring, zerolog.Nop())
	require.NoError(t, f.Load(context.Background()))
	svc, closeOps, err := setup.Ops(cfg, h.db, dialer, "hookrelay-test-ops", func() *routeset.Set {
		require.NoError(t, f.Refresh(context.Background()))
		return f.Current()
	})
	require.NoError(t, err)
	t.Cleanup(closeOps)
	return svc
}
