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
	ReceivedAt     time.Time
}

// RoutingKey is the topic routing key of the event: "<source>.<event_type>".
func (e *Event) RoutingKey() string { return RoutingKey(e.Source, e.EventType) }

// RoutingKey joins a source and an event type into a topic routing key.
func RoutingKey(source, eventType string) string { return source + "." + eventType }

// Message is what the outbox publishes to RabbitMQ for one event.
type Message struct {
	// OutboxID identifies the outbox row to delete once the publish is
	// confirmed.
	OutboxID    int64
	EventID     uuid.UUID
	RoutingKey  string
	Source      string
	EventType   string
	ContentType string
	Body        []byte
	ReceivedAt  time.Time
}

// AMQP header names carried by every published event. Dispatchers read them
// back; operators see them in the management UI.
const (
	HeaderEventID   = "x-hookrelay-event-id"
	HeaderSource    = "x-hookrelay-source"
	HeaderEventType = "x-hookrelay-event-type"
)
