package deliver

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookrelay/hookrelay/internal/outgoing"
	"github.com/hookrelay/hookrelay/internal/tracing"
	"github.com/hookrelay/hookrelay/internal/webhook"
)

// routingKey makes the delivery's routing key from its event; an error
// is outgoing.ErrKey's.
func (d *delivery) routingKey() (string, error) {
	msg, key := d.msg, d.route.Exchange.Key
	ev := outgoing.KeyEvent{Source: msg.Source, EventType: msg.EventType, EventID: msg.EventID.String()}
	if key.ReadsBody() {
		// Parsed only for a template that names a field: parsing a body
		// costs more than the publish.
		ev.Body = d.bodies.parsed(msg.EventID, msg.Body)
	}
	return key.Render(ev)
}

// publishOut publishes the delivery into its route's exchange and reports
// the attempt: no status (there is no HTTP answer), and an Error unless
// the destination broker confirmed it and did not return it. The message
// carries what a POST would (the Standard Webhooks headers, the relay's,
// the route's own and its transformation's, names in lower case), the
// event's id as message_id and its type as type.
func (d *delivery) publishOut(ctx context.Context, req Request) *webhook.Attempt {
	r, msg := d.route, d.msg
	start := d.now()
	a := &webhook.Attempt{EventID: msg.EventID, Route: r.Name, Number: msg.Attempt, StartedAt: start}
	ctx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	hdr := r.RequestHeaders(msg, req, start)
	span := d.publishSpan(ctx, hdr)
	headers := make(map[string]string, len(hdr))
	for name, vs := range hdr {
		lower := strings.ToLower(name)
		if lower == "content-type" || lower == "user-agent" {
			continue // the content type is a property; no agent speaks here
		}
		headers[lower] = strings.Join(vs, ", ")
	}
	err := d.cfg.Exchanges.Publish(ctx, webhook.Publication{
		URL: r.URL, Guarded: r.Guarded, Exchange: r.Exchange.Name, RoutingKey: d.key,
		MessageID: msg.EventID.String(), ContentType: req.ContentType, Type: msg.EventType, Timestamp: start,
		Headers: headers, Body: req.Body,
	})
	a.Duration = d.now().Sub(start)
	defer endPublish(span, a)
	if err == nil {
		return a
	}
	d.unroutable = errors.Is(err, webhook.ErrUnroutable)
	switch {
	case d.unroutable:
		// The destination broker's own words (a missing exchange, a
		// return): no address of the relay's side in them.
		a.Error = "amqp: " + err.Error()
	case r.Guarded:
		a.Error = "amqp: " + describeGuarded(err, r.Timeout)
	default:
		a.Error = "amqp: " + describeError(err, r.Timeout)
	}
	return a
}

// publishSpan starts the publish's producer span (messaging semantic
// conventions: the destination exchange and the routing key, never the
// URL) and, unless the route keeps it out, puts its trace context in the
// message's headers. Nil without a tracer.
func (d *delivery) publishSpan(ctx context.Context, hdr http.Header) trace.Span {
	if d.cfg.Tracer == nil {
		return nil
	}
	r := d.route
	ctx, span := d.cfg.Tracer.Start(ctx, "publish "+r.Exchange.Name, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
		attribute.String("messaging.system", "rabbitmq"),
		attribute.String("messaging.operation.type", "send"),
		attribute.String("messaging.destination.name", r.Exchange.Name),
		attribute.String("messaging.rabbitmq.destination.routing_key", d.key),
		attribute.String("messaging.message.id", d.msg.EventID.String())))
	if !r.NoTraceparent {
		tracing.Propagator.Inject(ctx, propagation.HeaderCarrier(hdr))
	}
	return span
}

// endPublish ends the publish's span with its outcome.
func endPublish(span trace.Span, a *webhook.Attempt) {
	if span == nil {
		return
	}
	if a.Error != "" {
		span.SetStatus(codes.Error, a.Error)
	}
	span.End()
}

// observed is the status the route controls count for an attempt: its
// HTTP status; for a publish, 200 when confirmed, 404 when the
// destination would not take it as addressed (the route's settings, not
// the broker's health: it does not count toward the circuit), 0 when the
// broker was unreachable or did not confirm.
func (d *delivery) observed(a *webhook.Attempt) int {
	if d.route.Exchange == nil {
		return a.Status
	}
	switch {
	case a.Error == "":
		return 200
	case d.unroutable:
		return 404
	}
	return 0
}
