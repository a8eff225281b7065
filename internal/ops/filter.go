package ops

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/rule"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/webhook"
)

// ConfigTokenActor is who acts with the config's admin.token: an admin
// token named by where it is kept.
const ConfigTokenActor = "config:admin.token"

// FilterFields is the one typed shape of an event filter: the selection as
// a person or a script writes it, times as RFC 3339 or an age. The admin
// API's query and bodies, the versioned API (its listing's query, its
// replay body), the console's forms and the CLI's flags all read into it,
// and Parse makes the store's EventFilter of it. A listing adds its page
// (ListFilter), a replay its limit (ReplayFilter).
type FilterFields struct {
	Source    string `json:"source,omitempty" query:"source" doc:"Only events of this source."`
	EventType string `json:"event_type,omitempty" query:"event_type" doc:"Only events of this type."`
	State     string `json:"state,omitempty" query:"state" enum:"pending,retrying,delivered,dead,stale" doc:"Only events with a delivery in this state."`
	Route     string `json:"route,omitempty" query:"route" doc:"Only events with a delivery to this route."`
	Since     string `json:"since,omitempty" query:"since" doc:"Received at or after: RFC 3339, or an age (2h, 3d)."`
	Until     string `json:"until,omitempty" query:"until" doc:"Received before: RFC 3339, or an age."`
	Where     string `json:"where,omitempty" query:"where" maxLength:"16384" doc:"Only events this expression takes: a bool expression of the route filters' language (CEL) over body, headers, source, event_type and received_at, such as body.data.object.customer == \"cus_Q8x\". A search over the body needs a window: without since it searches the last 24 hours, and says so."`
}

// DefaultSearchWindow is how far back a search over the body looks when
// it is given no since: a body is read to be judged, and a window keeps
// that bounded.
const DefaultSearchWindow = 24 * time.Hour

// FilterFieldsFromQuery reads the selection's fields from a query or a
// form (their names are the JSON names).
func FilterFieldsFromQuery(q url.Values) FilterFields {
	return FilterFields{Source: q.Get("source"), EventType: q.Get("event_type"), State: q.Get("state"), Route: q.Get("route"),
		Since: q.Get("since"), Until: q.Get("until"), Where: q.Get("where")}
}

// Parse checks ff and makes the store's filter of it (ErrInvalidRequest
// when wrong).
func (ff FilterFields) Parse() (store.EventFilter, error) {
	f := store.EventFilter{Source: ff.Source, EventType: ff.EventType, State: ff.State, Route: ff.Route}
	var err error
	if f.Since, err = parseTime(ff.Since); err != nil {
		return f, Invalid("since: " + err.Error())
	}
	if f.Until, err = parseTime(ff.Until); err != nil {
		return f, Invalid("until: " + err.Error())
	}
	if f.State != "" && !validState(f.State) {
		return f, Invalid("state: must be pending, retrying, delivered, dead or stale")
	}
	if strings.TrimSpace(ff.Where) != "" {
		if f.Search, err = CompileSearch(ff.Where); err != nil {
			return f, err
		}
		if f.Since.IsZero() {
			f.Since, f.Search.DefaultWindow = time.Now().Add(-DefaultSearchWindow), true
		}
	}
	return f, nil
}

// CompileSearch compiles a --where expression into the store's search
// (ErrInvalidRequest, naming the line and column, when it does not
// compile). An event the expression cannot judge (a field it reads is
// missing) is not taken.
func CompileSearch(where string) (*store.Search, error) {
	s, err := rule.CompileSearch(where, rule.Limits{})
	if err != nil {
		return nil, Invalid("where: " + err.Error())
	}
	return &store.Search{Text: where, Contains: s.Contains(), Keep: func(ctx context.Context, c store.SearchCandidate) bool {
		ok, err := s.Match(ctx, rule.Input{Body: rule.ParseBody(c.Body), Headers: rule.HeadersOf(c.Headers),
			Source: c.Source, EventType: c.EventType, ReceivedAt: c.ReceivedAt})
		return err == nil && ok
	}}, nil
}

// ListFilter is a listing's filter: ff's selection, limit events (0: the
// listing's default) from the page after cursor (as a listing gave it),
// and only the events whose sender's id (idempotency key) is key, when
// set.
func ListFilter(ff FilterFields, limit int, cursor, key string) (store.EventFilter, error) {
	f, err := ff.Parse()
	if err != nil {
		return f, err
	}
	if limit < 0 {
		return f, Invalid("limit: must be positive")
	}
	if key != "" && f.Search != nil {
		return f, Invalid("key and where: a listing by the sender's id takes no search over the body; use one or the other")
	}
	f.Limit, f.Key = limit, key
	if f.Before, err = store.ParseReplayCursor(cursor); err != nil {
		return f, Invalid("cursor: not one this listing gave")
	}
	return f, nil
}

// ReplayFilter is a replay's selection in a request body: the filter's
// fields and the most events to replay.
type ReplayFilter struct {
	FilterFields
	Limit int `json:"limit,omitempty" minimum:"0" doc:"The most events to replay; all the filter selects when 0."`
}

// Parse checks rf and makes the store's filter of it.
func (rf ReplayFilter) Parse() (store.EventFilter, error) {
	f, err := rf.FilterFields.Parse()
	if err != nil {
		return f, err
	}
	if rf.Limit < 0 {
		return f, Invalid("limit: must be positive")
	}
	f.Limit = rf.Limit
	return f, nil
}

// Invalid is an ErrInvalidRequest saying msg.
func Invalid(msg string) error {
	return fmt.Errorf("%w: %s", ErrInvalidRequest, msg)
}

func validState(s string) bool {
	switch webhook.DeliveryState(s) {
	case webhook.StatePending, webhook.StateRetrying, webhook.StateDelivered, webhook.StateDead, webhook.StateStale:
		return true
	}
	return false
}

// parseTime reads RFC 3339, or an age like "2h" or "3d" meaning that long
// ago.
func parseTime(v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	d, err := config.ParseDuration(v)
	if err != nil {
		return time.Time{}, errors.New("want RFC 3339 (2026-11-27T14:00:00Z) or an age (2h, 3d)")
	}
	return time.Now().Add(-d), nil
}
