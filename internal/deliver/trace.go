package deliver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/hookrelay/hookrelay/internal/tracing"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// The delivery's spans, when tracing (Config.Tracer): the wait in a retry
// tier (from the copy's publish to its consumption), then one "deliver"
// span per message, child of the span the message carries: the claim and
// the record are its events (see timed), the POST its child (postSpan).
// Its context goes with the attempt's record, to its retry copy.

// startDelivery starts the delivery's span; ctx unchanged, end a no-op,
// without a tracer.
func (d *delivery) startDelivery(ctx context.Context) (context.Context, func()) {
	tr := d.cfg.Tracer
	if tr == nil {
		return ctx, func() {}
	}
	m := d.msg
	ctx = tracing.Context{Parent: m.TraceParent, State: m.TraceState}.Into(ctx)
	// Few attributes, each said once: every one is made, kept and
	// encoded for every delivery.
	attrs := make([]attribute.KeyValue, 0, 8)
	attrs = append(attrs,
		attribute.String("messaging.system", "rabbitmq"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.destination.name", d.route.Name),
		tracing.AttrEventID.String(m.EventID.String()),
		tracing.AttrAttempt.Int(m.Attempt),
	)
	if m.Gen != 0 {
		attrs = append(attrs, tracing.AttrGen.Int64(m.Gen))
	}
	if m.RetryTier != "" {
		attrs = append(attrs, tracing.AttrRetryTier.String(m.RetryTier))
		if !m.RetryAt.IsZero() {
			// The copy's time in its tier, drawn after the fact: its
			// publish to now.
			_, wait := tr.Start(ctx, "wait in "+m.RetryTier, trace.WithTimestamp(m.RetryAt),
				trace.WithAttributes(tracing.AttrRetryTier.String(m.RetryTier), tracing.AttrAttempt.Int(m.Attempt)))
			wait.End(trace.WithTimestamp(d.now()))
		}
	}
	if m.MovedBack {
		attrs = append(attrs, attribute.Bool("hookrelay.moved_back", true))
	}
	ctx, span := tr.Start(ctx, d.route.spanName, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
	if id := span.SpanContext().TraceID(); span.SpanContext().IsValid() {
		d.log = d.log.With().Str("trace_id", id.String()).Logger()
	}
	d.span = span
	return ctx, func() { span.End() }
}

// timed runs op and, when tracing, notes it on the delivery's span: an
// event named name at its end (with its error, if any). The
// claim and the record are events rather than spans of their own: two
// spans fewer per delivery, whose making and export cost the drain.
func (d *delivery) timed(name string, op func() error) error {
	if d.span == nil {
		return op()
	}
	err := op()
	if err != nil {
		d.span.AddEvent(name, trace.WithAttributes(attribute.String("error.message", err.Error())))
	} else {
		d.span.AddEvent(name)
	}
	return err
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
	d.span.SetAttributes(attribute.String("hookrelay.outcome", string(a.Outcome)))
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

// postSpan starts the POST's client span (HTTP semantic conventions:
// http.request.method, url.full without its credentials and query, where
// destinations' tokens go, server.address and server.port) and, unless
// the route keeps it out, puts its trace context in the request's headers.
// Nil without a tracer. Written here rather than taken from otelhttp's
// transport, which cost the dispatcher a tenth of its CPU at a thousand
// deliveries a second (metric attributes built for every request even with
// no meter) and records the query.
func (h *Handler) postSpan(ctx context.Context, r *Route, req *http.Request) trace.Span {
	if h.cfg.Tracer == nil {
		return nil
	}
	ctx, span := h.cfg.Tracer.Start(ctx, http.MethodPost, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(r.postAttrs...))
	if !r.NoTraceparent {
		tracing.Propagator.Inject(ctx, propagation.HeaderCarrier(req.Header))
	}
	return span
}

// endPost ends the POST's span with its answer: the status, or the error
// that came instead (error.type); a status of 400 or more is an error, as
// the conventions say for a client.
func endPost(span trace.Span, a *webhook.Attempt, err error) {
	if span == nil {
		return
	}
	switch {
	case err != nil:
		span.SetAttributes(attribute.String("error.type", fmt.Sprintf("%T", errors.Unwrap(err))))
		span.SetStatus(codes.Error, a.Error)
	case a.Status >= 400:
		span.SetAttributes(attribute.Int("http.response.status_code", a.Status), attribute.String("error.type", strconv.Itoa(a.Status)))
		span.SetStatus(codes.Error, "")
	default:
		span.SetAttributes(attribute.Int("http.response.status_code", a.Status))
	}
	span.End()
}

// traced sets r's span name and its POST span's attributes, made once per
// route rather than per delivery: url.full without the URL's credentials,
// query and fragment.
func (r *Route) traced() {
	r.spanName = "deliver " + r.Name
	r.postAttrs = []attribute.KeyValue{attribute.String("http.request.method", http.MethodPost)}
	u, err := url.Parse(r.URL)
	if err != nil {
		return // New refuses no URL; its request fails and says why
	}
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
	port := 80
	if u.Scheme == "https" {
		port = 443
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err == nil {
			port = n
		}
	}
	r.postAttrs = append(r.postAttrs, attribute.String("url.full", u.String()),
		attribute.String("server.address", u.Hostname()), attribute.Int("server.port", port))
}
