package webhook

import (
	"errors"
	"time"
)

// Publication is an event's delivery into an exchange: a route of kind
// amqp publishes it, persistent and mandatory, and it is delivered once
// the broker confirmed it and did not return it.
type Publication struct {
	// URL is the destination broker (amqp:// or amqps://, with its vhost
	// and credentials). Guarded: a team's route, whose connection must
	// not reach the relay's own side (internal/netguard).
	URL     string
	Guarded bool
	// Exchange and RoutingKey are where it goes.
	Exchange, RoutingKey string
	// MessageID is the event's id: a consumer deduplicates on it.
	MessageID   string
	ContentType string
	// Type is the event's type; Timestamp when the attempt was made.
	Type      string
	Timestamp time.Time
	// Headers are the message's headers: the Standard Webhooks ones
	// (webhook-id, webhook-timestamp, webhook-signature), the relay's and
	// the route's own, names in lower case.
	Headers map[string]string
	Body    []byte
}

// ErrUnroutable is a publication the destination broker would not take
// as addressed: its exchange is missing, it routed to no queue (returned,
// as mandatory asks), or the broker refused the route's user. Retrying
// helps once the destination is set up; it says nothing of the broker's
// health, so it does not count toward the route's circuit.
var ErrUnroutable = errors.New("not routable at the destination")
