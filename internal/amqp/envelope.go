package amqp

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/tracing"
	"github.com/hookrelay/hookrelay/internal/webhook"
	amqp "github.com/rabbitmq/amqp091-go"
)

// The envelope: how a hookrelay message looks on the wire. This file is its
// only writer and reader. Every message is persistent, carries the event's
// body and content type, message_id = the event id, type = the event type,
// app_id "hookrelay", and the x-hookrelay-* headers below, which dispatchers
// read back and operators see in the management UI. Four kinds:
//
//   - the event, as the outbox publishes it: to the topic exchange, or to
//     one route's queue with the pair's generation (a replay, a reconciled
//     resend) and, for a retrying pair's next attempt brought forward, its
//     attempt number;
//   - a retry copy, published by the dispatcher to a retry tier, which
//     carries the attempt number and when the series began;
//   - a dead letter, published by the dispatcher to a route's dead-letter
//     queue, with the headers that tell an operator why;
//   - a dead letter moved back to its route queue by an operator, which
//     keeps the route and the generation and starts a fresh series.

// Headers of every event message.
const (
	HeaderEventID   = "x-hookrelay-event-id"
	HeaderSource    = "x-hookrelay-source"
	HeaderEventType = "x-hookrelay-event-type"
	// HeaderGen is the generation of a pair's copy (deliveries.gen): only
	// the copy whose generation Postgres holds is delivered. Absent on an
	// event's first copy, which is generation 0.
	HeaderGen = "x-hookrelay-gen"
)

// Headers of a retry copy: its place in the attempt series, and when the
// series began. A dead letter carries them too.
const (
	HeaderAttempt        = "x-hookrelay-attempt"
	HeaderFirstAttemptAt = "x-hookrelay-first-attempt-at"
	// HeaderRetryTier names the retry queue a retry copy waits in, and
	// HeaderRetryAt when it was published there (RFC 3339 with
	// nanoseconds; the timestamp property holds whole seconds only): the
	// dispatcher's trace shows the wait.
	HeaderRetryTier = "x-hookrelay-retry-tier"
	HeaderRetryAt   = "x-hookrelay-retry-at"
)

// The W3C trace context, on any message of a traced event (tracing): the
// span the message continues. A dead letter carries its last delivery's,
// and keeps it when moved back.
const (
	HeaderTraceParent = tracing.HeaderTraceParent
	HeaderTraceState  = tracing.HeaderTraceState
)

// Headers of a dead letter, which an operator reads in the management UI.
// HeaderRoute stays on a dead letter moved back to its route queue, and
// tells the dispatcher so (the management UI's "Move messages" keeps every
// header too).
const (
	HeaderRoute         = "x-hookrelay-route"
	HeaderAttempts      = "x-hookrelay-attempts"
	HeaderLastStatus    = "x-hookrelay-last-status"
	HeaderLastError     = "x-hookrelay-last-error"
	HeaderLastAttemptAt = "x-hookrelay-last-attempt-at"
	// HeaderDeadReason is max_attempts, no_retry_status (410 or a route's
	// no_retry_statuses), malformed or event_missing (purged). RabbitMQ's
	// own parking for the delivery limit shows in x-death instead.
	HeaderDeadReason = "x-hookrelay-dead-reason"
)

// headerPrefix starts every header of ours.
const headerPrefix = "x-hookrelay-"

const appID = "hookrelay"

// eventMessage is the outbox's message for m, with its address: the topic
// exchange with the event's routing key; for a copy addressed to one route
// (a replay, a reconciled resend), that route's queue through the default
// exchange, with the pair's generation; for a retry copy, the retry tier
// of its delay. corr is the correlation id its return is matched by.
func eventMessage(events string, names Names, m webhook.Message, corr string) (exchange, key string, p amqp.Publishing) {
	if m.Route != "" && m.RetryIn > 0 {
		// A retry copy recorded with its failed attempt: to the tier of
		// its delay, which dead-letters it to the route queue (key).
		tier := names.Retry(m.RetryIn)
		return tier, names.RouteQueue(m.Route), retryMessage(m, tier, time.Now(), corr)
	}
	id := m.EventID.String()
	headers := amqp.Table{
		HeaderEventID:   id,
		HeaderSource:    m.Source,
		HeaderEventType: m.EventType,
	}
	exchange, key = events, m.RoutingKey
	if m.Route != "" {
		exchange, key = "", names.RouteQueue(m.Route)
		headers[HeaderGen] = m.Gen
		if len(m.CC) > 0 {
			// Sender-selected distribution: the default exchange routes
			// the one message to these queues too.
			cc := make([]any, len(m.CC))
			for i, r := range m.CC {
				cc[i] = names.RouteQueue(r)
			}
			headers["CC"] = cc
		}
		if m.Attempt > 1 {
			// A retrying pair's next attempt, brought forward.
			headers[HeaderAttempt] = int32(m.Attempt)
		}
	}
	setTrace(headers, m.TraceParent, "")
	return exchange, key, amqp.Publishing{
		DeliveryMode:  amqp.Persistent,
		ContentType:   m.ContentType,
		MessageId:     id,
		CorrelationId: corr,
		Timestamp:     m.ReceivedAt,
		Type:          m.EventType,
		AppId:         appID,
		Headers:       headers,
		Body:          m.Body,
	}
}

