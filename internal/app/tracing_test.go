package app_test

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// span is one span as an OTLP/HTTP collector received it.
type span struct {
	service  string
	traceID  string
	spanID   string
	parentID string
	name     string
	kind     tracepb.Span_SpanKind
	start    time.Time
	end      time.Time
	attrs    map[string]string
	links    []string // trace ids
	events   []string
	status   tracepb.Status_StatusCode
}

// otlpCollector is an OTLP/HTTP trace receiver inside the test: it decodes
// each export request's protobuf and keeps its spans.
type otlpCollector struct {
	srv   *httptest.Server
	mu    sync.Mutex
	spans []span
	// requests counts the export requests.
	requests int
}

func newOTLPCollector(t *testing.T) *otlpCollector {
	c := &otlpCollector{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
			http.Error(w, "not here", http.StatusNotFound)
			return
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		raw, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req coltracepb.ExportTraceServiceRequest
		if r.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(raw, &req) != nil {
			http.Error(w, "want an OTLP protobuf export request", http.StatusBadRequest)
			return
		}
		c.add(&req)
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *otlpCollector) add(req *coltracepb.ExportTraceServiceRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requests++
	for _, rs := range req.ResourceSpans {
		service := attrsOf(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				sp := span{
					service: service, traceID: hex.EncodeToString(s.TraceId), spanID: hex.EncodeToString(s.SpanId),
					parentID: hex.EncodeToString(s.ParentSpanId), name: s.Name, kind: s.Kind,
					start: time.Unix(0, int64(s.StartTimeUnixNano)), end: time.Unix(0, int64(s.EndTimeUnixNano)),
					attrs: attrsOf(s.Attributes), status: s.GetStatus().GetCode(),
				}
				for _, l := range s.Links {
					sp.links = append(sp.links, hex.EncodeToString(l.TraceId))
				}
				for _, e := range s.Events {
					sp.events = append(sp.events, e.Name)
				}
				c.spans = append(c.spans, sp)
			}
		}
	}
}

func attrsOf(kvs []*commonpb.KeyValue) map[string]string {
	out := map[string]string{}
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			out[kv.Key] = x.StringValue
		case *commonpb.AnyValue_IntValue:
			out[kv.Key] = fmt.Sprint(x.IntValue)
		case *commonpb.AnyValue_BoolValue:
			out[kv.Key] = fmt.Sprint(x.BoolValue)
		case *commonpb.AnyValue_DoubleValue:
			out[kv.Key] = fmt.Sprint(x.DoubleValue)
		default:
			out[kv.Key] = v.String()
		}
	}
	return out
}

// trace returns the spans of trace id.
func (c *otlpCollector) trace(id string) []span {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []span
	for _, s := range c.spans {
		if s.traceID == id {
			out = append(out, s)
		}
	}
	return out
}

func (c *otlpCollector) all() []span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.spans)
}

// tracingEnv turns tracing on in a process and sends its spans to
// endpoint over OTLP/HTTP, exported every 100ms.
func tracingEnv(endpoint string) []string {
	return []string{
		"OTEL_TRACES_EXPORTER=otlp",
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + endpoint,
		"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_BSP_SCHEDULE_DELAY=100",
	}
}

func named(spans []span, name string) []span {
	var out []span
	for _, s := range spans {
		if s.name == name {
			out = append(out, s)
		}
	}
	return out
}

