// Package tracing is hookrelay's OpenTelemetry set-up: one trace per event,
// from the receiver's answer through the outbox, the broker, the retry tiers
// and each delivery attempt, exported over OTLP when enabled.
//
// It is off unless tracing.enabled is set or OTEL_TRACES_EXPORTER=otlp.
// Everything else comes from the standard OTEL_* environment variables, read
// by the SDK and its exporters: the endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), the protocol (http/protobuf, the
// default, or grpc), headers, timeout, the sampler (OTEL_TRACES_SAMPLER and
// its argument), the batch processor (OTEL_BSP_*), the service name and
// resource attributes.
//
// Spans leave through the SDK's batch processor, behind a gate of ours that
// holds at most OTEL_BSP_MAX_QUEUE_SIZE spans between their end and their
// export: ending a span never waits, whatever the collector does. A span the
// gate turns away (the queue is full: the collector is slow or down) or
// whose export failed is counted in hookrelay_trace_spans_dropped_total, by
// reason; the SDK's own batch processor counts its drops only through its
// experimental self-observability metrics, hence the gate. No span leaves
// with a URL's query or credentials (redactAll).
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// InstrumentationName names hookrelay's tracer.
const InstrumentationName = "github.com/hookrelay/hookrelay"

// Settings configures tracing for one process.
type Settings struct {
	// Enabled is tracing.enabled; OTEL_TRACES_EXPORTER=otlp enables it too.
	Enabled bool
	// Service is the default service.name (OTEL_SERVICE_NAME wins), e.g.
	// hookrelay-receiver.
	Service string
	// Registerer gets the exporter's metrics.
	Registerer prometheus.Registerer
	Logger     zerolog.Logger
	// Getenv reads the variables this package reads itself (whether
	// tracing is on, the protocol, the queue's length); os.Getenv when nil.
	// The SDK and the exporters read the process's environment.
	Getenv func(string) string
}

// Tracing is a process's tracer and its exporter.
type Tracing struct {
	// Tracer makes hookrelay's spans: a no-op one when tracing is off.
	Tracer trace.Tracer
	// Provider is the tracer provider (otelhttp takes it), no-op when off.
	Provider trace.TracerProvider
	sdk      *sdktrace.TracerProvider
}

// Off is tracing turned off: spans cost next to nothing and go nowhere.
func Off() *Tracing {
	p := noop.NewTracerProvider()
	return &Tracing{Tracer: p.Tracer(InstrumentationName), Provider: p}
}

// With is tracing on tp, a provider set up elsewhere (a test's).
func With(tp *sdktrace.TracerProvider) *Tracing {
	return &Tracing{Tracer: tp.Tracer(InstrumentationName), Provider: tp, sdk: tp}
}

// On says whether spans are exported.
func (t *Tracing) On() bool { return t != nil && t.sdk != nil }

// Enabled says whether tracing is on for a process whose tracing.enabled
// is enabled, given OTEL_TRACES_EXPORTER: otlp turns it on, none keeps it
// off only when tracing.enabled is not set (asked for both ways, it is an
// error), any other exporter is an error (only OTLP is built in).
func Enabled(enabled bool, getenv func(string) string) (bool, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if v := strings.TrimSpace(getenv("OTEL_SDK_DISABLED")); strings.EqualFold(v, "true") {
		if enabled {
			return false, errors.New("tracing.enabled is true but OTEL_SDK_DISABLED=true: choose one")
		}
		return false, nil
	}
	switch v := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); v {
	case "":
		return enabled, nil
	case "otlp":
		return true, nil
	case "none":
		if enabled {
			return false, errors.New("tracing.enabled is true but OTEL_TRACES_EXPORTER=none: choose one")
		}
		return false, nil
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: hookrelay exports traces over OTLP only (otlp or none)", v)
	}
}

