package ops

import (
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/store"
)

// The shapes the admin API answers with and the CLI prints with --json.
// Scripts parse them: a field's name, type and place do not change.

// EventList is part of the events a filter selects: Shown of Total.
type EventList struct {
	Total int64          `json:"total"`
	Shown int            `json:"shown"`
	Items []EventSummary `json:"items"`
	// NextCursor, when set, gives the next page (older events) as the
	// listing's cursor; empty on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// EventSummary is an event in a listing.
type EventSummary struct {
	ID             uuid.UUID         `json:"id"`
	Source         string            `json:"source"`
	EventType      string            `json:"event_type"`
	IdempotencyKey string            `json:"idempotency_key"`
	ReceivedAt     time.Time         `json:"received_at"`
	Purged         bool              `json:"purged,omitempty"`
	Deliveries     []DeliverySummary `json:"deliveries"`
}

// DeliverySummary is one route's delivery state of an event.
type DeliverySummary struct {
	Route         string     `json:"route"`
	State         string     `json:"state"`
	Attempts      int        `json:"attempts"`
	LastStatus    *int       `json:"last_status,omitempty"`
	LastError     *string    `json:"last_error,omitempty"`
	LastAttemptAt *time.Time `json:"last_attempt_at,omitempty"`
	// Unserved marks a route that is not in the config: no dispatcher
	// delivers it.
	Unserved bool `json:"unserved,omitempty"`
}

// EventDetail is an event, its deliveries and their attempts.
type EventDetail struct {
	ID             uuid.UUID        `json:"id"`
	Source         string           `json:"source"`
	EventType      string           `json:"event_type"`
	IdempotencyKey string           `json:"idempotency_key"`
	ContentType    string           `json:"content_type"`
	ReceivedAt     time.Time        `json:"received_at"`
	Headers        http.Header      `json:"headers"`
	Body           string           `json:"body"`
	Purged         bool             `json:"purged,omitempty"`
	Deliveries     []DeliveryDetail `json:"deliveries"`

	// OrderingResource and OrderingVersion are what the stale check of a
	// drop_stale route compares (the source's ordering), absent when none.
	OrderingResource string `json:"ordering_resource,omitempty"`
	OrderingVersion  string `json:"ordering_version,omitempty"`
}

// DeliveryDetail is one route's delivery with every attempt.
type DeliveryDetail struct {
	DeliverySummary
	FirstAttemptAt *time.Time `json:"first_attempt_at,omitempty"`
	DeliveredAt    *time.Time `json:"delivered_at,omitempty"`
	// Series is the pair's current attempt series: 1, and one more for
	// each replay or requeued dead letter.
	Series int `json:"series"`
	// NextAttempt and NextAttemptAt say, for a retrying pair, which
	// attempt of the series comes next and when its retry tier gives it
	// back (`hookrelay retry` brings it forward).
	NextAttempt   int          `json:"next_attempt,omitempty"`
	NextAttemptAt *time.Time   `json:"next_attempt_at,omitempty"`
	AttemptRows   []AttemptRow `json:"attempts_detail"`
}

// AttemptRow is one HTTP attempt.
type AttemptRow struct {
	// Attempt is its number within its series.
	Attempt         int         `json:"attempt"`
	Series          int         `json:"series"`
	StartedAt       time.Time   `json:"started_at"`
	DurationMS      int         `json:"duration_ms"`
	Status          *int        `json:"status,omitempty"`
	ResponseHeaders http.Header `json:"response_headers,omitempty"`
	ResponseBody    string      `json:"response_body,omitempty"`
	Error           *string     `json:"error,omitempty"`
	Outcome         string      `json:"outcome"`
}

// DeadLetterList is part of a dead-letter queue: Shown of its Total
// messages.
type DeadLetterList struct {
	Queue string `json:"queue"`
	// Total is the queue's message count; Read is how many of them the
	// listing read to find what it shows.
	Total int `json:"total"`
	Read  int `json:"read"`
	Shown int `json:"shown"`
	// State is the pair state the listing showed only, if any.
	State string       `json:"state,omitempty"`
	Items []DeadLetter `json:"items"`
}

// DeadLetter is a message in a route's dead-letter queue, as its headers
// describe it.
type DeadLetter struct {
	EventID string `json:"event_id"`
	// State is the pair's delivery state in Postgres, or "missing" when
	// Postgres has no delivery of it (its event purged).
	State          string `json:"state"`
	Source         string `json:"source"`
	EventType      string `json:"event_type"`
	Attempts       int64  `json:"attempts"`
	LastStatus     int64  `json:"last_status"`
	LastError      string `json:"last_error"`
	FirstAttemptAt string `json:"first_attempt_at"`
	LastAttemptAt  string `json:"last_attempt_at"`
	// Reason is max_attempts, no_retry_status, malformed or event_missing
	// (the dispatcher's), or delivery_limit (RabbitMQ parked it).
	Reason string `json:"reason"`
}

// FilterBody is an event filter in a request body (POST /api/replay): the
// fields of store.EventFilter, times in RFC 3339.
type FilterBody struct {
	Source    string    `json:"source,omitempty"`
	EventType string    `json:"event_type,omitempty"`
	State     string    `json:"state,omitempty"`
	Route     string    `json:"route,omitempty"`
	Since     time.Time `json:"since,omitzero"`
	Until     time.Time `json:"until,omitzero"`
	Limit     int       `json:"limit,omitempty"`
}

// ReplayBody is the body of POST /api/replay: a ReplayRequest without the
// CLI's pacing knobs.
type ReplayBody struct {
	EventID          uuid.UUID  `json:"event_id,omitzero"`
	Filter           FilterBody `json:"filter"`
	After            string     `json:"after,omitempty"`
	IncludeDelivered bool       `json:"include_delivered,omitempty"`
	IncludeStale     bool       `json:"include_stale,omitempty"`
	DryRun           bool       `json:"dry_run,omitempty"`
	ListLimit        int        `json:"list_limit,omitempty"`
}

// Request is the ReplayRequest b asks for.
func (b ReplayBody) Request() ReplayRequest {
	return ReplayRequest{
		EventID: b.EventID, After: b.After,
		Filter: store.EventFilter{Source: b.Filter.Source, EventType: b.Filter.EventType, State: b.Filter.State, Route: b.Filter.Route,
			Since: b.Filter.Since, Until: b.Filter.Until, Limit: b.Filter.Limit},
		IncludeDelivered: b.IncludeDelivered, IncludeStale: b.IncludeStale, DryRun: b.DryRun, ListLimit: b.ListLimit,
	}
}

func deliverySummary(d store.DeliverySummary, served bool) DeliverySummary {
	return DeliverySummary{
		Route: d.Route, State: d.State, Attempts: d.Attempts,
		LastStatus: d.LastStatus, LastError: d.LastError, LastAttemptAt: d.LastAttemptAt, Unserved: !served,
	}
}

func eventSummary(e store.EventSummary, served func(route string) bool) EventSummary {
	return EventSummary{
		ID: e.ID, Source: e.Source, EventType: e.EventType, IdempotencyKey: e.IdempotencyKey,
		ReceivedAt: e.ReceivedAt, Purged: e.Purged,
		Deliveries: convert(e.Deliveries, func(d store.DeliverySummary) DeliverySummary {
			return deliverySummary(d, served(d.Route))
		}),
	}
}

func eventDetail(e *store.EventDetail, served func(route string) bool) *EventDetail {
	return &EventDetail{
		ID: e.ID, Source: e.Source, EventType: e.EventType, IdempotencyKey: e.IdempotencyKey, ContentType: e.ContentType,
		ReceivedAt: e.ReceivedAt, Headers: e.Headers, Body: e.Body, Purged: e.Purged,
		OrderingResource: e.OrderingResource, OrderingVersion: e.OrderingVersion,
		Deliveries: convert(e.Deliveries, func(d store.DeliveryDetail) DeliveryDetail {
			dd := DeliveryDetail{
				DeliverySummary: deliverySummary(d.DeliverySummary, served(d.Route)),
				FirstAttemptAt:  d.FirstAttemptAt, DeliveredAt: d.DeliveredAt, Series: d.Series,
				AttemptRows: convert(d.AttemptRows, func(a store.AttemptRow) AttemptRow { return AttemptRow(a) }),
			}
			if d.State == "retrying" {
				dd.NextAttempt = 1
				for _, a := range d.AttemptRows {
					if a.Series == d.Series {
						dd.NextAttempt = max(dd.NextAttempt, a.Attempt+1)
					}
				}
				due := d.DueAt
				dd.NextAttemptAt = &due
			}
			return dd
		}),
	}
}

// convert maps a slice, nil to nil (JSON null) and empty to empty ([]).
func convert[From, To any](in []From, f func(From) To) []To {
	if in == nil {
		return nil
	}
	out := make([]To, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}

// RouteList is `hookrelay routes --json`: every configured route in the
// config's order, then each route that has deliveries in Postgres but is
// not in the config (Unserved, no queue and no state).
type RouteList struct {
	Routes []RouteSummary `json:"routes"`
	// BrokerError says why Ready is null: the broker could not be asked.
	BrokerError string `json:"broker_error,omitempty"`
}

// RouteSummary is one route of the routes listing.
type RouteSummary struct {
	Route    string   `json:"route"`
	Queue    string   `json:"queue,omitempty"`
	Bindings []string `json:"bindings"`
	// Pending, Retrying and Dead count the route's deliveries in those
	// states in Postgres.
	Pending  int64 `json:"pending"`
	Retrying int64 `json:"retrying"`
	Dead     int64 `json:"dead"`
	// State is what the dispatchers do with the route, the first of:
	// paused; circuit-open (its probe due at CircuitOpenUntil);
	// circuit-half-open (one probe in flight); held(retry-after) (the
	// destination asked for a pause, until HeldUntil); held(rate-limit)
	// (deliveries wait for the route's rate limit, until HeldUntil);
	// no-consumers (no dispatcher consumes its queue); active. Empty for
	// an unserved route.
	State string `json:"state,omitempty"`
	// StateDetail says the state's time in words: "probe in 1m29s",
	// "probe due", "12s" (of a hold), "probe by <dispatcher>".
	StateDetail string `json:"state_detail,omitempty"`
	// Paused, PausedAt and PausedBy are the pause as stored.
	Paused   bool       `json:"paused"`
	PausedAt *time.Time `json:"paused_at,omitempty"`
	PausedBy string     `json:"paused_by,omitempty"`
	// Circuit is closed, open or half_open; ConsecutiveFailures counts
	// toward opening it; CircuitOpenUntil is the end of its cool-down.
	Circuit             string     `json:"circuit,omitempty"`
	ConsecutiveFailures int        `json:"consecutive_failures"`
	CircuitOpenUntil    *time.Time `json:"circuit_open_until,omitempty"`
	// HeldUntil is the end of a hold (a destination's Retry-After, or
	// deliveries waiting for the rate limit), while it lasts.
	HeldUntil *time.Time `json:"held_until,omitempty"`
	// Consumers counts the consumers of the route's queue (each dispatcher
	// has one per unit of the route's concurrency); null when the broker
	// could not be asked.
	Consumers *int `json:"consumers"`
	// Ready is the messages ready in the route's queue; null when the
	// broker could not be asked (see RouteList.BrokerError).
	Ready *int `json:"ready"`
	// OldestUndeliveredSeconds is the age of the route's oldest pending or
	// retrying delivery; null when there is none.
	OldestUndeliveredSeconds *float64 `json:"oldest_undelivered_seconds"`
	// Unserved marks a route that is not in the config: no dispatcher
	// delivers it.
	Unserved bool `json:"unserved,omitempty"`
}