// The first "Done when": the real receiver and dispatcher binaries,
// tracing to a collector inside the test; one event whose destination
// fails once and then answers 200 makes one trace with spans from both
// processes, each span's parent in it, two delivery attempts with their
// status codes, the retry tier's wait between them, and the destination
// saw a traceparent of that trace on both requests.
func TestOneTraceFollowsAnEventThroughBothProcessesAndTheBroker(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	col := newOTLPCollector(t)

	var mu sync.Mutex
	var seen []string // the traceparent of each request
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("traceparent"))
		n := len(seen)
		mu.Unlock()
		if n == 1 {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer dest.Close()
	// A token in the query must not leave for the collector.
	h.cfg.Routes = []config.Route{testRoute("billing", dest.URL+"/hook?token=sekret-query-token", "acme.invoice.*")}
	h.cfg.Log.Level = "info"
	h.cfg.Tracing.LinkTemplate = "http://jaeger.example:16686/trace/{trace_id}"
	env := tracingEnv(col.srv.URL)
	rp, _ := h.startReceiverProcess(env...)
	dp := h.startDispatcherProcess(env...)
	h.base = rp.base

	id := uuid.NewString()
	r := h.postSigned(id, "invoice.paid")
	require.Equal(t, http.StatusOK, r.status, r.Error)
	h.waitPair(r.ID, "billing", webhook.StateDelivered)

	// The event's trace id, as stored and as the CLI shows it.
	var traceParent string
	require.NoError(t, h.db.Pool().QueryRow(context.Background(),
		`SELECT COALESCE(trace_parent, '') FROM events WHERE id = $1`, r.ID).Scan(&traceParent))
	require.Len(t, traceParent, 55, "events.trace_parent holds a W3C traceparent")
	traceID := traceParent[3:35]

	// Both attempts, with their spans: each process exports every 100ms.
	// Each process exports on its own, every 100ms: wait for the last
	// span of each.
	tier := h.names.Retry(h.cfg.Retry.Backoff[0])
	var spans []span
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		spans = col.trace(traceID)
		require.Len(c, named(spans, "deliver billing"), 2)
		require.Len(c, named(spans, "POST"), 2)
		require.Len(c, named(spans, "publish "+tier), 1)
		require.Len(c, named(spans, "publish "+h.names.Events()), 1)
		require.Len(c, named(spans, "POST /webhooks/{source}"), 1)
	}, testenv.Scaled(20*time.Second), 50*time.Millisecond)
	var lines []string
	byID := map[string]span{}
	for _, s := range spans {
		byID[s.spanID] = s
		lines = append(lines, fmt.Sprintf("%s %s %s<-%s %v", s.service, s.name, s.spanID, s.parentID, s.attrs))
	}
	sort.Strings(lines)
	t.Logf("trace %s:\n%s", traceID, strings.Join(lines, "\n"))

	// One root, the receiver's server span; every other span's parent is
	// in the trace.
	var roots []span
	services := map[string]bool{}
	for _, s := range spans {
		services[s.service] = true
		if s.parentID == "" {
			roots = append(roots, s)
			continue
		}
		_, ok := byID[s.parentID]
		require.True(t, ok, "span %q (%s) has its parent %s in the trace", s.name, s.service, s.parentID)
	}
	require.Len(t, roots, 1)
	require.Equal(t, "POST /webhooks/{source}", roots[0].name)
	require.Equal(t, tracepb.Span_SPAN_KIND_SERVER, roots[0].kind)
	require.Equal(t, map[string]bool{"hookrelay-receiver": true, "hookrelay-dispatcher": true}, services)
	for _, name := range []string{"verify signature", "store event"} {
		got := named(spans, name)
		require.Len(t, got, 1, name)
		require.Equal(t, roots[0].spanID, got[0].parentID, "%s is the request's", name)
	}
	require.Equal(t, "1", named(spans, "store event")[0].attrs["hookrelay.batch.size"])

	// The first copy's publish (receiver) → attempt 1 (dispatcher) → the
	// retry copy's publish to its tier (receiver's outbox) → the wait in
	// the tier and attempt 2 (dispatcher).
	deliveries := named(spans, "deliver billing")
	sort.Slice(deliveries, func(i, j int) bool {
		return deliveries[i].attrs["hookrelay.attempt"] < deliveries[j].attrs["hookrelay.attempt"]
	})
	first, second := deliveries[0], deliveries[1]
	require.Equal(t, "1", first.attrs["hookrelay.attempt"])
	require.Equal(t, "2", second.attrs["hookrelay.attempt"])
	require.Equal(t, tracepb.Span_SPAN_KIND_CONSUMER, first.kind)
	publish1 := byID[first.parentID]
	require.Equal(t, "publish "+h.names.Events(), publish1.name)
	require.Equal(t, "hookrelay-receiver", publish1.service)
	require.Equal(t, tracepb.Span_SPAN_KIND_PRODUCER, publish1.kind)
	require.Equal(t, roots[0].spanID, publish1.parentID)

	publish2 := byID[second.parentID]
	require.Equal(t, "publish "+tier, publish2.name)
	require.Equal(t, "hookrelay-receiver", publish2.service)
	require.Equal(t, first.spanID, publish2.parentID, "the retry copy continues attempt 1's delivery")
	require.Equal(t, tier, second.attrs["hookrelay.retry_tier"])
	waits := named(spans, "wait in "+tier)
	require.Len(t, waits, 1)
	require.Equal(t, publish2.spanID, waits[0].parentID)
	require.False(t, waits[0].start.Before(publish2.start), "the wait starts at the retry copy's publish")
	require.False(t, waits[0].end.After(second.start.Add(time.Millisecond)), "and ends as attempt 2 begins")

	for _, d := range deliveries {
		require.Equal(t, []string{"claim", "record"}, d.events, "attempt %s: the claim and the record", d.attrs["hookrelay.attempt"])
	}
	require.Equal(t, "retrying", first.attrs["hookrelay.outcome"])
	require.Equal(t, tracepb.Status_STATUS_CODE_ERROR, first.status)
	require.Equal(t, "delivered", second.attrs["hookrelay.outcome"])
	posts := map[string]span{}
	for _, p := range named(spans, "POST") {
		require.Equal(t, tracepb.Span_SPAN_KIND_CLIENT, p.kind)
		posts[byID[p.parentID].attrs["hookrelay.attempt"]] = p
	}
	require.Equal(t, "500", posts["1"].attrs["http.response.status_code"])
	require.Equal(t, "200", posts["2"].attrs["http.response.status_code"])
	require.Equal(t, "POST", posts["1"].attrs["http.request.method"])
	require.Equal(t, dest.URL+"/hook", posts["1"].attrs["url.full"], "the query stays out of the span")

	// The destination saw traceparent of the trace, naming the POST's
	// client span as its parent.
	mu.Lock()
	got := slices.Clone(seen)
	mu.Unlock()
	require.Len(t, got, 2)
	for i, tp := range got {
		parts := strings.Split(tp, "-")
		require.Len(t, parts, 4, "traceparent %q", tp)
		require.Equal(t, traceID, parts[1])
		require.Equal(t, posts[fmt.Sprint(i+1)].spanID, parts[2])
	}

	// Nothing secret left for the collector.
	for _, s := range col.all() {
		for k, v := range s.attrs {
			require.NotContains(t, v, "sekret", "span %q attribute %s", s.name, k)
		}
	}

	// The attempts are stored with the trace; the dispatcher's log lines
	// about the event carry it; the CLI shows it with its link.
	var attemptTraces []string
	rows, err := h.db.Pool().Query(context.Background(),
		`SELECT COALESCE(trace_id, '') FROM delivery_attempts WHERE event_id = $1 ORDER BY attempt`, r.ID)
	require.NoError(t, err)
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		attemptTraces = append(attemptTraces, s)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{traceID, traceID}, attemptTraces)
	require.Contains(t, dp.output(), `"trace_id":"`+traceID+`"`)
	for _, line := range strings.Split(dp.output(), "\n") {
		if strings.Contains(line, r.ID) {
			require.Contains(t, line, `"trace_id":"`+traceID+`"`, "a log line about the event: %s", line)
		}
	}
	cli := *h.cfg
	cli.Receiver, cli.Dispatcher = config.Receiver{}, config.Dispatcher{}
	cfgPath := configFile(t, t.TempDir(), &cli)
	out, err := exec.Command(filepath.Join(testenv.Binaries(t), "hookrelay"), "events", "show", r.ID, "--config", cfgPath).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "trace      "+traceID+"  http://jaeger.example:16686/trace/"+traceID)

	// A replay starts a trace of its own, linked to the event's; its
	// attempt is stored with it, and the CLI shows both.
	out, err = exec.Command(filepath.Join(testenv.Binaries(t), "hookrelay"), "replay", "--event", r.ID, "--route", "billing",
		"--include-delivered", "--config", cfgPath).CombinedOutput()
	require.NoError(t, err, "%s", out)
	var replayTrace string
	var replayRoot []span
	// Each process exports on its own: the receiver's publish (the root)
	// may arrive after the dispatcher's delivery.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, h.db.Pool().QueryRow(context.Background(),
			`SELECT COALESCE(trace_id, '') FROM delivery_attempts WHERE event_id = $1 AND series = 2`, r.ID).Scan(&replayTrace))
		require.NotEmpty(c, replayTrace)
		replayed := col.trace(replayTrace)
		require.Len(c, named(replayed, "deliver billing"), 1)
		replayRoot = nil
		for _, s := range replayed {
			if s.parentID == "" {
				replayRoot = append(replayRoot, s)
			}
		}
		require.Len(c, replayRoot, 1)
	}, testenv.Scaled(20*time.Second), 50*time.Millisecond)
	require.NotEqual(t, traceID, replayTrace)
	require.Equal(t, "publish "+h.names.RouteQueue("billing"), replayRoot[0].name)
	require.Equal(t, []string{traceID}, replayRoot[0].links, "the replay's trace links to the event's")
	out, err = exec.Command(filepath.Join(testenv.Binaries(t), "hookrelay"), "events", "show", r.ID, "--config", cfgPath).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "series 2 attempt 1: trace "+replayTrace+"  http://jaeger.example:16686/trace/"+replayTrace)
}