// retryMessage is next, a pair's retry copy from the outbox (for its next
// attempt), as published to a retry tier; corr as for eventMessage.
func retryMessage(next webhook.Message, tier string, now time.Time, corr string) amqp.Publishing {
	id := next.EventID.String()
	p := amqp.Publishing{
		DeliveryMode:  amqp.Persistent,
		ContentType:   next.ContentType,
		MessageId:     id,
		CorrelationId: corr,
		Type:          next.EventType,
		AppId:         appID,
		Timestamp:     now,
		Headers: amqp.Table{
			HeaderEventID:        id,
			HeaderSource:         next.Source,
			HeaderEventType:      next.EventType,
			HeaderAttempt:        int32(next.Attempt),
			HeaderFirstAttemptAt: formatTime(next.FirstAttemptAt),
			HeaderGen:            next.Gen,
			HeaderRetryTier:      tier,
			HeaderRetryAt:        formatTime(now),
		},
		Body: next.Body,
	}
	setTrace(p.Headers, next.TraceParent, "")
	return p
}

// setTrace writes a trace context into h; nothing when parent is "".
func setTrace(h amqp.Table, parent, state string) {
	if parent == "" {
		return
	}
	h[HeaderTraceParent] = parent
	if state != "" {
		h[HeaderTraceState] = state
	} else {
		delete(h, HeaderTraceState)
	}
}

// deadLetterMessage is m parked in its route's dead-letter queue for why.
// It keeps m's own x-hookrelay-* headers and properties as they arrived
// (m.Wire), not x-death: the retry tiers' TTL hops would tell an operator
// "expired", which is not why it is dead.
// tc, when set, is the trace context it continues (the last delivery's).
func deadLetterMessage(m webhook.RouteMessage, why webhook.DeadLetter, tc tracing.Context, now time.Time) amqp.Publishing {
	headers := amqp.Table{}
	for k, v := range m.Wire.Headers {
		headers[k] = v
	}
	if m.EventID != uuid.Nil {
		headers[HeaderEventID] = m.EventID.String()
	}
	headers[HeaderRoute] = why.Route
	headers[HeaderGen] = m.Gen
	headers[HeaderDeadReason] = why.Reason
	headers[HeaderAttempts] = int32(why.Attempts)
	headers[HeaderLastStatus] = int32(why.LastStatus)
	headers[HeaderLastError] = why.LastError
	headers[HeaderFirstAttemptAt] = formatTime(why.FirstAttemptAt)
	headers[HeaderLastAttemptAt] = formatTime(why.LastAttemptAt)
	// A retry copy's tier is behind it.
	delete(headers, HeaderRetryTier)
	delete(headers, HeaderRetryAt)
	setTrace(headers, tc.Parent, tc.State)
	return amqp.Publishing{
		DeliveryMode: amqp.Persistent,
		ContentType:  m.ContentType,
		MessageId:    m.Wire.MessageID,
		Type:         m.Wire.Type,
		AppId:        appID,
		Timestamp:    now,
		Headers:      headers,
		Body:         m.Body,
	}
}

// movedBackMessage is dead letter d moved back to route's queue: a fresh
// attempt series, so no attempt count. The route header and the generation
// tell the dispatcher this is a dead letter moved back, to restart only if
// the pair is still dead at that generation (a replay may have delivered
// it meanwhile).
func movedBackMessage(d amqp.Delivery, route string, now time.Time) amqp.Publishing {
	headers := amqp.Table{HeaderRoute: route}
	for _, k := range []string{HeaderEventID, HeaderSource, HeaderEventType, HeaderGen, HeaderTraceParent, HeaderTraceState} {
		if v, ok := d.Headers[k]; ok {
			headers[k] = v
		}
	}
	return amqp.Publishing{
		DeliveryMode: amqp.Persistent, ContentType: d.ContentType, MessageId: d.MessageId, Type: d.Type,
		AppId: appID, Timestamp: now, Headers: headers, Body: d.Body,
	}
}

