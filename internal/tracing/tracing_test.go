package tracing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/rs/zerolog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestEnabledReadsTheStandardVariablesAndRefusesConflicts(t *testing.T) {
	for _, c := range []struct {
		enabled bool
		env     map[string]string
		want    bool
		err     string
	}{
		{false, nil, false, ""},
		{true, nil, true, ""},
		{false, map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true, ""},
		{false, map[string]string{"OTEL_TRACES_EXPORTER": "none"}, false, ""},
		{true, map[string]string{"OTEL_TRACES_EXPORTER": "none"}, false, "choose one"},
		{true, map[string]string{"OTEL_SDK_DISABLED": "true"}, false, "choose one"},
		{false, map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, false, "OTLP only"},
	} {
		got, err := Enabled(c.enabled, env(c.env))
		if c.err != "" {
			require.ErrorContains(t, err, c.err, "%v %v", c.enabled, c.env)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, c.want, got, "%v %v", c.enabled, c.env)
	}
}

func TestStartRefusesAProtocolItCannotSpeak(t *testing.T) {
	_, err := Start(context.Background(), Settings{Enabled: true, Service: "x", Registerer: prometheus.NewRegistry(),
		Getenv: env(map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})})
	require.ErrorContains(t, err, `"http/json"`)
	_, err = Start(context.Background(), Settings{Enabled: true, Service: "x", Registerer: prometheus.NewRegistry(),
		Getenv: env(map[string]string{"OTEL_BSP_MAX_QUEUE_SIZE": "0"})})
	require.ErrorContains(t, err, "OTEL_BSP_MAX_QUEUE_SIZE")
	off, err := Start(context.Background(), Settings{Getenv: env(nil)})
	require.NoError(t, err)
	require.False(t, off.On())
	require.Nil(t, off.TracerOrNil())
}

// blockingExporter holds every export until released, then fails or
// passes it on.
type blockingExporter struct {
	release chan struct{}
	fail    bool
	mem     *tracetest.InMemoryExporter
}

func (e *blockingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	select {
	case <-e.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	if e.fail {
		return errors.New("collector down")
	}
	return e.mem.ExportSpans(ctx, spans)
}

func (e *blockingExporter) Shutdown(context.Context) error { return nil }

// gated builds the processor chain Start builds, over exp.
func gated(exp sdktrace.SpanExporter, limit int) (*sdktrace.TracerProvider, *metrics) {
	m := newMetrics(prometheus.NewRegistry())
	counted := &countingExporter{SpanExporter: exp, m: m}
	g := &gate{limit: int64(limit), m: m}
	counted.gate = g
	g.next = sdktrace.NewBatchSpanProcessor(counted, sdktrace.WithMaxQueueSize(limit), sdktrace.WithMaxExportBatchSize(limit))
	return sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(g)), m
}

// Ending a span never waits for the collector: past the queue's length,
// spans are dropped and counted; a failed export counts its spans too.
func TestTheGateDropsAndCountsInsteadOfWaiting(t *testing.T) {
	exp := &blockingExporter{release: make(chan struct{}), fail: true, mem: tracetest.NewInMemoryExporter()}
	tp, m := gated(exp, 8)
	tr := tp.Tracer("t")
	for range 100 {
		_, s := tr.Start(context.Background(), "s")
		s.End() // returns at once while every export hangs
	}
	require.Equal(t, 92.0, testutil.ToFloat64(m.dropped.WithLabelValues(dropQueueFull)))
	close(exp.release)
	require.NoError(t, tp.ForceFlush(context.Background()))
	require.Equal(t, 8.0, testutil.ToFloat64(m.dropped.WithLabelValues(dropExportFailed)))
	require.Equal(t, 0.0, testutil.ToFloat64(m.exported))
	require.Equal(t, 0.0, testutil.ToFloat64(m.queued))

	// Once the collector answers, spans go again.
	exp.fail = false
	for range 5 {
		_, s := tr.Start(context.Background(), "s")
		s.End()
	}
	require.NoError(t, tp.ForceFlush(context.Background()))
	require.Equal(t, 5.0, testutil.ToFloat64(m.exported))
	require.Len(t, exp.mem.GetSpans(), 5)
}

