package deliver

import (
	"context"
	"net/http"
	"strconv"

	"github.com/hookrelay/hookrelay/internal/tracing"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// The delivery's spans, when tracing (Config.Tracer): the wait in a retry
// tier (from the copy's publish to its consumption), then one "deliver"
// span per message, child of the span the message carries, holding the
// claim, the POST (otelhttp's client span, see TracedClient) and the
// record. Its context goes with the attempt's record, to its retry copy.

// startDelivery starts the delivery's span; ctx unchanged, end a no-op,
// without a tracer.
func (d *delivery) startDelivery(ctx context.Context) (context.Context, func()) {
	tr := d.cfg.Tracer
	if tr == nil {
		return ctx, func() {}
	}
	m := d.msg
	ctx = tracing.Context{Parent: m.TraceParent, State: m.TraceState}.Into(ctx)
	attrs := []attribute.KeyValue{
		attribute.String("messaging.system", "rabbitmq"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.destination.name", d.route.Name),
		attribute.String("messaging.message.id", m.Wire.MessageID),
		attribute.String("hookrelay.event_id", m.EventID.String()),
		attribute.String("hookrelay.route", d.route.Name),
		attribute.Int("hookrelay.attempt", m.Attempt),
		attribute.Int64("hookrelay.gen", m.Gen),
	}
	if m.RetryTier != "" {
		attrs = append(attrs, attribute.String("hookrelay.retry_tier", m.RetryTier))
		if !m.RetryAt.IsZero() {
			// The copy's time in its tier, drawn after the fact: its
			// publish to now.
			_, wait := tr.Start(ctx, "wait in "+m.RetryTier, trace.WithTimestamp(m.RetryAt),
				trace.WithAttributes(attribute.String("hookrelay.retry_tier", m.RetryTier), attribute.Int("hookrelay.attempt", m.Attempt)))
			wait.End(trace.WithTimestamp(d.now()))
		}
	}
	if m.MovedBack {
		attrs = append(attrs, attribute.Bool("hookrelay.moved_back", true))
	}
	ctx, span := tr.Start(ctx, "deliver "+d.route.Name, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
	if id := span.SpanContext().TraceID(); span.SpanContext().IsValid() {
		d.log = d.log.With().Str("trace_id", id.String()).Logger()
	}
	d.span = span
	return ctx, func() { span.End() }
}

// step runs op in a child span named name, when tracing.
func (d *delivery) step(ctx context.Context, name string, op func(context.Context) error) error {
	if d.cfg.Tracer == nil {
		return op(ctx)
	}
	ctx, span := d.cfg.Tracer.Start(ctx, name)
	defer span.End()
	err := op(ctx)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, name+" failed")
	}
	return err
}

// outcome notes the attempt's outcome on the delivery span.
func (d *delivery) outcome(a *webhook.Attempt, deadReason string) {
	if d.span == nil {
		return
	}
	d.span.SetAttributes(attribute.String("hookrelay.outcome", string(a.Outcome)), attribute.Int("http.response.status_code", a.Status))
	if a.RetryIn > 0 {
		d.span.SetAttributes(attribute.String("hookrelay.retry_in", a.RetryIn.String()))
	}
	if deadReason != "" {
		d.span.SetAttributes(attribute.String("hookrelay.dead_reason", deadReason))
	}
	if a.Outcome != webhook.StateDelivered && a.Outcome != webhook.StateStale {
		msg := a.Error
		if msg == "" {
			msg = "HTTP " + strconv.Itoa(a.Status)
		}
		d.span.SetStatus(codes.Error, msg)
	}
}

// noTraceparent marks a request whose route does not send its trace
// context to the destination.
type noTraceparent struct{}

// routePropagator injects the trace context into a delivery's request
// unless its route turned that off.
type routePropagator struct{ propagation.TextMapPropagator }

func (p routePropagator) Inject(ctx context.Context, c propagation.TextMapCarrier) {
	if ctx.Value(noTraceparent{}) != nil {
		return
	}
	p.TextMapPropagator.Inject(ctx, c)
}

// TracedClient is c with otelhttp's client span around each request
// (semantic conventions: method, URL, status, duration), the request
// carrying traceparent unless its route sends none (Route.NoTraceparent).
func TracedClient(c *http.Client, tp trace.TracerProvider) *http.Client {
	out := *c
	out.Transport = otelhttp.NewTransport(c.Transport,
		otelhttp.WithTracerProvider(tp),
		otelhttp.WithPropagators(routePropagator{tracing.Propagator}),
		// The span is named by the method only; url.full loses its
		// credentials (otelhttp) and its query (tracing's processor),
		// where destinations' tokens go.
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return "POST" }),
	)
	return &out
}

// withoutTraceparent returns ctx marked so that its request carries no
// trace context.
func withoutTraceparent(ctx context.Context) context.Context {
	return context.WithValue(ctx, noTraceparent{}, true)
}
