package ops

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/httpserver"
	"github.com/hookrelay/hookrelay/internal/rule"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/rs/zerolog"
)

// Handler serves the admin API; every request needs "Authorization: Bearer
// <token>".
//
//	GET  /api/events               ?source=&event_type=&state=&route=&since=&until=&limit=
//	                               {"total": N, "shown": n, "items": [...]}
//	GET  /api/events/{id}
//	POST /api/events/{id}/replay   ?route=&include_delivered=true&include_stale=true&dry_run=true
//	POST /api/replay               {"filter": {...}, "after": "", "include_delivered": false, "include_stale": false, "dry_run": false}
//	POST /api/events/{id}/retry    ?route=&dry_run=true
//	POST /api/retry                ?route=R&state=retrying&dry_run=true
//	POST /api/routes/{name}/pause  (and /resume; see routesAPI)
//	GET  /api/routes/{name}/versions?source=&resource=  (and DELETE; see versionsAPI)
//
// POST /api/replay replays at most MaxAPIReplayEvents events per request
// (see there), and POST /api/retry retries at most as many pairs.
func Handler(s *Service, token string, logger zerolog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/events", func(w http.ResponseWriter, r *http.Request) {
		f, err := filterFromQuery(r.URL.Query())
		if err != nil {
			httpserver.WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		list, err := s.EventList(r.Context(), f)
		if err != nil {
			logger.Error().Err(err).Msg("listing events")
			httpserver.WriteError(w, http.StatusServiceUnavailable, "storage unavailable")
			return
		}
		httpserver.WriteJSON(w, http.StatusOK, list)
	})
	mux.HandleFunc("GET /api/events/{id}", func(w http.ResponseWriter, r *http.Request) {
		id, err := uuid.Parse(r.PathValue("id"))
		if err != nil {
			httpserver.WriteError(w, http.StatusBadRequest, "invalid event id")
			return
		}
		ev, err := s.EventShow(r.Context(), id)
		switch {
		case errors.Is(err, store.ErrNotFound):
			httpserver.WriteError(w, http.StatusNotFound, "no such event")
		case err != nil:
			logger.Error().Err(err).Msg("reading event")
			httpserver.WriteError(w, http.StatusServiceUnavailable, "storage unavailable")
		default:
			httpserver.WriteJSON(w, http.StatusOK, ev)
		}
	})
	mux.HandleFunc("POST /api/events/{id}/replay", func(w http.ResponseWriter, r *http.Request) {
		id, err := uuid.Parse(r.PathValue("id"))
		if err != nil {
			httpserver.WriteError(w, http.StatusBadRequest, "invalid event id")
			return
		}
		q := r.URL.Query()
		replay(w, r, s, logger, ReplayRequest{
			EventID:          id,
			Filter:           store.EventFilter{Route: q.Get("route")},
			IncludeDelivered: q.Get("include_delivered") == "true",
			IncludeStale:     q.Get("include_stale") == "true",
			DryRun:           q.Get("dry_run") == "true",
		})
	})
	mux.HandleFunc("POST /api/replay", func(w http.ResponseWriter, r *http.Request) {
		var body ReplayBody
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil {
			httpserver.WriteError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
			return
		}
		req, err := body.Request()
		if err != nil {
			httpserver.WriteError(w, http.StatusBadRequest, strings.TrimPrefix(err.Error(), ErrInvalidRequest.Error()+": "))
			return
		}
		if req.EventID == uuid.Nil && req.Filter == (store.EventFilter{}) {
			httpserver.WriteError(w, http.StatusBadRequest, "refusing to replay everything: give a filter")
			return
		}
		req.MaxEvents = MaxAPIReplayEvents
		replay(w, r, s, logger, req)
	})
	mux.HandleFunc("POST /api/events/{id}/retry", func(w http.ResponseWriter, r *http.Request) {
		id, err := uuid.Parse(r.PathValue("id"))
		if err != nil {
			httpserver.WriteError(w, http.StatusBadRequest, "invalid event id")
			return
		}
		q := r.URL.Query()
		retry(w, r, s, logger, RetryRequest{EventID: id, Route: q.Get("route"), DryRun: q.Get("dry_run") == "true"})
	})
	mux.HandleFunc("POST /api/retry", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		req := RetryRequest{Route: q.Get("route"), State: q.Get("state"), DryRun: q.Get("dry_run") == "true"}
		req.MaxPairs = MaxAPIReplayEvents
		retry(w, r, s, logger, req)
	})
	routesAPI(mux, s, logger)
	versionsAPI(mux, s, logger)
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		sum := sha256.Sum256([]byte(got))
		if !ok || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="hookrelay"`)
			httpserver.WriteError(w, http.StatusUnauthorized, "missing or invalid bearer token")
			return
		}
		mux.ServeHTTP(w, r.WithContext(WithTeam(WithActor(r.Context(), ConfigTokenActor), PlatformTeam)))
	})
}

// ConfigTokenActor is who acts with the config's admin.token: an admin
// token named by where it is kept.
const ConfigTokenActor = "config:admin.token"

// MaxAPIReplayEvents bounds a replay through the admin API. A replay is
// paced (it waits for each batch to drain so live events keep flowing), so
// a large one takes minutes: too long for one HTTP request to hold
// silently, in the process that also ingests. A bigger selection is
// refused with 422 naming the way on: page with "limit" (at most this)
// and "after" (the previous response's next_after), each request
// returning once its events are mostly delivered, or run `hookrelay
// replay`, which paces a replay of any size and prints its progress.
const MaxAPIReplayEvents = 1000