// A client span's url.full leaves without the destination's credentials,
// query or fragment; other spans leave as they are.
func TestExportedSpansLoseTheURLQuery(t *testing.T) {
	mem := tracetest.NewInMemoryExporter()
	exp := &blockingExporter{release: make(chan struct{}), mem: mem}
	close(exp.release)
	tp, _ := gated(exp, 16)
	tr := tp.Tracer("t")
	_, s := tr.Start(context.Background(), "POST", trace.WithSpanKind(trace.SpanKindClient))
	s.SetAttributes(attribute.String("url.full", "https://u:p@hooks.example.com/in/abc?token=secret#frag"), attribute.Int("http.response.status_code", 200))
	s.End()
	_, s = tr.Start(context.Background(), "other")
	s.SetAttributes(attribute.String("hookrelay.route", "billing"))
	s.End()
	require.NoError(t, tp.ForceFlush(context.Background()))
	got := map[string]map[attribute.Key]string{}
	for _, sp := range mem.GetSpans() {
		a := map[attribute.Key]string{}
		for _, kv := range sp.Attributes {
			a[kv.Key] = kv.Value.Emit()
		}
		got[sp.Name] = a
	}
	require.Equal(t, "https://hooks.example.com/in/abc", got["POST"]["url.full"])
	require.Equal(t, "200", got["POST"]["http.response.status_code"])
	require.Equal(t, "billing", got["other"]["hookrelay.route"])
}

// Of writes the traceparent the W3C propagator writes.
func TestOfWritesWhatThePropagatorWrites(t *testing.T) {
	for _, sampler := range []sdktrace.Sampler{sdktrace.AlwaysSample(), sdktrace.NeverSample()} {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler))
		ctx, s := tp.Tracer("t").Start(context.Background(), "s")
		m := propagation.MapCarrier{}
		Propagator.Inject(ctx, m)
		require.Equal(t, m[HeaderTraceParent], Of(ctx).Parent)
		s.End()
	}
	require.Equal(t, Context{}, Of(context.Background()))
}

func TestContextRoundTripsAndLinks(t *testing.T) {
	p := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	c := Context{Parent: p, State: "vendor=x"}
	ctx := c.Into(context.Background())
	require.Equal(t, c, Of(trace.ContextWithSpanContext(context.Background(), trace.SpanContextFromContext(ctx))))
	require.Equal(t, "0af7651916cd43dd8448eb211c80319c", TraceID(p))
	require.Equal(t, "", TraceID("garbage"))
	require.True(t, Context{}.IsZero())
	require.Equal(t, context.Background(), Context{Parent: "nope"}.Into(context.Background()))
	require.Equal(t, "http://j/trace/abc", Link("http://j/trace/{trace_id}", "abc"))
	require.Equal(t, "", Link("", "abc"))
	require.Equal(t, "", Link("http://j/{trace_id}", ""))
}

// Issue 38, first-time user 2: with tracing on and no endpoint set, spans go
// to Jaeger's default, http://localhost:4318, in plain HTTP, as
// docs/operating.md says (the exporter's own default was https, a TLS hello
// to a plain receiver that exported nothing). The receiver listens on the
// documented address itself, so the port is fixed: nothing else in the
// suite uses it.
func TestDefaultEndpointIsPlainHTTPOnLocalhost4318(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
		"OTEL_EXPORTER_OTLP_INSECURE", "OTEL_EXPORTER_OTLP_TRACES_INSECURE", "OTEL_EXPORTER_OTLP_PROTOCOL",
		"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED"} {
		t.Setenv(k, "")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:4318")
	require.NoError(t, err, "the documented default endpoint's port must be free for this test")
	got := make(chan string, 16)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		select {
		case got <- fmt.Sprintf("%s %s %s %d", r.Method, r.URL.Path, r.Header.Get("Content-Type"), len(body)):
		default:
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	srv.Listener = ln
	srv.Start()
	defer srv.Close()

	tr, err := Start(context.Background(), Settings{Enabled: true, Service: "hookrelay-test",
		Registerer: prometheus.NewRegistry(), Logger: zerolog.Nop(), Getenv: os.Getenv})
	require.NoError(t, err)
	_, span := tr.Tracer.Start(context.Background(), "POST /webhooks/demo")
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Scaled(10*time.Second))
	defer cancel()
	require.NoError(t, tr.Shutdown(ctx), "the export reached a plain-HTTP receiver")
	select {
	case req := <-got:
		require.Regexp(t, `^POST /v1/traces application/x-protobuf [1-9]\d*$`, req)
	default:
		require.FailNow(t, "no export reached http://localhost:4318")
	}
}
