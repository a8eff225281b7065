package app_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/hookrelay/hookrelay/internal/webhook"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
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
	var routes []string
	rows, err := h.db.Pool().Query(context.Background(), `SELECT route FROM deliveries WHERE event_id = $1 ORDER BY route`, id)
	require.NoError(h.t, err)
	for rows.Next() {
		var r string
		require.NoError(h.t, rows.Scan(&r))
		routes = append(routes, r)
	}
	require.NoError(h.t, rows.Err())
	return routes
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
