package app_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/jackc/pgx/v5"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rawSource is a source whose events are not JSON: id and type come from
// headers.
const rawSecret = "raw-secret-0123456789"

func rawSourceConfig() config.Source {
	return config.Source{
		Name:        "raw",
		Verify:      config.Verify{Scheme: "hmac", Secrets: []string{rawSecret}, Header: "X-Raw-Signature", Prefix: "sha256="},
		Idempotency: config.Idempotency{Header: "X-Raw-Id"},
		EventType:   config.EventType{Header: "X-Raw-Type"},
	}
}

// postAcme sends a signed acme event with the body given.
func (h *harness) postAcme(body string) reply {
	h.t.Helper()
	r := h.post("acme", []byte(body), http.Header{"X-Acme-Signature": {sign(acmeSecret, []byte(body))}})
	require.Equal(h.t, http.StatusOK, r.status, r.Error)
	return r
}

// pairsOf returns the routes that have a pair for event id.
func (h *harness) pairsOf(id string) []string {
	h.t.Helper()
	return h.strings(`SELECT route FROM deliveries WHERE event_id = $1 ORDER BY route`, id)
}

// strings returns the one text column of query's rows, in order.
func (h *harness) strings(query string, args ...any) []string {
	h.t.Helper()
	rows, err := h.db.Pool().Query(context.Background(), query, args...)
	require.NoError(h.t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(h.t, err)
	return out
}

// failingAt is a destination's answer: status for route, 200 for the
// others.
func failingAt(route string, status int) func(http.ResponseWriter, *http.Request, []byte, string, int) int {
	return func(_ http.ResponseWriter, _ *http.Request, _ []byte, r string, _ int) int {
		if r == route {
			return status
		}
		return http.StatusOK
	}
}

// Issue 39: a route's filter decides which of the events its bindings
// match make a pair. An event the filter says no to makes no pair, no
// message in the route's queue and no POST; one it cannot judge (an error
// of the expression on this event) makes none either, and both are
// counted per route. A body that is not JSON is null to the filter.
// Nothing of it lands in the unrouted queue: the filtered route's patterns
// bind its sink.
func TestFilterDecidesWhichEventsMakeAPair(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	dest := newDestination(t, func(http.ResponseWriter, *http.Request, []byte, string, int) int { return http.StatusOK })
	big := testRoute("big", dest.url("big"), "acme.invoice.*")
	big.Filter = `body.amount > 100 && body.currency == "brl"`
	all := testRoute("all", dest.url("all"), "acme.invoice.*", "raw.#")
	nested := testRoute("nested", dest.url("nested"), "acme.invoice.*")
	nested.Filter = `body.customer.country == "br"` // errs where there is no customer
	text := testRoute("text", dest.url("text"), "raw.#")
	text.Filter = `body == null && headers["x-raw-type"] == "note"`
	h.cfg.Sources = append(h.cfg.Sources, rawSourceConfig())
	h.cfg.Routes = []config.Route{big, all, nested, text}
	h.start(app.ReceiverOptions{})
	h.startDispatcher(app.DispatcherOptions{})

	taken := h.postAcme(`{"id":"evt_big","type":"invoice.paid","amount":150000,"currency":"brl","customer":{"country":"br"}}`).ID
	small := h.postAcme(`{"id":"evt_small","type":"invoice.paid","amount":5,"currency":"brl","customer":{"country":"ar"}}`).ID
	usd := h.postAcme(`{"id":"evt_usd","type":"invoice.paid","amount":150000,"currency":"usd"}`).ID
	body := []byte("a note, not JSON")
	note := h.post("raw", body, http.Header{"X-Raw-Signature": {sign(rawSecret, body)}, "X-Raw-Id": {"n1"}, "X-Raw-Type": {"note"}})
	require.Equal(t, http.StatusOK, note.status, note.Error)

	require.Equal(t, []string{"all", "big", "nested"}, h.pairsOf(taken))
	require.Equal(t, []string{"all"}, h.pairsOf(small), "big's filter said no; nested's said no")
	require.Equal(t, []string{"all"}, h.pairsOf(usd), "nested's filter erred: no pair")
	require.Equal(t, []string{"all", "text"}, h.pairsOf(note.ID), "a body that is not JSON is null")

	t.Cleanup(func() {
		if t.Failed() {
			for _, q := range dest.snapshot() {
				t.Logf("%s %s %d attempt %s", q.route, q.eventID, q.status, q.attempt)
			}
			for k, v := range scrape(t, h.dispatcherBase) {
				if strings.Contains(k, "deliveries_total") || strings.Contains(k, "nested") {
					t.Logf("%s %v", k, v)
				}
			}
		}
	})
	dest.waitFor(testenv.Scaled(30*time.Second), "every pair delivered", func([]received) bool { return len(dest.successes()) == 7 })
	h.waitQueuesEmpty(10 * time.Second)
	got := map[string][]string{}
	for _, q := range dest.snapshot() {
		got[q.route] = append(got[q.route], q.eventID)
	}
	require.ElementsMatch(t, []string{taken}, got["big"])
	require.ElementsMatch(t, []string{taken}, got["nested"])
	require.ElementsMatch(t, []string{taken, small, usd, note.ID}, got["all"])
	require.ElementsMatch(t, []string{note.ID}, got["text"])
	require.Zero(t, amqptest.Count(t, h.ch, h.names.Unrouted()), "nothing the filtered routes' patterns matched is unrouted")

	m := scrape(t, h.metricsBase)
	require.Equal(t, 2.0, m[`hookrelay_route_filtered_total{result="rejected",route="big"}`], "evt_small and evt_usd")
	require.Equal(t, 1.0, m[`hookrelay_route_filtered_total{result="rejected",route="nested"}`], "evt_small")
	require.Equal(t, 1.0, m[`hookrelay_route_filtered_total{result="error",route="nested"}`], "evt_usd: no customer")
}

// Issue 39: a route's transformation shapes what the destination
// receives: the body it yields (a map as JSON), with the headers it adds,
// signed over that body. The stored event stays as received, and the
// attempt records it was shaped (a route of config.yaml: no version).
func TestTransformShapesTheDeliveredBody(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	dest := newDestination(t, func(http.ResponseWriter, *http.Request, []byte, string, int) int { return http.StatusOK })
	ledger := testRoute("ledger", dest.url("ledger"), "acme.invoice.*")
	ledger.Transform = `{"id": body.id, "amount": body.amount, "customer": body.customer.id}`
	ledger.TransformHeaders = `{"x-ledger-kind": event_type, "x-ledger-source": source}`
	slack := testRoute("slack", dest.url("slack"), "acme.invoice.*")
	slack.Transform = `{"text": "Invoice " + body.id + " paid: " + string(body.amount / 100) + " " + body.currency.upperAscii()}`
	h.cfg.Routes = []config.Route{ledger, slack}
	h.start(app.ReceiverOptions{})
	h.startDispatcher(app.DispatcherOptions{})

	raw := `{"id":"in_1","type":"invoice.paid","amount":150000,"currency":"brl","customer":{"id":"cus_Q8x","email":"a@b.c"},"lines":[1,2,3]}`
	id := h.postAcme(raw).ID
	dest.waitFor(testenv.Scaled(30*time.Second), "both routes", func(rs []received) bool { return len(rs) == 2 })
	byRoute := map[string]received{}
	for _, q := range dest.snapshot() {
		byRoute[q.route] = q
	}
	l := byRoute["ledger"]
	require.JSONEq(t, `{"id":"in_1","amount":150000,"customer":"cus_Q8x"}`, string(l.body))
	require.Equal(t, `{"amount":150000,"customer":"cus_Q8x","id":"in_1"}`, string(l.body), "keys in order, compact")
	require.Equal(t, "application/json", l.header.Get("Content-Type"))
	require.Equal(t, "invoice.paid", l.header.Get("X-Ledger-Kind"))
	require.Equal(t, "acme", l.header.Get("X-Ledger-Source"))
	require.Equal(t, id, l.header.Get("webhook-id"))
	wh, err := standardwebhooks.NewWebhook(testSigningSecret)
	require.NoError(t, err)
	require.NoError(t, wh.Verify(l.body, l.header), "the signature covers the delivered body")
	require.JSONEq(t, `{"text":"Invoice in_1 paid: 1500 BRL"}`, string(byRoute["slack"].body))

	ev, err := h.db.EventGet(context.Background(), uuid.MustParse(id))
	require.NoError(t, err)
	require.Equal(t, raw, string(ev.Body), "the stored event is as received")
	h.waitPair(id, "ledger", webhook.StateDelivered)
	h.waitPair(id, "slack", webhook.StateDelivered)
	var versions int
	require.NoError(t, h.db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM delivery_attempts
		WHERE event_id = $1 AND outcome = 'delivered' AND route_version IS NULL`, id).Scan(&versions))
	require.Equal(t, 2, versions, "a route of config.yaml records no version")
}

// Issue 39: a transformation that fails on an event fails that attempt
// with reason transform_error, without a POST, and dead-letters the pair at
// once (it would fail the same way again), the error readable in the
// attempt. Once the route is changed, a requeue of its dead letters
// delivers the event shaped by the new version, and the attempt says so.
func TestFailingTransformDeadLettersOnceAndARequeueAfterTheFixDelivers(t *testing.T) {
	t.Parallel()
	h := newRuntimeHarness(t)
	dest := newDestination(t, func(http.ResponseWriter, *http.Request, []byte, string, int) int { return http.StatusOK })
	h.startDispatcher(app.DispatcherOptions{})
	h.create("ledger", map[string]any{"url": dest.url("ledger"), "bindings": []string{"acme.invoice.*"},
		"transform": `{"id": body.id, "customer": body.customer.id}`})
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Positive(c, h.consumers(c, h.names.RouteQueue("ledger"))) }, testenv.Scaled(5*time.Second), 20*time.Millisecond)

	id := h.postAcme(`{"id":"evt_nocust","type":"invoice.paid","amount":5}`).ID
	h.waitPair(id, "ledger", webhook.StateDead)
	amqptest.WaitCount(t, h.ch, h.names.DeadQueue("ledger"), 1, 10*time.Second)
	require.Empty(t, dest.snapshot(), "no POST")
	var attempts int
	var errText, outcome string
	require.NoError(t, h.db.Pool().QueryRow(context.Background(), `SELECT count(*), max(a.error), max(a.outcome)
		FROM delivery_attempts a JOIN deliveries d ON d.id = a.delivery_id WHERE d.event_id = $1 AND d.route = 'ledger'`, id).
		Scan(&attempts, &errText, &outcome))
	require.Equal(t, 1, attempts, "one attempt: no retry of what fails the same way")
	require.Equal(t, "dead", outcome)
	require.Contains(t, errText, "transform_error: no such key: customer")
	dead := peekManagement(t, h.names.DeadQueue("ledger"))
	require.Len(t, dead, 1)
	require.Equal(t, "transform_error", dead[0].header("x-hookrelay-dead-reason"))

	a := h.api.call("update-route", http.MethodPatch, "/api/v1/routes/ledger", adminToken,
		map[string]any{"transform": `{"id": body.id, "customer": body.?customer.?id.orValue("none")}`})
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	var d ops.RouteDetail
	a.decode(t, &d)
	require.Equal(t, int64(2), d.Version)
	// Every dispatcher has the change once the listing (which reads the
	// same routes) shows it; then the requeue.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var got ops.RouteDetail
		h.api.try(c, "get-route", http.MethodGet, "/api/v1/routes/ledger", adminToken, nil).decode(c, &got)
		assert.Equal(c, int64(2), got.Version)
	}, testenv.Scaled(2*time.Second), 20*time.Millisecond)
	a = h.api.call("requeue-dead-letters", http.MethodPost, "/api/v1/routes/ledger/dead-letters/requeue", adminToken, map[string]any{})
	require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
	var job ops.Job
	a.decode(t, &job)
	done, _ := h.api.waitJob(adminToken, job.ID.String(), 30*time.Second)
	require.Equal(t, "succeeded", done.State, "%s", done.Error)

	dest.waitFor(testenv.Scaled(30*time.Second), "the fixed delivery", func(rs []received) bool { return len(rs) == 1 })
	require.JSONEq(t, `{"id":"evt_nocust","customer":"none"}`, string(dest.snapshot()[0].body))
	h.waitPair(id, "ledger", webhook.StateDelivered)
	var version *int64
	require.NoError(t, h.db.Pool().QueryRow(context.Background(), `SELECT a.route_version
		FROM delivery_attempts a JOIN deliveries d ON d.id = a.delivery_id WHERE d.event_id = $1 AND d.route = 'ledger' AND a.outcome = 'delivered'`, id).Scan(&version))
	require.NotNil(t, version)
	require.Equal(t, int64(2), *version, "shaped by the route's second version")
}

// Issue 39: a run-time route's new filter holds for the events received
// after the change within 2 seconds: events are sent one after another
// from the moment the change is answered until one the old filter would
// have refused gets a pair.
func TestRouteFilterChangeIsFollowedWithinTwoSeconds(t *testing.T) {
	t.Parallel()
	h := newRuntimeHarness(t)
	dest := newDestination(t, func(http.ResponseWriter, *http.Request, []byte, string, int) int { return http.StatusOK })
	h.startDispatcher(app.DispatcherOptions{})
	h.create("big", map[string]any{"url": dest.url("big"), "bindings": []string{"acme.invoice.*"}, "filter": "body.amount > 1000"})
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Positive(c, h.consumers(c, h.names.RouteQueue("big"))) }, testenv.Scaled(5*time.Second), 20*time.Millisecond)
	before := h.postAcme(`{"id":"evt_before","type":"invoice.paid","amount":50}`).ID
	require.NotContains(t, h.pairsOf(before), "big", "the first filter refuses 50")

	a := h.api.call("update-route", http.MethodPatch, "/api/v1/routes/big", adminToken, map[string]any{"filter": "body.amount > 10"})
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	changed := time.Now()
	var taken string
	for i := 0; taken == ""; i++ {
		id := h.postAcme(fmt.Sprintf(`{"id":"evt_after_%d","type":"invoice.paid","amount":50}`, i)).ID
		if slices.Contains(h.pairsOf(id), "big") {
			taken = id
			break
		}
		require.Less(t, time.Since(changed), testenv.Scaled(2*time.Second), "the new filter holds within 2s of the change")
	}
	t.Logf("the new filter took an event %s after the change", time.Since(changed).Round(time.Millisecond))
	dest.waitFor(testenv.Scaled(30*time.Second), "the event the new filter took", func(rs []received) bool { return slices.Contains(eventsOf(rs), taken) })
	require.NotContains(t, eventsOf(dest.snapshot()), before)
}

// Issue 39: what POST /api/v1/routes/test answers for a route and a stored
// event is what a delivery of that event sends: the same body, byte for
// byte, and the same headers but the two a delivery makes at its moment
// (webhook-timestamp, webhook-signature). A filter that does not compile
// is refused when the route is saved, with its line and column.
func TestRouteTestAnswersWhatADeliverySends(t *testing.T) {
	t.Parallel()
	h := newRuntimeHarness(t)
	dest := newDestination(t, func(http.ResponseWriter, *http.Request, []byte, string, int) int { return http.StatusOK })
	h.startDispatcher(app.DispatcherOptions{})
	a := h.api.call("create-route", http.MethodPost, "/api/v1/routes", adminToken, map[string]any{"name": "bad", "url": dest.url("bad"),
		"bindings": []string{"acme.invoice.*"}, "filter": "body.amount >\n  bdy.limit"})
	require.Equal(t, http.StatusBadRequest, a.Status, "%s", a.Body)
	require.Contains(t, string(a.Body), "filter: 2:3: undeclared reference to 'bdy'")

	h.create("ledger", map[string]any{"url": dest.url("ledger"), "bindings": []string{"acme.invoice.*"},
		"headers":   map[string]string{"X-Api-Key": "k-123"},
		"filter":    `body.amount > 10`,
		"transform": `{"id": body.id, "cents": body.amount, "at": received_at}`, "transform_headers": `{"x-kind": event_type}`})
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Positive(c, h.consumers(c, h.names.RouteQueue("ledger"))) }, testenv.Scaled(5*time.Second), 20*time.Millisecond)
	id := h.postAcme(`{"id":"evt_same","type":"invoice.paid","amount":4200}`).ID
	dest.waitFor(testenv.Scaled(30*time.Second), "the delivery", func(rs []received) bool { return len(rs) == 1 })
	sent := dest.snapshot()[0]

	a = h.api.call("test-route", http.MethodPost, "/api/v1/routes/test", adminToken, map[string]any{"event_id": id, "route": "ledger"})
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	var res ops.RouteTestResult
	a.decode(t, &res)
	require.True(t, res.Matched)
	require.NotNil(t, res.BindingsMatch)
	require.True(t, *res.BindingsMatch)
	require.Equal(t, string(sent.body), res.Body, "the body a delivery sends")
	require.Equal(t, sent.header.Get("Content-Type"), res.ContentType)
	for name := range sent.header {
		switch name {
		case "Webhook-Timestamp", "Webhook-Signature", "Accept-Encoding", "Content-Length", "Traceparent", "Tracestate":
			continue
		case "X-Api-Key":
			require.Equal(t, "(set)", res.Headers[name], "the route's own header values are not shown")
			continue
		}
		require.Equal(t, sent.header.Get(name), res.Headers[name], "header %s", name)
	}
	require.Contains(t, res.Headers, "Webhook-Signature", "signed now with the route's secret")

	// Another filter, tried and not saved: the route is unchanged.
	a = h.api.call("test-route", http.MethodPost, "/api/v1/routes/test", adminToken,
		map[string]any{"event_id": id, "route": "ledger", "filter": "body.amount > 10000"})
	var other ops.RouteTestResult
	a.decode(t, &other)
	require.False(t, other.Matched)
	require.Empty(t, other.Body)
	var d ops.RouteDetail
	h.api.call("get-route", http.MethodGet, "/api/v1/routes/ledger", adminToken, nil).decode(t, &d)
	require.Equal(t, "body.amount > 10", d.Settings.Filter)
	require.Equal(t, int64(1), d.Version)
}

// Issue 39: an expression that runs past its cost limit is stopped, and
// the event is counted as one the filter could not judge: no pair.
func TestFilterPastItsCostIsStoppedAndCounted(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	dest := newDestination(t, func(http.ResponseWriter, *http.Request, []byte, string, int) int { return http.StatusOK })
	h.cfg.Rules = config.Rules{CostLimit: 1000, MaxOutputBytes: 1 << 20, Timeout: time.Second}
	all := testRoute("all", dest.url("all"), "acme.invoice.*")
	all.Filter = `body.items.all(x, body.items.all(y, x + y >= 0))`
	h.cfg.Routes = []config.Route{all}
	h.start(app.ReceiverOptions{})
	small := h.postAcme(`{"id":"evt_small","type":"invoice.paid","items":[1,2,3]}`).ID
	items := make([]string, 200)
	for i := range items {
		items[i] = fmt.Sprint(i)
	}
	large := h.postAcme(`{"id":"evt_large","type":"invoice.paid","items":[` + strings.Join(items, ",") + `]}`).ID
	require.Equal(t, []string{"all"}, h.pairsOf(small), "within the cost")
	require.Empty(t, h.pairsOf(large), "past the cost: stopped, no pair")
	m := scrape(t, h.metricsBase)
	require.Equal(t, 1.0, m[`hookrelay_route_filtered_total{result="error",route="all"}`])
}