// HandedMessage is m, a copy addressed to its route (m.Route), as a
// consumer of the route's queue would read it, had it been published
// there: a message a record handed over to its dispatcher instead
// (deliver.HandOver).
func HandedMessage(names Names, m webhook.Message) webhook.RouteMessage {
	_, _, p := eventMessage("", names, m, "")
	return decodeRouteMessage(amqp.Delivery{
		ContentType: p.ContentType, MessageId: p.MessageId, Timestamp: p.Timestamp,
		Type: p.Type, AppId: p.AppId, Headers: p.Headers, Body: p.Body,
	})
}

// decodeRouteMessage reads a message consumed from a route queue: an
// event's first copy, a replayed or retried copy, or a dead letter moved
// back. A message without a valid event id comes back Malformed.
func decodeRouteMessage(d amqp.Delivery) webhook.RouteMessage {
	m := webhook.RouteMessage{
		ContentType: d.ContentType,
		Body:        d.Body,
		Attempt:     1,
		Wire:        webhook.Wire{MessageID: d.MessageId, Type: d.Type, Headers: ownHeaders(d.Headers)},
	}
	id := headerString(d.Headers, HeaderEventID)
	if id == "" {
		id = d.MessageId
	}
	eventID, err := uuid.Parse(id)
	if err != nil {
		m.Malformed = fmt.Errorf("message has no valid event id: %w", err)
		return m
	}
	m.EventID = eventID
	m.Source = headerString(d.Headers, HeaderSource)
	m.EventType = headerString(d.Headers, HeaderEventType)
	if n, ok := headerInt(d.Headers, HeaderAttempt); ok && n >= 1 {
		m.Attempt = int(n)
	}
	if n, ok := headerInt(d.Headers, HeaderGen); ok && n >= 0 {
		m.Gen = n
		m.Addressed = true
	}
	m.TraceParent = headerString(d.Headers, HeaderTraceParent)
	m.TraceState = headerString(d.Headers, HeaderTraceState)
	m.RetryTier = headerString(d.Headers, HeaderRetryTier)
	if t, err := time.Parse(time.RFC3339Nano, headerString(d.Headers, HeaderRetryAt)); err == nil {
		m.RetryAt = t
	}
	if s := headerString(d.Headers, HeaderFirstAttemptAt); s != "" {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			m.FirstAttemptAt = t
		}
	}
	if _, movedBack := d.Headers[HeaderRoute]; movedBack {
		// Only dead letters carry the route header: an operator moved
		// this one back. It starts a fresh series instead of going
		// straight back to the dead-letter queue.
		m.Attempt, m.FirstAttemptAt, m.MovedBack, m.RetryTier, m.RetryAt = 1, time.Time{}, true, "", time.Time{}
	}
	return m
}

// decodeDeadLetter reads a message of a dead-letter queue.
func decodeDeadLetter(d amqp.Delivery) webhook.DeadLetterInfo {
	h := d.Headers
	num := func(k string) int64 { n, _ := headerInt(h, k); return n }
	dl := webhook.DeadLetterInfo{
		EventID: headerString(h, HeaderEventID), Source: headerString(h, HeaderSource), EventType: headerString(h, HeaderEventType),
		Attempts: num(HeaderAttempts), LastError: headerString(h, HeaderLastError),
		FirstAttemptAt: headerString(h, HeaderFirstAttemptAt), LastAttemptAt: headerString(h, HeaderLastAttemptAt),
		Reason: headerString(h, HeaderDeadReason),
	}
	if status := num(HeaderLastStatus); status != 0 { // the header's 0: no answer arrived
		dl.LastStatus = &status
	}
	if dl.Reason == "" {
		dl.Reason = deathReason(h)
	}
	return dl
}

// deathReason is the reason of RabbitMQ's latest dead-lettering of a
// message (its x-death header), "" when there is none.
func deathReason(h amqp.Table) string {
	deaths, ok := h["x-death"].([]any)
	if !ok || len(deaths) == 0 {
		return ""
	}
	t, ok := deaths[0].(amqp.Table)
	if !ok {
		return ""
	}
	r, _ := t["reason"].(string)
	return r
}

// ownHeaders returns our x-hookrelay-* headers of h, and its trace
// context.
func ownHeaders(h amqp.Table) map[string]any {
	out := map[string]any{}
	for k, v := range h {
		if strings.HasPrefix(k, headerPrefix) || k == HeaderTraceParent || k == HeaderTraceState {
			out[k] = v
		}
	}
	return out
}

func headerString(h amqp.Table, key string) string {
	s, _ := h[key].(string)
	return s
}

// headerInt reads an integer header. We write int32 or int64; a client of
// another language, or an operator's hand in the management UI, may write
// another integer type or a decimal string.
func headerInt(h amqp.Table, key string) (int64, bool) {
	switch v := h[key].(type) {
	case int32:
		return int64(v), true
	case int64:
		return v, true
	case int:
		return int64(v), true
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		return n, err == nil
	}
	return 0, false
}

// formatTime writes a time header: UTC, RFC 3339 with nanoseconds.
func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
