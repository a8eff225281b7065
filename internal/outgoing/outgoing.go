// Package outgoing is what a destination receives for an event: the body,
// as received or as a route's transformation shapes it, and the headers:
// the route's own, the transformation's, then the relay's (User-Agent, the
// Standard Webhooks headers, X-Hookrelay-*). The dispatcher sends it; the
// admin API's route test shows it; both build it here, so what a test
// shows is what a delivery sends.
package outgoing

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/rule"
	"github.com/hookrelay/hookrelay/internal/signature"
)

// Request is the body a route sends for an event, its media type, and the
// headers its transformation adds.
type Request struct {
	Body        []byte
	ContentType string
	Added       map[string]string
}

// Shape returns what a route with transformation t (nil for none) sends
// for an event whose body and content type are as given, in being the
// event as the expressions see it. A transformation's failure is a
// *rule.EvalError.
func Shape(ctx context.Context, t *rule.Transform, in rule.Input, body []byte, contentType string) (Request, error) {
	req := Request{Body: body, ContentType: contentType}
	if t == nil {
		return req, nil
	}
	s, err := t.Apply(ctx, in)
	if err != nil {
		return req, err
	}
	if s.Body != nil {
		req.Body, req.ContentType = s.Body, s.ContentType
	}
	req.Added = s.Headers
	return req, nil
}

// Event is what the relay's headers say of the event and the attempt.
type Event struct {
	ID        uuid.UUID
	Source    string
	EventType string
	Attempt   int
}

// Headers are the headers of the request for ev, shaped as req: static
// (the route's own headers), then the body's Content-Type, then what the
// transformation adds (it may replace the first two), then the relay's
// (User-Agent, the Standard Webhooks headers, X-Hookrelay-*), which
// nothing replaces. The signature, made at now with keys, covers the body
// as sent; no keys, no webhook-signature.
func Headers(static map[string]string, req Request, ev Event, keys [][]byte, now time.Time) http.Header {
	h := http.Header{}
	for k, v := range static {
		h.Set(k, v)
	}
	contentType := req.ContentType
	if contentType == "" {
		contentType = "application/octet-stream"
	}
	h.Set("Content-Type", contentType)
	for k, v := range req.Added {
		h.Set(k, v)
	}
	id := ev.ID.String()
	h.Set("User-Agent", "hookrelay")
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
	if len(keys) > 0 {
		h.Set("webhook-signature", signature.SignStandard(keys, id, now, req.Body))
	}
	h.Set("X-Hookrelay-Source", ev.Source)
	h.Set("X-Hookrelay-Event-Type", ev.EventType)
	h.Set("X-Hookrelay-Attempt", strconv.Itoa(ev.Attempt))
	return h
}

// ReceivedAt is when the relay accepted the event of id: the time of its
// UUIDv7, to the millisecond (what received_at is to a transformation at
// delivery). The zero time for an id of another version.
func ReceivedAt(id uuid.UUID) time.Time {
	if id.Version() != 7 {
		return time.Time{}
	}
	sec, nsec := id.Time().UnixTime()
	return time.Unix(sec, nsec).UTC().Truncate(time.Millisecond)
}
