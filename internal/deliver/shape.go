package deliver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/outgoing"
	"github.com/hookrelay/hookrelay/internal/rule"
	"github.com/hookrelay/hookrelay/internal/webhook"
)

// Request is what a route sends for an event (internal/outgoing).
type Request = outgoing.Request

// RequestHeaders are the headers of r's request for msg, shaped as req,
// signed at now (outgoing.Headers).
func (r *Route) RequestHeaders(msg webhook.RouteMessage, req Request, now time.Time) http.Header {
	return outgoing.Headers(r.Headers, req, outgoing.Event{ID: msg.EventID, Source: msg.Source, EventType: msg.EventType, Attempt: msg.Attempt},
		r.signingKeys(now), now)
}

// shape is outgoing.Shape for the delivery's message: the event's headers are read
// from Postgres only when the transformation reads them; received_at is
// the event id's time (a UUIDv7's milliseconds: when the relay accepted
// it). An error that is not a *rule.EvalError is Postgres'.
func (d *delivery) shape(ctx context.Context) (Request, error) {
	r, msg := d.route, d.msg
	if r.Transform == nil {
		return Request{Body: msg.Body, ContentType: msg.ContentType}, nil
	}
	in := rule.Input{Body: d.bodies.parsed(msg.EventID, msg.Body), Source: msg.Source, EventType: msg.EventType, ReceivedAt: outgoing.ReceivedAt(msg.EventID)}
	if r.Transform.ReadsHeaders() {
		var h http.Header
		err := d.retryStore(ctx, "reading the event's headers", func() (err error) {
			h, err = d.cfg.Rules.EventHeaders(ctx, msg.EventID)
			if errors.Is(err, webhook.ErrEventMissing) {
				return permanent{err}
			}
			return err
		})
		if err != nil {
			return Request{}, err
		}
		in.Headers = rule.HeadersOf(h)
	}
	return outgoing.Shape(ctx, r.Transform, in, msg.Body, msg.ContentType)
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

// bodyCacheSize is how many parsed bodies a handler keeps: the events in
// flight across its routes' consumers, and some.
const bodyCacheSize = 256

// bodyCache keeps the latest events' bodies as the expressions read them
// (rule.ParseBody), by event id, the oldest dropped first. A parsed body
// is only read afterwards (CEL does not change its input), so deliveries
// of one event to several routes share it.
type bodyCache struct {
	mu    sync.Mutex
	byID  map[uuid.UUID]any
	order []uuid.UUID // a ring of the ids in byID
	next  int
}

// parsed returns the body of event id parsed, parsing it when it is not
// kept.
func (c *bodyCache) parsed(id uuid.UUID, body []byte) any {
	c.mu.Lock()
	if v, ok := c.byID[id]; ok {
		c.mu.Unlock()
		return v
	}
	c.mu.Unlock()
	v := rule.ParseBody(body) // outside the lock: the slow part
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byID == nil {
		c.byID, c.order = make(map[uuid.UUID]any, bodyCacheSize), make([]uuid.UUID, bodyCacheSize)
	}
	if _, ok := c.byID[id]; !ok {
		delete(c.byID, c.order[c.next])
		c.order[c.next] = id
		c.next = (c.next + 1) % bodyCacheSize
		c.byID[id] = v
	}
	return v
}
