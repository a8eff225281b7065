package outgoing_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/outgoing"
	"github.com/hookrelay/hookrelay/internal/rule"
	"github.com/hookrelay/hookrelay/internal/signature"
	"github.com/stretchr/testify/require"
)

func TestReceivedAtIsTheIDsMillisecond(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 4, 10, 32, 1, 987654321, time.UTC)
	var b [16]byte
	ms := uint64(at.UnixMilli())
	for i := 0; i < 6; i++ {
		b[i] = byte(ms >> (40 - 8*i))
	}
	b[6], b[8] = 0x70, 0x80 // version 7, RFC 4122 variant
	require.Equal(t, time.Date(2026, 12, 4, 10, 32, 1, 987000000, time.UTC), outgoing.ReceivedAt(uuid.UUID(b)))
	require.True(t, outgoing.ReceivedAt(uuid.New()).IsZero(), "a v4 id has no time")
}

func TestHeadersPrecedence(t *testing.T) {
	t.Parallel()
	tr, err := rule.CompileTransform(`{"a": 1}`, `{"content-type": "application/vnd.x+json", "x-team": "ledger", "x-static": "from the transform"}`, rule.Limits{})
	require.NoError(t, err)
	req, err := outgoing.Shape(context.Background(), tr, rule.Input{}, []byte("orig"), "text/plain")
	require.NoError(t, err)
	require.Equal(t, `{"a":1}`, string(req.Body))
	ev := outgoing.Event{ID: uuid.New(), Source: "stripe", EventType: "invoice.paid", Attempt: 2}
	now := time.Unix(1_800_000_000, 0)
	key := []byte("0123456789abcdef0123456789abcdef")
	h := outgoing.Headers(map[string]string{"X-Static": "route", "Authorization": "Bearer k"}, req, ev, [][]byte{key}, now)
	require.Equal(t, "application/vnd.x+json", h.Get("Content-Type"), "the transformation's Content-Type wins")
	require.Equal(t, "from the transform", h.Get("X-Static"), "added headers come after the route's")
	require.Equal(t, "Bearer k", h.Get("Authorization"))
	require.Equal(t, ev.ID.String(), h.Get("webhook-id"))
	require.Equal(t, "1800000000", h.Get("webhook-timestamp"))
	require.Equal(t, signature.SignStandard([][]byte{key}, ev.ID.String(), now, req.Body), h.Get("webhook-signature"), "signed over the body as sent")
	require.Equal(t, "2", h.Get("X-Hookrelay-Attempt"))
	require.Empty(t, outgoing.Headers(nil, req, ev, nil, now).Get("webhook-signature"), "no keys, no signature")

	same, err := outgoing.Shape(context.Background(), nil, rule.Input{}, []byte("orig"), "text/plain")
	require.NoError(t, err)
	require.Equal(t, outgoing.Request{Body: []byte("orig"), ContentType: "text/plain"}, same, "no transformation: the event as received")
}
