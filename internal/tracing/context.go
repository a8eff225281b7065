package tracing

import (
	"context"
	"encoding/hex"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Span attributes of ours, beside the semantic conventions' own, said by
// the receiver, the publisher and the dispatcher alike.
const (
	AttrEventID   = attribute.Key("hookrelay.event_id")
	AttrRoute     = attribute.Key("hookrelay.route")
	AttrAttempt   = attribute.Key("hookrelay.attempt")
	AttrRetryTier = attribute.Key("hookrelay.retry_tier")
	AttrGen       = attribute.Key("hookrelay.gen")
)

// Header names of the W3C trace context, in HTTP and AMQP headers alike.
const (
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
)

// Context is a span's trace context as stored with an event, an outbox row
// or an attempt, and carried in message headers: the W3C traceparent and
// tracestate strings. The zero Context is none.
type Context struct {
	Parent string
	State  string
}

// IsZero says whether c holds no trace context.
func (c Context) IsZero() bool { return c.Parent == "" }

// Of is the trace context of ctx's span; zero when it has none (tracing
// off, or a span that is not valid).
func Of(ctx context.Context) Context {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return Context{}
	}
	// As the W3C propagator writes it (version 00), without its map: this
	// runs for every delivery.
	tid, sid := sc.TraceID(), sc.SpanID()
	var b [55]byte
	copy(b[:], "00-")
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	hex.Encode(b[53:55], []byte{byte(sc.TraceFlags() & trace.FlagsSampled)})
	return Context{Parent: string(b[:]), State: sc.TraceState().String()}
}

// SpanContext is c's remote span context; not valid when c is zero or does
// not parse.
func (c Context) SpanContext() trace.SpanContext {
	if c.Parent == "" {
		return trace.SpanContext{}
	}
	m := propagation.MapCarrier{HeaderTraceParent: c.Parent}
	if c.State != "" {
		m[HeaderTraceState] = c.State
	}
	return trace.SpanContextFromContext(Propagator.Extract(context.Background(), m))
}

// Into returns ctx with c as its remote parent; ctx unchanged when c holds
// none that parses.
func (c Context) Into(ctx context.Context) context.Context {
	sc := c.SpanContext()
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// TraceID is the trace id of traceparent p (32 lower-case hex digits), ""
// when p is not a valid traceparent.
func TraceID(p string) string {
	sc := Context{Parent: p}.SpanContext()
	if !sc.IsValid() {
		return ""
	}
	return sc.TraceID().String()
}

// TraceIDOf is the trace id of ctx's span, "" when it has no valid one: for
// log lines.
func TraceIDOf(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return sc.TraceID().String()
}

// Link builds an operator's link to trace id from template, whose
// {trace_id} is replaced by it; "" when either is empty.
func Link(template, traceID string) string {
	if template == "" || traceID == "" {
		return ""
	}
	return strings.ReplaceAll(template, "{trace_id}", traceID)
}
