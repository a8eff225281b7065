package amqp

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/tracing"
	"github.com/hookrelay/hookrelay/internal/webhook"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

// consumed is p as a consumer receives it.
func consumed(p amqp.Publishing) amqp.Delivery {
	return amqp.Delivery{
		Headers: p.Headers, ContentType: p.ContentType, MessageId: p.MessageId, Type: p.Type,
		AppId: p.AppId, Timestamp: p.Timestamp, CorrelationId: p.CorrelationId, Body: p.Body,
	}
}

func TestEventMessageAddressAndHeaders(t *testing.T) {
	t.Parallel()
	names := Names{Prefix: "hr"}
	id := uuid.Must(uuid.NewV7())
	received := time.Date(2026, 11, 27, 14, 0, 0, 0, time.UTC)
	m := webhook.Message{
		OutboxID: 7, EventID: id, RoutingKey: "acme.invoice.paid", Source: "acme", EventType: "invoice.paid",
		ContentType: "application/json", Body: []byte(`{"a":1}`), ReceivedAt: received,
	}
	exchange, key, p := eventMessage(names.Events(), names, m, "1.7")
	require.Equal(t, "hr.events", exchange)
	require.Equal(t, "acme.invoice.paid", key)
	require.Equal(t, amqp.Publishing{
		DeliveryMode: amqp.Persistent, ContentType: "application/json", MessageId: id.String(), CorrelationId: "1.7",
		Timestamp: received, Type: "invoice.paid", AppId: "hookrelay", Body: []byte(`{"a":1}`),
		Headers: amqp.Table{
			"x-hookrelay-event-id": id.String(), "x-hookrelay-source": "acme", "x-hookrelay-event-type": "invoice.paid",
		},
	}, p)
	got := decodeRouteMessage(consumed(p))
	require.NoError(t, got.Malformed)
	require.Equal(t, id, got.EventID)
	require.Equal(t, 1, got.Attempt, "a first copy is attempt 1")
	require.Zero(t, got.Gen, "a first copy is generation 0")
	require.False(t, got.MovedBack)

	// A copy for one route goes to its queue with the pair's generation.
	m.Route, m.Gen = "billing", 3
	exchange, key, p = eventMessage(names.Events(), names, m, "2.7")
	require.Equal(t, "", exchange, "the default exchange")
	require.Equal(t, "hr.route.billing", key)
	require.Equal(t, int64(3), p.Headers["x-hookrelay-gen"])
	require.Equal(t, int64(3), decodeRouteMessage(consumed(p)).Gen)
}

// A retry copy, put in the outbox with the record of its failed attempt,
// goes to the tier of its delay, addressed to its route queue, with its
// place in the series.
func TestRetryCopyRoundTrip(t *testing.T) {
	t.Parallel()
	names := Names{Prefix: "hr"}
	first := time.Date(2026, 11, 27, 14, 0, 0, 123456789, time.FixedZone("BRT", -3*3600))
	m := webhook.Message{
		OutboxID: 9, EventID: uuid.New(), RoutingKey: "acme.invoice.paid", Route: "billing",
		Source: "acme", EventType: "invoice.paid", ContentType: "text/plain", Body: []byte("x"),
		Gen: 2, Attempt: 3, RetryIn: 5 * time.Minute, FirstAttemptAt: first,
	}
	exchange, key, p := eventMessage(names.Events(), names, m, "4.9")
	require.Equal(t, "hr.retry.5m", exchange, "the tier of the copy's delay")
	require.Equal(t, "hr.route.billing", key, "the tier dead-letters it by this key to the route queue")
	require.Equal(t, "4.9", p.CorrelationId, "a return is matched to its outbox row")
	require.Equal(t, int32(3), p.Headers["x-hookrelay-attempt"], "the attempt is an int32 on the wire")
	require.Equal(t, int64(2), p.Headers["x-hookrelay-gen"])
	require.Equal(t, "2026-11-27T17:00:00.123456789Z", p.Headers["x-hookrelay-first-attempt-at"], "UTC, nanoseconds")
	require.Equal(t, m.EventID.String(), p.MessageId)
	require.Equal(t, "invoice.paid", p.Type)
	require.Equal(t, amqp.Persistent, p.DeliveryMode)

	got := decodeRouteMessage(consumed(p))
	require.NoError(t, got.Malformed)
	require.Equal(t, m.EventID, got.EventID)
	require.Equal(t, "acme", got.Source)
	require.Equal(t, "invoice.paid", got.EventType)
	require.Equal(t, "text/plain", got.ContentType)
	require.Equal(t, []byte("x"), got.Body)
	require.Equal(t, 3, got.Attempt)
	require.Equal(t, int64(2), got.Gen)
	require.True(t, first.Equal(got.FirstAttemptAt))
	require.False(t, got.MovedBack)
}