func replay(w http.ResponseWriter, r *http.Request, s *Service, logger zerolog.Logger, req ReplayRequest) {
	res, err := s.Replay(r.Context(), req)
	var stalled *StalledError
	switch {
	case errors.Is(err, store.ErrNotFound):
		httpserver.WriteError(w, http.StatusNotFound, "no such event")
	case errors.Is(err, ErrUnknownRoute), errors.Is(err, ErrInvalidRequest):
		httpserver.WriteError(w, http.StatusBadRequest, strings.TrimPrefix(err.Error(), ErrInvalidRequest.Error()+": "))
	case errors.Is(err, ErrTooLarge):
		httpserver.WriteError(w, http.StatusUnprocessableEntity, strings.TrimPrefix(err.Error(), ErrTooLarge.Error()+": "))
	case errors.As(err, &stalled):
		logger.Warn().Err(err).Msg("replay stalled")
		httpserver.WriteError(w, http.StatusServiceUnavailable, err.Error())
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The caller hung up while the replay waited for a batch; what was
		// enqueued stays enqueued. Nobody is left to answer.
		logger.Info().Err(err).Msg("replay request ended by the caller")
	case err != nil:
		logger.Error().Err(err).Msg("replaying")
		httpserver.WriteError(w, http.StatusServiceUnavailable, "storage unavailable")
	default:
		httpserver.WriteJSON(w, http.StatusOK, res)
	}
}

func retry(w http.ResponseWriter, r *http.Request, s *Service, logger zerolog.Logger, req RetryRequest) {
	res, err := s.Retry(r.Context(), req)
	var stalled *StalledError
	switch {
	case errors.Is(err, ErrTooLarge):
		httpserver.WriteError(w, http.StatusUnprocessableEntity, strings.TrimPrefix(err.Error(), ErrTooLarge.Error()+": "))
	case errors.As(err, &stalled):
		logger.Warn().Err(err).Msg("retry stalled")
		httpserver.WriteError(w, http.StatusServiceUnavailable, err.Error())
	case errors.Is(err, store.ErrNotFound):
		httpserver.WriteError(w, http.StatusNotFound, "no such event")
	case errors.Is(err, ErrUnknownRoute), errors.Is(err, ErrInvalidRequest):
		httpserver.WriteError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		logger.Info().Err(err).Msg("retry request ended by the caller")
	case err != nil:
		// The cause (a driver error names hosts and users) goes to the
		// log, as replay's does.
		logger.Error().Err(err).Msg("retrying")
		httpserver.WriteError(w, http.StatusServiceUnavailable, "storage unavailable")
	default:
		httpserver.WriteJSON(w, http.StatusOK, res)
	}
}

// filterFromQuery reads a listing's EventFilter from query parameters
// (the admin API's GET /api/events; the CLI's flags have the same
// names). Times are RFC 3339 or an age.
func filterFromQuery(q url.Values) (store.EventFilter, error) {
	limit := 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return store.EventFilter{}, errors.New("limit: must be a positive number")
		}
		limit = n
	}
	f, err := ListFilter(FilterFieldsFromQuery(q), limit, "", q.Get("key"))
	if err != nil {
		return f, errors.New(strings.TrimPrefix(err.Error(), ErrInvalidRequest.Error()+": "))
	}
	return f, nil
}

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
