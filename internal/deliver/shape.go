package deliver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/rule"
	"github.com/hookrelay/hookrelay/internal/signature"
	"github.com/hookrelay/hookrelay/internal/webhook"
)

// Request is the body a route sends for an event, its media type, and the
// headers its transformation adds.
type Request struct {
	Body        []byte
	ContentType string
	Added       map[string]string
}

// Shape returns what route r sends for an event: its body and content type
// as received, or what r's transformation makes of in (the event as the
// expressions see it). A transformation's failure is a *rule.EvalError.
func (r *Route) Shape(ctx context.Context, in rule.Input, body []byte, contentType string) (Request, error) {
	req := Request{Body: body, ContentType: contentType}
	if r.Transform == nil {
		return req, nil
	}
	s, err := r.Transform.Apply(ctx, in)
	if err != nil {
		return req, err
	}
	if s.Body != nil {
		req.Body, req.ContentType = s.Body, s.ContentType
	}
	req.Added = s.Headers
	return req, nil
}

// RequestHeaders are the headers of r's request for msg, shaped as req, signed at
// now: the route's own headers, then the body's Content-Type, then what
// the transformation adds (it may replace the first two), then the
// relay's (User-Agent, the Standard Webhooks headers, X-Hookrelay-*),
// which nothing replaces. The signature covers the body as sent.
func (r *Route) RequestHeaders(msg webhook.RouteMessage, req Request, now time.Time) http.Header {
	h := http.Header{}
	for k, v := range r.Headers {
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
	id := msg.EventID.String()
	h.Set("User-Agent", "hookrelay")
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
	h.Set("webhook-signature", signature.SignStandard(r.signingKeys(now), id, now, req.Body))
	h.Set("X-Hookrelay-Source", msg.Source)
	h.Set("X-Hookrelay-Event-Type", msg.EventType)
	h.Set("X-Hookrelay-Attempt", strconv.Itoa(msg.Attempt))
	return h
}

// shape is Shape for the delivery's message: the event's headers are read
// from Postgres only when the transformation reads them; received_at is
// the event id's time (a UUIDv7's milliseconds: when the relay accepted
// it). An error that is not a *rule.EvalError is Postgres'.
func (d *delivery) shape(ctx context.Context) (Request, error) {
	r, msg := d.route, d.msg
	if r.Transform == nil {
		return Request{Body: msg.Body, ContentType: msg.ContentType}, nil
	}
	in := rule.Input{Body: rule.ParseBody(msg.Body), Source: msg.Source, EventType: msg.EventType, ReceivedAt: ReceivedAt(msg.EventID)}
	if r.Transform.ReadsHeaders() {
		var h http.Header
		err := d.retryStore(ctx, "reading the event's headers", func() (err error) {
			h, err = d.cfg.Rules.EventHeaders(ctx, msg.EventID)
			if errors.Is(err, ErrEventMissing) {
				return permanent{err}
			}
			return err
		})
		if err != nil {
			return Request{}, err
		}
		in.Headers = rule.HeadersOf(h)
	}
	return r.Shape(ctx, in, msg.Body, msg.ContentType)
}

// ReceivedAt is when the relay accepted the event of id: the time of its
// UUIDv7, to the millisecond. The zero time for an id of another version.
func ReceivedAt(id uuid.UUID) time.Time {
	if id.Version() != 7 {
		return time.Time{}
	}
	sec, nsec := id.Time().UnixTime()
	return time.Unix(sec, nsec).UTC().Truncate(time.Millisecond)
}

// notAddressed handles a copy that reached a filtered route without being
// addressed to it (a pattern binding left from before the filter): the
// pair exists (the event was taken before the filter, or by it) and the
// copy is delivered as any; or not, and the copy is not this route's: done,
// acked without a POST.
func (d *delivery) notAddressed(ctx context.Context) (done bool, err error) {
	var exists bool
	err = d.retryStore(ctx, "reading whether the pair exists", func() (err error) {
		exists, err = d.cfg.Rules.DeliveryExists(ctx, d.msg.EventID, d.route.Name)
		return err
	})
	if err != nil {
		return true, fmt.Errorf("a copy not addressed to a filtered route: %w", err)
	}
	if exists {
		return false, nil
	}
	d.cfg.Metrics.outcome(d.route.Name, "not_addressed")
	d.log.Debug().Msg("copy not addressed to this filtered route and no pair: not its; acked without a POST")
	return true, nil
}