// A dead letter keeps the message's own headers and properties, drops
// x-death and foreign headers, and says why with typed headers.
func TestDeadLetterMessageHeaders(t *testing.T) {
	t.Parallel()
	id := uuid.New()
	in := consumed(amqp.Publishing{
		ContentType: "application/json", MessageId: "mid", Type: "custom", Body: []byte(`{}`),
		Headers: amqp.Table{
			"x-hookrelay-event-id": id.String(), "x-hookrelay-source": "acme", "x-hookrelay-attempt": int32(4),
			"x-hookrelay-custom": "kept", "x-death": []any{amqp.Table{"reason": "expired"}}, "other": "dropped",
		},
	})
	m := decodeRouteMessage(in)
	m.Gen = 5
	first := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	p := deadLetterMessage(m, webhook.DeadLetter{
		Route: "billing", Reason: "max_attempts", Attempts: 4, LastStatus: 500, LastError: "HTTP 500",
		FirstAttemptAt: first, LastAttemptAt: first.Add(time.Minute),
	}, tracing.Context{}, time.Now())
	require.Equal(t, amqp.Table{
		"x-hookrelay-event-id": id.String(), "x-hookrelay-source": "acme", "x-hookrelay-attempt": int32(4),
		"x-hookrelay-custom": "kept", "x-hookrelay-route": "billing", "x-hookrelay-gen": int64(5),
		"x-hookrelay-dead-reason": "max_attempts", "x-hookrelay-attempts": int32(4), "x-hookrelay-last-status": int32(500),
		"x-hookrelay-last-error": "HTTP 500", "x-hookrelay-first-attempt-at": "2026-01-02T03:04:05Z",
		"x-hookrelay-last-attempt-at": "2026-01-02T03:05:05Z",
	}, p.Headers)
	require.Equal(t, "mid", p.MessageId)
	require.Equal(t, "custom", p.Type)
	require.Equal(t, "application/json", p.ContentType)
	require.Equal(t, amqp.Persistent, p.DeliveryMode)

	info := decodeDeadLetter(consumed(p))
	status := int64(500)
	require.Equal(t, webhook.DeadLetterInfo{
		EventID: id.String(), Source: "acme", Attempts: 4, LastStatus: &status, LastError: "HTTP 500",
		FirstAttemptAt: "2026-01-02T03:04:05Z", LastAttemptAt: "2026-01-02T03:05:05Z", Reason: "max_attempts",
	}, info)
}

// A dead letter moved back keeps its route and generation and starts a
// fresh series; the dispatcher sees it as moved back.
func TestMovedBackMessage(t *testing.T) {
	t.Parallel()
	id := uuid.New()
	dead := consumed(amqp.Publishing{
		MessageId: id.String(), Type: "invoice.paid", ContentType: "application/json", Body: []byte(`{}`),
		Headers: amqp.Table{
			"x-hookrelay-event-id": id.String(), "x-hookrelay-source": "acme", "x-hookrelay-event-type": "invoice.paid",
			"x-hookrelay-gen": int64(4), "x-hookrelay-attempts": int32(9), "x-hookrelay-attempt": int32(9),
			"x-hookrelay-first-attempt-at": "2026-01-02T03:04:05Z", "x-hookrelay-dead-reason": "max_attempts",
		},
	})
	p := movedBackMessage(dead, "billing", time.Now())
	require.Equal(t, amqp.Table{
		"x-hookrelay-route": "billing", "x-hookrelay-event-id": id.String(), "x-hookrelay-source": "acme",
		"x-hookrelay-event-type": "invoice.paid", "x-hookrelay-gen": int64(4),
	}, p.Headers, "no attempt count: a fresh series")
	got := decodeRouteMessage(consumed(p))
	require.True(t, got.MovedBack)
	require.Equal(t, 1, got.Attempt)
	require.Equal(t, int64(4), got.Gen)

	// The management UI's "Move messages" keeps every header: still a
	// fresh series.
	got = decodeRouteMessage(dead)
	require.False(t, got.MovedBack, "no route header: not a dead letter")
	dead.Headers["x-hookrelay-route"] = "billing"
	got = decodeRouteMessage(dead)
	require.True(t, got.MovedBack)
	require.Equal(t, 1, got.Attempt)
	require.True(t, got.FirstAttemptAt.IsZero())
}

