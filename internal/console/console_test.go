package console

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/stretchr/testify/require"
)

func TestPagesParse(t *testing.T) {
	pages, err := parsePages()
	require.NoError(t, err)
	require.Len(t, pages, len(pageNames))
}

func TestAgo(t *testing.T) {
	now := time.Now()
	require.Equal(t, "4 min ago", ago(now.Add(-4*time.Minute-time.Second)))
	require.Equal(t, "3 h ago", ago(now.Add(-3*time.Hour-time.Second)))
	require.Equal(t, "5 days ago", ago(now.Add(-5*24*time.Hour-time.Second)))
}

// Every answer carries the policy that allows no script and no framing.
func TestSecurityHeaders(t *testing.T) {
	rec := httptest.NewRecorder()
	securityHeaders(http.NotFoundHandler()).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	require.Equal(t, CSP, rec.Header().Get("Content-Security-Policy"))
	require.Contains(t, CSP, "default-src 'none'")
	require.NotContains(t, CSP, "script-src")
	require.Equal(t, "nosniff", rec.Header().Get("X-Content-Type-Options"))
}

// The event page renders an event with a failed and a delivered pair,
// their paths and the replay form.
func TestEventPageRenders(t *testing.T) {
	pages, err := parsePages()
	require.NoError(t, err)
	now := time.Now()
	status, errText := 500, "boom"
	ev := &ops.EventDetail{ID: uuid.New(), Source: "acme", EventType: "invoice.paid", ReceivedAt: now, Body: "{}"}
	failed := ops.DeliveryDetail{Series: 2, AttemptRows: []store.AttemptRow{
		{Attempt: 1, Series: 1, StartedAt: now, DurationMS: 12, Status: &status, Outcome: "retrying"},
		{Attempt: 2, Series: 1, StartedAt: now, DurationMS: 9, Error: &errText, Outcome: "dead"},
	}}
	failed.Route, failed.State = "billing", "dead"
	ev.Deliveries = []ops.DeliveryDetail{failed}
	var buf bytes.Buffer
	err = pages["event"].Execute(&buf, map[string]any{"Event": ev, "Body": "{}", "User": user{Actor: "token:t", Role: ops.RoleOperator},
		"Page": "event", "Traces": map[string][]step{"billing": trace(ev, failed)}, "Routes": []string{"billing"}})
	require.NoError(t, err)
	html := buf.String()
	require.Contains(t, html, "Replay now")
	require.Contains(t, html, "attempt 1.1: HTTP 500 in 12ms → failed, sent to a retry tier")
	require.Contains(t, html, "moved to the route&#39;s dead-letter queue")
	require.Contains(t, html, "series 2 began: replayed or requeued, no attempt yet")
	require.NotContains(t, html, "Trace", "no trace without tracing")

	// With tracing: the event's trace, linked, and a replay's attempt in a
	// trace of its own.
	ev.TraceID, ev.TraceLink = "0af7651916cd43dd8448eb211c80319c", "http://jaeger:16686/trace/0af7651916cd43dd8448eb211c80319c"
	failed.AttemptRows[0].TraceID = ev.TraceID
	failed.AttemptRows[1].TraceID, failed.AttemptRows[1].TraceLink = "4bf92f3577b34da6a3ce929d0e0e4736", "http://jaeger:16686/trace/4bf92f3577b34da6a3ce929d0e0e4736"
	ev.Deliveries = []ops.DeliveryDetail{failed}
	buf.Reset()
	err = pages["event"].Execute(&buf, map[string]any{"Event": ev, "Body": "{}", "User": user{Actor: "token:t", Role: ops.RoleOperator},
		"Page": "event", "Traces": map[string][]step{"billing": trace(ev, failed)}, "Routes": []string{"billing"}})
	require.NoError(t, err)
	html = buf.String()
	require.Contains(t, html, `<dt>Trace</dt><dd id="trace"><a href="http://jaeger:16686/trace/0af7651916cd43dd8448eb211c80319c" rel="noopener noreferrer"><code>0af7651916cd43dd8448eb211c80319c</code></a></dd>`)
	require.Equal(t, 1, strings.Count(html, `class="attempt-trace"`), "only the attempt in another trace is marked")
	require.Contains(t, html, `href="http://jaeger:16686/trace/4bf92f3577b34da6a3ce929d0e0e4736"`)
}

// Issue 41: a fifo route's page says how many events wait, and lists each
// resource held back with its head event.
func TestRoutePageShowsHeldResources(t *testing.T) {
	pages, err := parsePages()
	require.NoError(t, err)
	head := uuid.New()
	wait := 42.0
	route := &ops.RouteSummary{Route: "ledger", Queue: "hookrelay.route.ledger", Bindings: []string{"stripe.#"}, Ordering: "fifo",
		Waiting: 3, WaitingResources: 1, LongestWaitSeconds: &wait, Dead: 1,
		Held: []ops.LaneHead{{Source: "stripe", Resource: "sub_A", EventID: head, State: "dead", Attempts: 4, Waiting: 3, Since: time.Now().Add(-time.Minute)}}}
	var buf bytes.Buffer
	err = pages["route"].Execute(&buf, map[string]any{"Route": route, "User": user{Actor: "token:t", Role: ops.RoleViewer}, "Page": "route"})
	require.NoError(t, err)
	html := buf.String()
	require.Contains(t, html, "3 event(s) of 1 resource(s) wait behind an earlier one, the oldest 42s")
	require.Contains(t, html, `<a href="/events/`+head.String()+`"><code>`+head.String()+`</code></a></td><td class="state">dead</td><td>4</td><td>3</td>`)
	require.Contains(t, html, "hookrelay routes skip ledger --event ID")

	// An unordered route shows neither.
	route.Ordering, route.Held = "", nil
	buf.Reset()
	require.NoError(t, pages["route"].Execute(&buf, map[string]any{"Route": route, "User": user{Actor: "token:t", Role: ops.RoleViewer}, "Page": "route"}))
	require.NotContains(t, buf.String(), "Resources held back")
	require.NotContains(t, buf.String(), "wait behind")
}
