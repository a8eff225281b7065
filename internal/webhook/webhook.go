// Package webhook holds hookrelay's core types: an accepted Event and the
// Message the outbox publishes for it. It imports nothing internal.
package webhook

import (
	"net/http"
	"time"

	"github.com/google/uuid"
)

// Event is one accepted webhook, stored byte for byte as it arrived.
type Event struct {
	ID             uuid.UUID
	Source         string
	IdempotencyKey string
	EventType      string
	ContentType    string
	Headers        http.Header
	Body           []byte
	// BodySHA256 is the SHA-256 of Body for a source that deduplicates on
	// the body (its signature covers only the body), nil otherwise. An
	// event of the same source with the same hash is a duplicate.
	BodySHA256 []byte
	ReceivedAt time.Time
}

// RoutingKey is the topic routing key of the event: "<source>.<event_type>".
func (e *Event) RoutingKey() string { return RoutingKey(e.Source, e.EventType) }

// RoutingKey joins a source and an event type into a topic routing key.
func RoutingKey(source, eventType string) string { return source + "." + eventType }

// Message is what the outbox publishes to RabbitMQ for one event.
type Message struct {
	// OutboxID identifies the outbox row to delete once the publish is
	// confirmed.
	OutboxID   int64
	EventID    uuid.UUID
	RoutingKey string
	// Route, when set, sends the message to that route's queue only (a
	// replay) instead of through the topic exchange.
	Route string
	// Gen is the pair's generation for a message addressed to one route.
	Gen         int64
	Source      string
	EventType   string
	ContentType string
	Body        []byte
	ReceivedAt  time.Time

	// OutboxAttempts counts the publishes of this row the broker refused
	// before this one (nack, return, no confirm in time).
	OutboxAttempts int
}

// AMQP header names carried by every published event. Dispatchers read them
// back; operators see them in the management UI.
const (
	HeaderEventID   = "x-hookrelay-event-id"
	HeaderSource    = "x-hookrelay-source"
	HeaderEventType = "x-hookrelay-event-type"
)

// More AMQP headers: the position of a delivery in its attempt series, and
// when the series began. They travel with retries and dead letters.
const (
	HeaderAttempt        = "x-hookrelay-attempt"
	HeaderFirstAttemptAt = "x-hookrelay-first-attempt-at"
	// HeaderGen is the generation of a pair's copy (deliveries.gen): only
	// the copy whose generation matches Postgres is delivered. Absent on
	// an event's first copy, which is generation 0.
	HeaderGen = "x-hookrelay-gen"
)

// DeliveryState is where the delivery of one event to one route stands.
type DeliveryState string

// Delivery states, as stored in deliveries.state.
const (
	StatePending   DeliveryState = "pending"
	StateDelivered DeliveryState = "delivered"
	StateRetrying  DeliveryState = "retrying"
	StateDead      DeliveryState = "dead"
)

// Attempt is one HTTP attempt to deliver an event to a route, and what it
// led to.
type Attempt struct {
	EventID uuid.UUID
	Route   string
	// Number is the attempt's position in its series, from 1.
	Number    int
	StartedAt time.Time
	Duration  time.Duration
	// Status is the HTTP status, 0 when no response arrived.
	Status          int
	ResponseHeaders http.Header
	// ResponseBody is the first KiB of the response body.
	ResponseBody []byte
	// Error is the network error or the reason for failure, "" on success.
	Error string
	// Outcome is the state the delivery moves to.
	Outcome DeliveryState
	// Gen is the generation of the copy that made the attempt.
	Gen int64
	// RetryIn is, for a retrying outcome, how long until the retry copy
	// is due back (its tier's delay).
	RetryIn time.Duration
}
