package amqp

import (
	"context"
	"errors"

	"github.com/hookrelay/hookrelay/internal/tracing"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// traced returns msgs as published: each with the trace context its
// message carries (TraceParent), and, with a tracer, the producer span of
// each traced message (nil for the others), which carries it. A copy with
// a trace of its own (a retry copy) continues it; an event's first copy
// continues its event's; a copy addressed to one route without one (a
// replay, a reconciled resend, a retry brought forward) starts a trace of
// its own, linked to its event's.
func (p *Publisher) traced(msgs []webhook.Message) ([]webhook.Message, []trace.Span) {
	tr := p.cfg.Tracer
	if tr == nil {
		var out []webhook.Message
		for i, m := range msgs {
			if m.TraceParent == "" && m.Route == "" && m.EventTraceParent != "" {
				if out == nil {
					out = append([]webhook.Message(nil), msgs...)
				}
				out[i].TraceParent = m.EventTraceParent
			}
		}
		if out == nil {
			return msgs, nil
		}
		return out, nil
	}
	out := append([]webhook.Message(nil), msgs...)
	spans := make([]trace.Span, len(msgs))
	for i, m := range msgs {
		ctx := context.Background()
		opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer)}
		name := "publish " + p.cfg.Exchange
		dest := p.cfg.Exchange
		switch {
		case m.TraceParent != "":
			ctx = tracing.Context{Parent: m.TraceParent}.Into(ctx)
		case m.Route == "":
			if m.EventTraceParent == "" {
				continue // received while tracing was off
			}
			ctx = tracing.Context{Parent: m.EventTraceParent}.Into(ctx)
		default:
			opts = append(opts, trace.WithNewRoot())
			if sc := (tracing.Context{Parent: m.EventTraceParent}).SpanContext(); sc.IsValid() {
				opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc,
					Attributes: []attribute.KeyValue{attribute.String("hookrelay.link", "event")}}))
			}
		}
		attrs := []attribute.KeyValue{
			attribute.String("messaging.system", "rabbitmq"),
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.operation.name", "publish"),
			attribute.String("messaging.message.id", m.EventID.String()),
			tracing.AttrEventID.String(m.EventID.String()),
			tracing.AttrAttempt.Int(max(m.Attempt, 1)),
		}
		switch {
		case m.Route != "" && m.RetryIn > 0:
			dest = p.cfg.Names.Retry(m.RetryIn)
			name = "publish " + dest
			attrs = append(attrs, tracing.AttrRoute.String(m.Route), tracing.AttrRetryTier.String(dest), tracing.AttrGen.Int64(m.Gen))
		case m.Route != "":
			dest = p.cfg.Names.RouteQueue(m.Route)
			name = "publish " + dest
			attrs = append(attrs, tracing.AttrRoute.String(m.Route), tracing.AttrGen.Int64(m.Gen))
		default:
			attrs = append(attrs, attribute.String("messaging.rabbitmq.destination.routing_key", m.RoutingKey))
		}
		attrs = append(attrs, attribute.String("messaging.destination.name", dest))
		_, span := tr.Start(ctx, name, append(opts, trace.WithAttributes(attrs...))...)
		spans[i] = span
		out[i].TraceParent = tracing.Of(trace.ContextWithSpan(context.Background(), span)).Parent
	}
	return out, spans
}

// endSpans ends each publish's span with the broker's answer.
func endSpans(spans []trace.Span, outcomes []Outcome, err error) {
	for i, s := range spans {
		if s == nil {
			continue
		}
		s.SetAttributes(attribute.String("hookrelay.confirm", outcomes[i].String()))
		if outcomes[i] != Acked {
			cause := errors.New("broker answered " + outcomes[i].String() + ": the outbox publishes it again")
			if err != nil {
				cause = errors.Join(cause, err)
			}
			s.RecordError(cause)
			s.SetStatus(codes.Error, outcomes[i].String())
		}
		s.End()
	}
}