func TestDecodeMalformedKeepsTheCause(t *testing.T) {
	t.Parallel()
	m := decodeRouteMessage(amqp.Delivery{
		MessageId: "not-a-uuid", Type: "t", ContentType: "text/plain", Body: []byte("b"),
		Headers: amqp.Table{"x-hookrelay-source": "acme", "other": 1},
	})
	require.ErrorContains(t, m.Malformed, "message has no valid event id: invalid UUID length: 10")
	require.Equal(t, 1, m.Attempt)
	require.Equal(t, []byte("b"), m.Body)
	require.Equal(t, webhook.Wire{MessageID: "not-a-uuid", Type: "t", Headers: map[string]any{"x-hookrelay-source": "acme"}}, m.Wire)

	// The header wins over the message id.
	id := uuid.New()
	m = decodeRouteMessage(amqp.Delivery{MessageId: "x", Headers: amqp.Table{"x-hookrelay-event-id": id.String()}})
	require.NoError(t, m.Malformed)
	require.Equal(t, id, m.EventID)
}

func TestHeaderInt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v    any
		want int64
		ok   bool
	}{
		{int32(7), 7, true}, {int64(8), 8, true}, {9, 9, true}, {"10", 10, true},
		{"ten", 0, false}, {1.5, 0, false}, {nil, 0, false},
	} {
		got, ok := headerInt(amqp.Table{"k": tc.v}, "k")
		require.Equal(t, tc.ok, ok, "%#v", tc.v)
		require.Equal(t, tc.want, got, "%#v", tc.v)
	}
	// Out-of-range values on a retry copy fall back to the defaults.
	m := decodeRouteMessage(amqp.Delivery{MessageId: uuid.NewString(), Headers: amqp.Table{
		"x-hookrelay-attempt": int32(0), "x-hookrelay-gen": int64(-1), "x-hookrelay-first-attempt-at": "yesterday",
	}})
	require.Equal(t, 1, m.Attempt)
	require.Zero(t, m.Gen)
	require.True(t, m.FirstAttemptAt.IsZero())
}

// A message RabbitMQ parked itself (delivery limit) has no reason of ours:
// the listing shows x-death's.
func TestDeadLetterReasonFromXDeath(t *testing.T) {
	t.Parallel()
	info := decodeDeadLetter(amqp.Delivery{Headers: amqp.Table{
		"x-death": []any{amqp.Table{"reason": "delivery_limit"}, amqp.Table{"reason": "expired"}},
	}})
	require.Equal(t, "delivery_limit", info.Reason)
	require.Empty(t, decodeDeadLetter(amqp.Delivery{}).Reason)
}

// Issue 41: a message a record hands over (a fifo route) reads as the
// copy addressed to its route that the relay would have published: the
// same event, generation, attempt, headers for its dead letter.
func TestHandedMessageReadsAsItsCopy(t *testing.T) {
	names := Names{Prefix: "hookrelay"}
	m := webhook.Message{
		EventID: uuid.New(), Route: "billing", RoutingKey: "acme.subscription.updated", Gen: 3, Attempt: 2,
		Source: "acme", EventType: "subscription.updated", ContentType: "application/json", Body: []byte(`{"a":1}`),
		ReceivedAt: time.Now().UTC(), TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
	}
	got := HandedMessage(names, m)
	_, _, p := eventMessage("hookrelay.events", names, m, "1.1")
	want := decodeRouteMessage(consumed(p))
	require.Equal(t, want, got)
	require.True(t, got.Addressed)
	require.Equal(t, int64(3), got.Gen)
	require.Equal(t, 2, got.Attempt)
	require.Equal(t, m.TraceParent, got.TraceParent)
	require.Equal(t, "acme", got.Source)
}