// The second "Done when": spans for a collector that accepts
// connections and never answers (a hung collector: worse than a refused
// port, which fails at once) change nothing for ingest and delivery:
// every webhook answered 200 at the speed of the same run's untraced
// receiver, every event delivered, and the spans that could not go are
// counted as dropped.
func TestAHungCollectorNeitherBlocksIngestNorDeliveryAndDropsAreCounted(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	hung, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var held []net.Conn
	var heldMu sync.Mutex
	go func() {
		for {
			c, err := hung.Accept()
			if err != nil {
				return
			}
			heldMu.Lock()
			held = append(held, c) // read nothing, answer nothing
			heldMu.Unlock()
		}
	}()
	t.Cleanup(func() {
		hung.Close()
		heldMu.Lock()
		for _, c := range held {
			c.Close()
		}
		heldMu.Unlock()
	})
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer dest.Close()
	h.cfg.Routes = []config.Route{testRoute("billing", dest.URL, "acme.invoice.*")}
	// A short export timeout and a small queue: the hang shows as both
	// drop reasons within the test.
	env := append(tracingEnv("http://"+hung.Addr().String()),
		"OTEL_BSP_EXPORT_TIMEOUT=1000", "OTEL_BSP_MAX_QUEUE_SIZE=64", "OTEL_EXPORTER_OTLP_TIMEOUT=1000")
	rp, metrics := h.startReceiverProcess(env...)
	dp := h.startDispatcherProcess(env...)

	// The same run's baseline: a receiver process without tracing, on the
	// same database and broker.
	plain, _ := h.startReceiverProcess()

	const n = 60
	latencies := func(base string, tag string) []time.Duration {
		h.base = base
		var out []time.Duration
		for i := range n {
			start := time.Now()
			r := h.postSigned(fmt.Sprintf("%s-%d", tag, i), "invoice.paid")
			out = append(out, time.Since(start))
			require.Equal(t, http.StatusOK, r.status, r.Error)
		}
		slices.Sort(out)
		return out
	}
	// Interleaved rounds, so a slow moment of the machine hits both.
	var traced, untraced []time.Duration
	for round := range 3 {
		traced = append(traced, latencies(rp.base, fmt.Sprintf("traced-%d", round))...)
		untraced = append(untraced, latencies(plain.base, fmt.Sprintf("plain-%d", round))...)
	}
	slices.Sort(traced)
	slices.Sort(untraced)
	p := func(d []time.Duration, q float64) time.Duration { return d[int(q*float64(len(d)-1))] }
	t.Logf("answer latency, hung collector vs no tracing: p50 %v vs %v, p99 %v vs %v, max %v vs %v",
		p(traced, .5), p(untraced, .5), p(traced, .99), p(untraced, .99), traced[len(traced)-1], untraced[len(untraced)-1])
	// A span end that waited for the collector would hold an answer for
	// the export timeout (1s) at least; none did.
	require.Less(t, traced[len(traced)-1], time.Second, "no answer waited for the collector")

	// Every event delivered.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var left int
		require.NoError(c, h.db.Pool().QueryRow(context.Background(),
			`SELECT count(*) FROM deliveries WHERE state <> 'delivered'`).Scan(&left))
		require.Zero(c, left)
	}, testenv.Scaled(30*time.Second), 50*time.Millisecond)

	// The drops are counted, both ways: the queue was full while an export
	// hung, and the hung exports timed out.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		m := scrape(c, metrics)
		require.Greater(c, m[`hookrelay_trace_spans_dropped_total{reason="queue_full"}`], 0.0)
		require.Greater(c, m[`hookrelay_trace_spans_dropped_total{reason="export_failed"}`], 0.0)
		require.Zero(c, m[`hookrelay_trace_spans_exported_total`])
		d := scrape(c, dp.base)
		require.Greater(c, d[`hookrelay_trace_spans_dropped_total{reason="export_failed"}`]+
			d[`hookrelay_trace_spans_dropped_total{reason="queue_full"}`], 0.0)
	}, testenv.Scaled(30*time.Second), 100*time.Millisecond)
}
