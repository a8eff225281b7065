// Package webhook holds hookrelay's core types: an accepted Event, the
// Message the outbox publishes for it, the RouteMessage a dispatcher
// consumes, the Attempts it makes and the DeadLetter it parks. It imports
// nothing internal; internal/amqp owns how they look on the wire.
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
	// OrderingResource and OrderingVersion are the resource the event is
	// about and its version, read as the source's ordering declares; both
	// "" when it declares none or the event lacks either field (such an
	// event is never stale). OrderingVersionNum is the version as a
	// decimal number that sorts (a number as sent, an RFC 3339 time as
	// seconds since 1970), "" when it is neither: then it compares as
	// text.
	OrderingResource   string
	OrderingVersion    string
	OrderingVersionNum string
	// TraceParent is the W3C traceparent of the receiver's span for the
	// event, "" when tracing was off: its first copy continues that trace.
	TraceParent string
	// Team is, for an event of the relay's own (source hookrelay), the
	// team whose route or job it is about: only that team's routes, and
	// the platform's, take it. Not stored apart (the body says it).
	Team string
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
	// CC, with Route, sends the same message to these routes' queues too
	// (an event's first copy, addressed to the filtered routes that took
	// it): one publish, RabbitMQ's sender-selected distribution.
	CC []string
	// Gen is the pair's generation for a message addressed to one route.
	Gen int64
	// Attempt is the attempt in its series that the message is for: 1,
	// or, for a retrying pair's next attempt (a retry copy, or one brought
	// forward by hookrelay retry), that attempt's number.
	Attempt int
	// RetryIn, when set, makes the message a retry copy: it goes to the
	// retry tier of that delay, which dead-letters it to Route's queue
	// when the delay has passed. FirstAttemptAt is when its series began.
	RetryIn        time.Duration
	FirstAttemptAt time.Time
	Source         string
	EventType      string
	ContentType    string
	Body           []byte
	ReceivedAt     time.Time

	// OutboxAttempts counts the publishes of this row the broker refused
	// before this one (nack, return, no confirm in time).
	OutboxAttempts int

	// TraceParent is the span the copy's publish continues (a retry copy:
	// its failed attempt's delivery); EventTraceParent is its event's.
	// A copy without the first, addressed to one route (a replay, a
	// resend), starts a trace of its own linked to its event's; an event's
	// first copy continues its event's. Both "" when tracing was off.
	TraceParent      string
	EventTraceParent string
}

// OutboxFailure is a claimed outbox row whose message the broker refused
// (a nack, a return, no confirm in time): the publisher records it on the
// row, and the row waits RetryIn before a claim takes it again.
type OutboxFailure struct {
	OutboxID int64
	// Reason is recorded as the row's last_error.
	Reason string
	// RetryIn is how long the row waits before a claim takes it again.
	RetryIn time.Duration
}

// DeliveryState is where the delivery of one event to one route stands.
type DeliveryState string

// Delivery states, as stored in deliveries.state.
const (
	StatePending   DeliveryState = "pending"
	StateDelivered DeliveryState = "delivered"
	StateRetrying  DeliveryState = "retrying"
	StateDead      DeliveryState = "dead"
	// StateStale is final: a route that drops stale events did not POST
	// the event, because a newer version of its resource was delivered.
	StateStale DeliveryState = "stale"
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
	// FirstAttemptAt is when the attempt's series began (this attempt's
	// start, if it is the first): a retrying outcome's copy carries it on.
	FirstAttemptAt time.Time
	// TraceParent is the W3C traceparent of the attempt's delivery span,
	// "" when tracing is off: its retry copy continues it, and the attempt
	// is stored with its trace id.
	TraceParent string
	// RouteVersion is the version of the route that shaped the attempt's
	// request (its filter and transformation): a run-time route's; 0 for
	// a route of config.yaml.
	RouteVersion int64
}

// RouteMessage is a message of a route queue as the dispatcher reads it:
// which event, which copy of its (event, route) pair, and where that copy
// stands in its attempt series. internal/amqp decodes it from the wire.
type RouteMessage struct {
	EventID     uuid.UUID
	Source      string
	EventType   string
	ContentType string
	Body        []byte
	// Gen is the generation of this copy (0 for an event's first copy):
	// only the copy whose generation Postgres holds is delivered.
	Gen int64
	// Attempt is this copy's attempt in its series, from 1.
	Attempt int
	// FirstAttemptAt is when the series began; zero before its first
	// attempt.
	FirstAttemptAt time.Time
	// Addressed is set on a copy addressed to its route (it carries its
	// generation): every copy but an event's first copy through the topic
	// exchange. A route with a filter takes only addressed copies: a topic
	// copy reaching it (a binding left from before the filter) is not its.
	Addressed bool
	// MovedBack is set on a dead letter that an operator moved back to the
	// route queue: it starts a new series if the pair is still dead at its
	// generation.
	MovedBack bool
	// Malformed, when not nil, says why the message cannot be delivered
	// (it names no valid event id): it goes to the dead-letter queue as
	// it is. Only ContentType, Body, Attempt and Wire are set then.
	Malformed error
	// TraceParent and TraceState are the trace context the message
	// carried (W3C), "" when none.
	TraceParent string
	TraceState  string
	// RetryTier is the retry queue a retry copy waited in, "" for any
	// other copy; RetryAt is when the copy was published there.
	RetryTier string
	RetryAt   time.Time
	// Wire is what the message carried that the dispatcher does not read.
	Wire Wire
}

// Wire is what a consumed message carried besides its RouteMessage fields,
// kept so that its dead letter carries it on unchanged. Only internal/amqp
// reads it.
type Wire struct {
	// MessageID and Type are the AMQP message-id and type properties.
	MessageID string
	Type      string
	// Headers are the message's x-hookrelay-* headers as they arrived.
	Headers map[string]any
}

// DeadLetter says why a message is parked in its route's dead-letter queue,
// as an operator reads it in the message's headers.
type DeadLetter struct {
	Route string
	// Reason is max_attempts, no_retry_status (410 or one of the route's
	// no_retry_statuses), malformed, event_missing (the event was purged),
	// transform_error (the route's transformation failed on the event) or
	// route_deleted.
	Reason string
	// Attempts is the number of the last attempt of the series.
	Attempts int
	// LastStatus is the last attempt's HTTP status, 0 when none arrived.
	LastStatus     int
	LastError      string
	FirstAttemptAt time.Time
	LastAttemptAt  time.Time
}

// DeadLetterInfo is a message in a route's dead-letter queue as its
// headers describe it to an operator: internal/amqp reads it, ops adds the
// pair's State and lists it. Missing headers read as zero values; the
// times are as written. The JSON names are the API's (ops.DeadLetter).
type DeadLetterInfo struct {
	EventID string `json:"event_id"`
	// State is the pair's delivery state in Postgres, or "missing" when
	// Postgres has no delivery of it (its event purged); "" until ops
	// looked it up.
	State     string `json:"state"`
	Source    string `json:"source"`
	EventType string `json:"event_type"`
	Attempts  int64  `json:"attempts"`
	// LastStatus is the last attempt's HTTP status, absent when none
	// arrived (a refused connection, a timeout).
	LastStatus     *int64 `json:"last_status,omitempty"`
	LastError      string `json:"last_error"`
	FirstAttemptAt string `json:"first_attempt_at"`
	LastAttemptAt  string `json:"last_attempt_at"`
	// Reason is the dispatcher's (max_attempts, no_retry_status,
	// malformed, event_missing, ...) or, when RabbitMQ parked the message
	// itself, its x-death reason (delivery_limit).
	Reason string `json:"reason"`
}