// Start sets tracing up as s says: Off when it is not enabled. Its
// Shutdown flushes what is queued, bounded by its context.
func Start(ctx context.Context, s Settings) (*Tracing, error) {
	getenv := s.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	on, err := Enabled(s.Enabled, getenv)
	if err != nil || !on {
		return Off(), err
	}
	if s.Registerer == nil {
		return nil, errors.New("tracing: Registerer is required")
	}
	queue, err := envInt(getenv, "OTEL_BSP_MAX_QUEUE_SIZE", 2048)
	if err != nil {
		return nil, err
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(s.Service)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
	)
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	exp, err := newExporter(ctx, getenv) // last: nothing after it can fail
	if err != nil {
		return nil, err
	}
	m := newMetrics(s.Registerer)
	counted := &countingExporter{SpanExporter: exp, m: m}
	// The batch processor's queue is as long as the gate's, so the gate
	// turns spans away before the processor would (it reads the same
	// OTEL_BSP_MAX_QUEUE_SIZE).
	g := &gate{limit: int64(queue), m: m}
	counted.gate = g
	g.next = sdktrace.NewBatchSpanProcessor(counted, sdktrace.WithMaxQueueSize(queue))
	// The sampler comes from OTEL_TRACES_SAMPLER (parent-based always-on
	// by default): the SDK reads it when none is given here.
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(g), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(Propagator)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		// Export failures are counted, and logged here at most as often
		// as the batch processor exports.
		s.Logger.Warn().Err(err).Msg("tracing")
	}))
	s.Logger.Info().Str("protocol", protocol(getenv)).Str("endpoint", endpoint(getenv)).Int("queue", queue).
		Msg("tracing on: exporting spans over OTLP")
	return With(tp), nil
}

// Shutdown exports what is queued and stops, within ctx: a collector that
// is down delays a stop by ctx's deadline at most.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if !t.On() {
		return nil
	}
	if err := t.sdk.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: shutdown: %w", err)
	}
	return nil
}

// Propagator carries trace context as W3C traceparent and tracestate, in
// HTTP headers and in AMQP message headers.
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

func protocol(getenv func(string) string) string {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if v := strings.TrimSpace(getenv(k)); v != "" {
			return v
		}
	}
	return "http/protobuf"
}

// newExporter is the OTLP exporter of the protocol the environment names;
// the exporter reads its endpoint, headers, timeout and TLS settings there.
//
// With no endpoint set it sends to the OTLP default, localhost:4318 (4317
// for grpc), in plain HTTP (plaintext gRPC), as a local Jaeger or collector
// listens and as the docs say: the exporters' own default is TLS, a
// handshake a plain receiver answers with nothing exported. An endpoint
// set (its scheme says http or https) or OTEL_EXPORTER_OTLP_INSECURE set
// keeps the exporter's reading of them.
func newExporter(ctx context.Context, getenv func(string) string) (sdktrace.SpanExporter, error) {
	plain := defaultsToPlain(getenv)
	switch p := protocol(getenv); p {
	case "http/protobuf":
		var opts []otlptracehttp.Option
		if plain {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
		exp, err := otlptracehttp.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("tracing: otlp http exporter: %w", err)
		}
		return exp, nil
	case "grpc":
		var opts []otlptracegrpc.Option
		if plain {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
		exp, err := otlptracegrpc.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("tracing: otlp grpc exporter: %w", err)
		}
		return exp, nil
	default:
		return nil, fmt.Errorf("tracing: OTLP protocol %q: use http/protobuf or grpc", p)
	}
}

// defaultsToPlain reports whether the environment leaves both the
// endpoint and its security to the default.
func defaultsToPlain(getenv func(string) string) bool {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
		"OTEL_EXPORTER_OTLP_INSECURE", "OTEL_EXPORTER_OTLP_TRACES_INSECURE"} {
		if strings.TrimSpace(getenv(k)) != "" {
			return false
		}
	}
	return true
}

// endpoint says where spans go, for the start's log line: the variable
// that names it (without credentials or query), or the default.
func endpoint(getenv func(string) string) string {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
		if v := strings.TrimSpace(getenv(k)); v != "" {
			if u, err := url.Parse(v); err == nil {
				u.User, u.RawQuery = nil, ""
				return u.String()
			}
			return k
		}
	}
	if protocol(getenv) == "grpc" {
		return "localhost:4317 (plaintext)"
	}
	return "http://localhost:4318"
}

func envInt(getenv func(string) string, key string, def int) (int, error) {
	v := strings.TrimSpace(getenv(key))
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s=%q: a positive whole number is needed", key, v)
	}
	return n, nil
}

// Drop reasons.
const (
	dropQueueFull    = "queue_full"
	dropExportFailed = "export_failed"
)

