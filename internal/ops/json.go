package ops

import (
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/tracing"
	"github.com/hookrelay/hookrelay/internal/webhook"
)

// The shapes the admin API answers with and the CLI prints with --json.
// Scripts parse them: a field's name, type and place do not change.

// EventList is part of the events a filter selects: Shown of Total.
type EventList struct {
	// Total counts the events the filter selects, up to MaxCount; with
	// TotalAtLeast set there are more (the count stopped there).
	Total        int64          `json:"total"`
	TotalAtLeast bool           `json:"total_at_least,omitempty"`
	Shown        int            `json:"shown"`
	Items        []EventSummary `json:"items"`
	// NextCursor, when set, gives the next page (older events) as the
	// listing's cursor; empty on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
	// Search says what a search over the body read; absent without one.
	Search *SearchInfo `json:"search,omitempty"`
}

// SearchInfo is what a search over the body read: its expression, its
// window, and whether the window was the default one.
type SearchInfo struct {
	Where string     `json:"where" doc:"The expression, as given."`
	Since time.Time  `json:"since" doc:"The window's start: events received at or after it were searched."`
	Until *time.Time `json:"until,omitempty" doc:"The window's end, when one was given."`
	// DefaultWindow says no since was given: the last 24 hours were
	// searched (Note words it).
	DefaultWindow bool   `json:"default_window,omitempty" doc:"No since was given, so the last 24 hours were searched."`
	Note          string `json:"note,omitempty" doc:"The window in words, when it was the default."`
	// Indexed says the expression names a body field's value, which the
	// index serves; without, every body of the window is read.
	Indexed bool `json:"indexed" doc:"The expression compares a body field with a constant, which the index finds; without one, every body in the window is read."`
}

// SearchInfoOf describes f's search; nil when f has none.
func SearchInfoOf(f store.EventFilter) *SearchInfo {
	if f.Search == nil {
		return nil
	}
	si := &SearchInfo{Where: f.Search.Text, Since: f.Since.UTC(), DefaultWindow: f.Search.DefaultWindow, Indexed: f.Search.Contains != nil}
	if !f.Until.IsZero() {
		u := f.Until.UTC()
		si.Until = &u
	}
	if si.DefaultWindow {
		si.Note = "no since given: searched the last 24h (since " + si.Since.Format(time.RFC3339) + "); set since for another window"
	}
	return si
}

// The event rows are the store's (see there): one set of types.
type (
	EventSummary    = store.EventSummary
	DeliverySummary = store.DeliverySummary
	EventDetail     = store.EventDetail
	DeliveryDetail  = store.DeliveryDetail
	AttemptRow      = store.AttemptRow
)

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
	State string `json:"state,omitempty"`
	// RouteDeleted: the route was deleted and its queue is gone; its
	// letters can be read and dropped, not requeued.
	RouteDeleted bool         `json:"route_deleted,omitempty"`
	Items        []DeadLetter `json:"items"`
}

// DeadLetter is a message in a route's dead-letter queue, as its headers
// describe it, with its pair's state: webhook.DeadLetterInfo, whose fields
// and JSON names it has. It is a type of its own only for its name, which
// the API's document (api/openapi.json) calls its schema by.
type DeadLetter webhook.DeadLetterInfo

// eventSummary marks e's deliveries to routes not in the config.
func eventSummary(e store.EventSummary, served func(route string) bool) EventSummary {
	for i := range e.Deliveries {
		e.Deliveries[i].Unserved = !served(e.Deliveries[i].Route)
	}
	return e
}

// eventDetail marks e's deliveries to routes not in the config and says,
// for each retrying one, which attempt comes next and when.
func eventDetail(e *store.EventDetail, served func(route string) bool, linkTemplate string) *EventDetail {
	e.TraceLink = tracing.Link(linkTemplate, e.TraceID)
	for i := range e.Deliveries {
		d := &e.Deliveries[i]
		for j := range d.AttemptRows {
			a := &d.AttemptRows[j]
			a.TraceLink = tracing.Link(linkTemplate, a.TraceID)
		}
		d.Unserved = !served(d.Route)
		if d.State == string(webhook.StateRetrying) {
			d.NextAttempt = 1
			for _, a := range d.AttemptRows {
				if a.Series == d.Series {
					d.NextAttempt = max(d.NextAttempt, a.Attempt+1)
				}
			}
			due := d.DueAt
			d.NextAttemptAt = &due
		}
	}
	return e
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
	// Team owns the route.
	Team string `json:"team,omitempty"`
	// Declared: a route of config.yaml, read-only at run time; else made
	// at run time, at Version (1 when made).
	Declared bool  `json:"declared"`
	Version  int64 `json:"version,omitempty"`
	// SecretFingerprint names a run-time route's signing secret.
	SecretFingerprint string `json:"secret_fingerprint,omitempty"`
	// Deleted: the route was deleted and finishes its backlog as Disposal
	// says (deliver, dead_letter) before it goes.
	Deleted  bool   `json:"deleted,omitempty"`
	Disposal string `json:"disposal,omitempty"`
	// Pending, Retrying and Dead count the route's deliveries in those
	// states in Postgres.
	Pending  int64 `json:"pending"`
	Retrying int64 `json:"retrying"`
	Dead     int64 `json:"dead"`
	// Ordering is the route's ordering (drop_stale, fifo), empty for
	// none.
	Ordering string `json:"ordering,omitempty"`
	// Waiting counts a fifo route's deliveries parked behind an earlier
	// event of their resource (pending too), of WaitingResources
	// resources, the oldest LongestWaitSeconds old; Held lists up to 10
	// resources held back (events waiting, or a dead head), the longest
	// waiting first.
	Waiting            int64      `json:"waiting,omitempty"`
	WaitingResources   int64      `json:"waiting_resources,omitempty"`
	LongestWaitSeconds *float64   `json:"longest_wait_seconds,omitempty"`
	Held               []LaneHead `json:"held,omitempty"`
	// State is what the dispatchers do with the route, the first of:
	// unopened (a route made at run time whose signing secret or header
	// values this process's keys do not open; StateDetail says why: it is
	// not delivered, its messages wait in its queue); paused; circuit-open (its probe due at CircuitOpenUntil);
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
	// PausedReason is what the operator who paused it said.
	PausedReason string `json:"paused_reason,omitempty"`
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
	// Filtered: the route has a filter (docs/rules.md). FilteredLastHour
	// counts the events its bindings matched that its filter did not take
	// in the last hour, FilterErrorsLastHour those it could not judge;
	// both absent without a filter.
	Filtered             bool   `json:"filtered,omitempty"`
	FilteredLastHour     *int64 `json:"filtered_last_hour,omitempty"`
	FilterErrorsLastHour *int64 `json:"filter_errors_last_hour,omitempty"`
}

// LaneHead is a resource of a fifo route whose events are held back: its
// head goes first, Waiting events wait behind it.
type LaneHead struct {
	Source   string    `json:"source"`
	Resource string    `json:"resource"`
	EventID  uuid.UUID `json:"event_id"`
	// State is the head's: dead (it holds the resource until requeued or
	// skipped), retrying, or pending (in flight, or its copy on its way).
	State    string    `json:"state"`
	Attempts int       `json:"attempts"`
	Waiting  int64     `json:"waiting"`
	Since    time.Time `json:"since"`
}

func laneHeadOf(h store.LaneHead) LaneHead {
	return LaneHead{Source: h.Source, Resource: h.Resource, EventID: h.Event, State: string(h.State), Attempts: h.Attempts, Waiting: h.Waiting, Since: h.Since}
}