type metrics struct {
	dropped  *prometheus.CounterVec
	exported prometheus.Counter
	queued   prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookrelay_trace_spans_dropped_total",
			Help: "Spans not exported, by reason: queue_full (the export queue was full: the collector is slow or down; the span was dropped at its end instead of waiting) or export_failed (the collector refused the batch or could not be reached in time).",
		}, []string{"reason"}),
		exported: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hookrelay_trace_spans_exported_total",
			Help: "Spans the collector accepted.",
		}),
		queued: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hookrelay_trace_spans_queued",
			Help: "Ended spans waiting for their export.",
		}),
	}
	for _, r := range []string{dropQueueFull, dropExportFailed} {
		m.dropped.WithLabelValues(r)
	}
	reg.MustRegister(m.dropped, m.exported, m.queued)
	return m
}

// gate bounds the spans between their end and their export: past limit,
// a span is dropped and counted, never waited for.
type gate struct {
	next  sdktrace.SpanProcessor
	limit int64
	n     atomic.Int64
	m     *metrics
}

func (g *gate) OnStart(parent context.Context, s sdktrace.ReadWriteSpan) { g.next.OnStart(parent, s) }

const urlFull = attribute.Key("url.full")

func (g *gate) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return // the batch processor exports sampled spans only
	}
	if g.n.Add(1) > g.limit {
		g.n.Add(-1)
		g.m.dropped.WithLabelValues(dropQueueFull).Inc()
		return
	}
	g.m.queued.Inc()
	g.next.OnEnd(s)
}

// exported takes n spans off the queue, whatever their export came to.
func (g *gate) exported(n int) {
	g.n.Add(int64(-n))
	g.m.queued.Sub(float64(n))
}

func (g *gate) Shutdown(ctx context.Context) error   { return g.next.Shutdown(ctx) }
func (g *gate) ForceFlush(ctx context.Context) error { return g.next.ForceFlush(ctx) }

// countingExporter counts what its exporter did with each batch.
type countingExporter struct {
	sdktrace.SpanExporter
	m    *metrics
	gate *gate
}

func (e *countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, redactAll(spans))
	e.gate.exported(len(spans))
	if err != nil {
		e.m.dropped.WithLabelValues(dropExportFailed).Add(float64(len(spans)))
		return err
	}
	e.m.exported.Add(float64(len(spans)))
	return nil
}

// ExportTimeout is how long a process's stop waits for its last spans.
const ExportTimeout = 5 * time.Second

// Stop shuts t down within ExportTimeout, logging a failure: for a
// process's deferred stop.
func (t *Tracing) Stop(logger zerolog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), ExportTimeout)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil {
		logger.Warn().Err(err).Msg("the last spans were not all exported")
	}
}

// TracerOrNil is t's tracer when tracing is on, nil when off: components
// take nil as "no spans".
func (t *Tracing) TracerOrNil() trace.Tracer {
	if !t.On() {
		return nil
	}
	return t.Tracer
}

// redactAll keeps any URL's credentials, query and fragment out of a
// span's url.full: destinations' tokens go there, and spans leave for a
// collector that need not be trusted with them. The dispatcher's POST span
// records none already; this holds for every span, an instrumentation
// library's included. Spans without one are passed as they are.
func redactAll(spans []sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	out, copied := spans, false
	for i, s := range spans {
		attrs := s.Attributes()
		for j, kv := range attrs {
			if kv.Key != urlFull {
				continue
			}
			clean := redactURL(kv.Value.AsString())
			if clean == kv.Value.AsString() {
				break
			}
			if !copied {
				out, copied = slices.Clone(spans), true
			}
			a := slices.Clone(attrs)
			a[j] = urlFull.String(clean)
			out[i] = redacted{ReadOnlySpan: s, attrs: a}
			break
		}
	}
	return out
}

// redactURL is u without its credentials, query and fragment; "" when it
// does not parse.
func redactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return ""
	}
	p.User, p.RawQuery, p.ForceQuery, p.Fragment, p.RawFragment = nil, "", false, "", ""
	return p.String()
}

// redacted is a span with its attributes replaced.
type redacted struct {
	sdktrace.ReadOnlySpan
	attrs []attribute.KeyValue
}

func (r redacted) Attributes() []attribute.KeyValue { return r.attrs }
