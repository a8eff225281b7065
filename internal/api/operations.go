package api

import (
	"context"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/webhook"
)

// body wraps an answer's body for huma.
type body[T any] struct {
	Body T
}

func answer[T any](v T) *body[T] { return &body[T]{Body: v} }

// RouteInput names a configured route.
type RouteInput struct {
	Route string `path:"route" doc:"A route: of the config, or made at run time." maxLength:"200"`
}

// CreateRouteBody is a route to make: its name and settings.
type CreateRouteBody struct {
	Name string `json:"name" doc:"The route's name: 1-63 of a-z 0-9 _ -, starting with a letter or digit; a route of a team other than the platform is named TEAM:NAME (payments:ledger)." maxLength:"127"`
	ops.RouteInput
}

// RotateSecretBody says how long the previous secret still signs.
type RotateSecretBody struct {
	Overlap string `json:"overlap,omitempty" doc:"How long the previous secret still signs, with a unit (24h); 0s for not at all. Default secrets.overlap."`
}

var routeNameRe = regexp.MustCompile(`^([a-z0-9][a-z0-9_-]{0,62}:)?[a-z0-9][a-z0-9_-]{0,62}$`)

func validRouteName(s string) bool { return routeNameRe.MatchString(s) }

// PauseRouteBody says why a route is paused (optional).
type PauseRouteBody struct {
	Reason string `json:"reason,omitempty" maxLength:"500" doc:"Why the route is paused: shown with the route until it is resumed, and in the audit log."`
}

// IdempotencyInput is the header that makes a job-starting action safe to
// repeat: the same key from the same token answers the job the first
// request started, and starts nothing.
type IdempotencyInput struct {
	IdempotencyKey string `header:"Idempotency-Key" maxLength:"200" doc:"Repeating a request with the same key (per token) returns the job the first one started, starting nothing."`
}

// Listing is one page of a listing: Items of Total, and the cursor of the
// next page, empty on the last.
type Listing[T any] struct {
	Total      int64  `json:"total" doc:"How many items the listing's filter selects in all."`
	Items      []T    `json:"items"`
	NextCursor string `json:"next_cursor,omitempty" doc:"Pass as cursor for the next page; absent on the last page."`
}

// EventListing is the events listing, shaped as every listing is, with
// what a search over the body read.
type EventListing struct {
	Listing[ops.EventSummary]
	Search *ops.SearchInfo `json:"search,omitempty" doc:"What a search over the body (where) read: present with where."`
}

// RouteListing is the routes listing, shaped as every listing is (one
// page: every route), with why the broker's figures are null when it
// could not be asked.
type RouteListing struct {
	Listing[ops.RouteSummary]
	BrokerError string `json:"broker_error,omitempty" doc:"Why ready and consumers are null: the broker could not be asked."`
}

func (a *server) routes() {
	huma.Register(a.api, op(http.MethodGet, "/routes", "list-routes", ops.ActionRead,
		"List the routes with their state, backlog, dead letters, consumers and circuit"),
		func(ctx context.Context, _ *struct{}) (*body[RouteListing], error) {
			list, err := a.svc.RouteList(ctx)
			if err != nil {
				return nil, a.fail(ctx, "listing routes", err)
			}
			return answer(RouteListing{Listing: Listing[ops.RouteSummary]{Total: int64(len(list.Routes)), Items: list.Routes},
				BrokerError: list.BrokerError}), nil
		})
	huma.Register(a.api, op(http.MethodPost, "/routes/{route}/pause", "pause-route", ops.ActionRoutePause,
		"Pause a route: every dispatcher stops taking its messages within 2s; nothing is lost", http.StatusNotFound),
		func(ctx context.Context, in *struct {
			RouteInput
			Body *PauseRouteBody `required:"false"`
		}) (*body[*ops.RoutePauseResult], error) {
			reason := ""
			if in.Body != nil {
				reason = in.Body.Reason
			}
			res, err := a.svc.RoutePause(ctx, in.Route, true, reason)
			if err != nil {
				return nil, a.fail(ctx, "pause route", err)
			}
			return answer(res), nil
		})
	huma.Register(a.api, op(http.MethodPost, "/routes/{route}/resume", "resume-route", ops.ActionRouteResume,
		"Resume a paused route: every dispatcher consumes it again within 2s", http.StatusNotFound),
		func(ctx context.Context, in *RouteInput) (*body[*ops.RoutePauseResult], error) {
			res, err := a.svc.RoutePause(ctx, in.Route, false, "")
			if err != nil {
				return nil, a.fail(ctx, "resume route", err)
			}
			return answer(res), nil
		})
	huma.Register(a.api, op(http.MethodGet, "/routes/{route}", "get-route", ops.ActionRead,
		"Get a route's settings and secret fingerprints (never a secret, nor a header's value)", http.StatusNotFound),
		func(ctx context.Context, in *RouteInput) (*body[*ops.RouteDetail], error) {
			d, err := a.svc.RouteGet(ctx, in.Route)
			if err != nil {
				return nil, a.fail(ctx, "reading a route", err)
			}
			return answer(d), nil
		})
	create := op(http.MethodPost, "/routes", "create-route", ops.ActionRouteCreate,
		"Make a route at run time; every receiver and dispatcher follows within 2s. Its signing secret is in this answer only. "+
			"A team's route to the relay's own side (a loopback, private, link-local or other address that is not globally reachable, "+
			"or a name that resolves to one) answers 422 destination_refused",
		http.StatusConflict)
	create.DefaultStatus = http.StatusCreated
	huma.Register(a.api, create, func(ctx context.Context, in *struct{ Body CreateRouteBody }) (*body[*ops.RouteCreated], error) {
		if !validRouteName(in.Body.Name) {
			return nil, a.fail(ctx, "making a route", ops.Invalid("name: 1-63 of a-z 0-9 _ -, starting with a letter or digit (a team's: TEAM:NAME)"))
		}
		res, err := a.svc.RouteCreate(ctx, in.Body.Name, in.Body.RouteInput)
		if err != nil {
			return nil, a.fail(ctx, "making a route", err)
		}
		return answer(res), nil
	})
	huma.Register(a.api, op(http.MethodPost, "/routes/test", "test-route", ops.ActionRead,
		"Try a filter and a transformation on a stored event, a route's or the ones given (docs/rules.md): whether the route would take it, and the body and headers it would send. Nothing is delivered, changed or audited",
		http.StatusNotFound),
		func(ctx context.Context, in *struct{ Body ops.RouteTestInput }) (*body[*ops.RouteTestResult], error) {
			res, err := a.svc.RouteTest(ctx, in.Body)
			if err != nil {
				return nil, a.fail(ctx, "testing a route's rules", err)
			}
			return answer(res), nil
		})
	huma.Register(a.api, op(http.MethodPatch, "/routes/{route}", "update-route", ops.ActionRouteUpdate,
		"Change a route made at run time: the settings given; every dispatcher follows within 2s. A route of the config answers 409; "+
			"a team's route to the relay's own side, 422 destination_refused",
		http.StatusNotFound, http.StatusConflict),
		func(ctx context.Context, in *struct {
			RouteInput
			Body ops.RouteInput
		}) (*body[*ops.RouteDetail], error) {
			d, err := a.svc.RouteUpdate(ctx, in.Route, in.Body)
			if err != nil {
				return nil, a.fail(ctx, "changing a route", err)
			}
			return answer(d), nil
		})
	huma.Register(a.api, op(http.MethodPost, "/routes/{route}/rotate-secret", "rotate-route-secret", ops.ActionRouteRotateSecret,
		"Give a route made at run time a new signing secret (in this answer only); the previous one still signs for the overlap",
		http.StatusNotFound, http.StatusConflict),
		func(ctx context.Context, in *struct {
			RouteInput
			Body *RotateSecretBody `required:"false"`
		}) (*body[*ops.SecretRotated], error) {
			var overlap *time.Duration
			if in.Body != nil && in.Body.Overlap != "" {
				d, err := config.ParseDuration(in.Body.Overlap)
				if err != nil {
					return nil, a.fail(ctx, "rotating a route's secret", ops.Invalid("overlap: want a duration with a unit (24h), or 0s"))
				}
				overlap = &d
			}
			res, err := a.svc.RouteRotateSecret(ctx, in.Route, overlap)
			if err != nil {
				return nil, a.fail(ctx, "rotating a route's secret", err)
			}
			return answer(res), nil
		})
	huma.Register(a.api, op(http.MethodDelete, "/routes/{route}", "delete-route", ops.ActionRouteDelete,
		"Delete a route made at run time: it takes no new event at once; with undelivered work it answers 409 unless disposal says "+
			"what to do with it (deliver: the dispatchers deliver it first; dead_letter: they move it to its dead letters). "+
			"Its dead letters stay", http.StatusNotFound, http.StatusConflict),
		func(ctx context.Context, in *struct {
			RouteInput
			Disposal string `query:"disposal" enum:"deliver,dead_letter" required:"false" doc:"What to do with undelivered work."`
		}) (*body[*ops.RouteDeleted], error) {
			res, err := a.svc.RouteDelete(ctx, in.Route, in.Disposal)
			if err != nil {
				return nil, a.fail(ctx, "deleting a route", err)
			}
			return answer(res), nil
		})
	huma.Register(a.api, op(http.MethodGet, "/activity", "get-activity", ops.ActionRead,
		"The last hour, minute by minute: each route's delivered and failed attempts, each source's accepted, duplicate and rejected (by reason) requests"),
		func(ctx context.Context, _ *struct{}) (*body[*ops.Activity], error) {
			act, err := a.svc.Activity(ctx)
			if err != nil {
				return nil, a.fail(ctx, "reading the last hour", err)
			}
			return answer(act), nil
		})
	huma.Register(a.api, jobOp(http.MethodPost, "/routes/{route}/retry", "retry-route", ops.ActionRetry,
		"Attempt now every retrying delivery of a route, paced, as a job", http.StatusNotFound),
		func(ctx context.Context, in *struct {
			RouteInput
			IdempotencyInput
			Body RetryRouteBody
		}) (*jobAnswer, error) {
			req := ops.RetryRequest{Route: in.Route, State: string(webhook.StateRetrying), DryRun: in.Body.DryRun}
			if err := a.svc.CheckRoute(ctx, in.Route); err != nil {
				return nil, a.fail(ctx, "retry", err)
			}
			request := map[string]any{"route": in.Route, "dry_run": in.Body.DryRun}
			if in.Body.Where != "" || in.Body.Since != "" || in.Body.Until != "" {
				q, err := ops.FilterFields{Where: in.Body.Where, Since: in.Body.Since, Until: in.Body.Until}.Parse()
				if err == nil && q.Search == nil {
					err = ops.Invalid("where: a retry by query takes where (since and until narrow it)")
				}
				if err != nil {
					return nil, a.fail(ctx, "retry", err)
				}
				req.Query = q
				request["where"], request["since"], request["until"] = in.Body.Where, in.Body.Since, in.Body.Until
			}
			return a.start(ctx, "retry", in.IdempotencyKey, request, func(ctx context.Context, progress func(any)) (any, error) {
				req.ProgressFunc = func(p ops.RetryProgress) { progress(p) }
				return a.svc.Retry(ctx, req)
			})
		})
	huma.Register(a.api, op(http.MethodGet, "/routes/{route}/versions", "get-version", ops.ActionRead,
		"Show the newest version of a resource delivered on a route (ordering drop_stale)", http.StatusNotFound),
		func(ctx context.Context, in *VersionInput) (*body[*ops.Version], error) {
			v, err := a.svc.ResourceVersion(ctx, ops.VersionRequest{Route: in.Route, Source: in.Source, Resource: in.Resource})
			if err != nil {
				return nil, a.fail(ctx, "reading a version", err)
			}
			return answer(v), nil
		})
	huma.Register(a.api, op(http.MethodDelete, "/routes/{route}/versions", "reset-version", ops.ActionVersionReset,
		"Forget the version of a resource on a route: its next event is delivered whatever its version", http.StatusNotFound),
		func(ctx context.Context, in *VersionInput) (*body[*ops.Version], error) {
			v, err := a.svc.ResourceVersionReset(ctx, ops.VersionRequest{Route: in.Route, Source: in.Source, Resource: in.Resource})
			if err != nil {
				return nil, a.fail(ctx, "resetting a version", err)
			}
			return answer(v), nil
		})
}

// RetryRouteBody is the body of retry-route.
type RetryRouteBody struct {
	DryRun bool   `json:"dry_run,omitempty" doc:"Count and list what would be retried; change nothing."`
	Where  string `json:"where,omitempty" maxLength:"16384" doc:"Only the retrying pairs of the events this expression takes (as the events listing's where; at most 1000 events)."`
	Since  string `json:"since,omitempty" doc:"With where: events received at or after (RFC 3339, or an age); the last 24 hours when absent."`
	Until  string `json:"until,omitempty" doc:"With where: events received before."`
}

// VersionInput names a resource of a source on a route.
type VersionInput struct {
	RouteInput
	Source   string `query:"source" required:"true" minLength:"1" doc:"The source whose resource it is."`
	Resource string `query:"resource" required:"true" minLength:"1" doc:"The resource as its events carry it (gid://shopify/Order/1)."`
}

// EventsInput filters the events listing: the filter's one typed shape
// (ops.FilterFields) and the listing's page.
type EventsInput struct {
	ops.FilterFields
	Limit  int    `query:"limit" minimum:"1" maximum:"1000" default:"100" doc:"The most events on a page."`
	Cursor string `query:"cursor" doc:"The next_cursor of the page before."`
	Key    string `query:"key" maxLength:"500" doc:"Only events with this sender's id (their idempotency key, evt_1Q…), of any source (or of source)."`
}

func (a *server) events() {
	huma.Register(a.api, op(http.MethodGet, "/events", "list-events", ops.ActionRead,
		"List events newest first, each with its deliveries' states"),
		func(ctx context.Context, in *EventsInput) (*body[EventListing], error) {
			f, err := ops.ListFilter(in.FilterFields, in.Limit, in.Cursor, in.Key)
			if err != nil {
				return nil, a.fail(ctx, "listing events", err)
			}
			list, err := a.svc.EventList(ctx, f)
			if err != nil {
				return nil, a.fail(ctx, "listing events", err)
			}
			return answer(EventListing{Listing: Listing[ops.EventSummary]{Total: list.Total, Items: list.Items, NextCursor: list.NextCursor},
				Search: list.Search}), nil
		})
	huma.Register(a.api, op(http.MethodGet, "/events/{id}", "get-event", ops.ActionRead,
		"Show one event with its body, every delivery and every attempt", http.StatusNotFound),
		func(ctx context.Context, in *EventInput) (*body[*ops.EventDetail], error) {
			ev, err := a.svc.EventShow(ctx, in.ID)
			if err != nil {
				return nil, a.fail(ctx, "reading an event", err)
			}
			return answer(ev), nil
		})
	huma.Register(a.api, jobOp(http.MethodPost, "/events/{id}/retry", "retry-event", ops.ActionRetry,
		"Attempt an event's retrying deliveries now (to one route or all), as a job", http.StatusNotFound),
		func(ctx context.Context, in *struct {
			EventInput
			IdempotencyInput
			Body RetryEventBody
		}) (*jobAnswer, error) {
			req := ops.RetryRequest{EventID: in.ID, Route: in.Body.Route, DryRun: in.Body.DryRun}
			if err := a.svc.CheckRoute(ctx, in.Body.Route); err != nil {
				return nil, a.fail(ctx, "retry", err)
			}
			if _, err := a.svc.EventShow(ctx, in.ID); err != nil { // an unknown event is a 404, not a failed job
				return nil, a.fail(ctx, "retry", err)
			}
			return a.start(ctx, "retry", in.IdempotencyKey, map[string]any{"event_id": in.ID, "route": in.Body.Route, "dry_run": in.Body.DryRun},
				func(ctx context.Context, _ func(any)) (any, error) { return a.svc.Retry(ctx, req) })
		})
	huma.Register(a.api, jobOp(http.MethodPost, "/replay", "replay", ops.ActionReplay,
		"Deliver events again as a new attempt series, paced so live events keep flowing, as a job", http.StatusNotFound),
		func(ctx context.Context, in *struct {
			IdempotencyInput
			Body ReplayBody
		}) (*jobAnswer, error) {
			req, err := in.Body.request()
			if err != nil {
				return nil, a.fail(ctx, "replay", err)
			}
			if err := a.svc.CheckRoute(ctx, req.Filter.Route); err != nil {
				return nil, a.fail(ctx, "replay", err)
			}
			if req.EventID != uuid.Nil {
				if _, err := a.svc.EventShow(ctx, req.EventID); err != nil { // an unknown event is a 404, not a failed job
					return nil, a.fail(ctx, "replay", err)
				}
			}
			return a.start(ctx, "replay", in.IdempotencyKey, in.Body, func(ctx context.Context, progress func(any)) (any, error) {
				req.ProgressFunc = func(p ops.ReplayProgress) { progress(p) }
				return a.svc.Replay(ctx, req)
			})
		})
}

// EventInput names an event.
type EventInput struct {
	ID uuid.UUID `path:"id" doc:"The event's id."`
}

// RetryEventBody is the body of retry-event.
type RetryEventBody struct {
	Route  string `json:"route,omitempty" doc:"Only the delivery to this route; all the event's routes when absent."`
	DryRun bool   `json:"dry_run,omitempty" doc:"List what would be retried; change nothing."`
}

// ReplayBody selects what to replay: one event, or a filter.
type ReplayBody struct {
	EventID          string        `json:"event_id,omitempty" format:"uuid" doc:"Replay this event (to filter.route only when set)."`
	Filter           ReplayFilter  `json:"filter,omitempty" doc:"Replay the events it selects, oldest first. Without event_id it needs at least one field."`
	IncludeDelivered bool          `json:"include_delivered,omitempty" doc:"Replay delivered pairs too."`
	IncludeStale     bool          `json:"include_stale,omitempty" doc:"Replay stale pairs too, without the stale check."`
	IgnoreFilter     bool          `json:"ignore_filter,omitempty" doc:"Replay an event to a route with a filter even where the filter does not take it now (without: an event with no pair on a filtered route goes there only when the filter takes it; a pair that exists is replayed whatever the filter says)."`
	DryRun           bool          `json:"dry_run,omitempty" doc:"Report what would be replayed; change nothing."`
	ListLimit        int           `json:"list_limit,omitempty" minimum:"0" maximum:"1000" doc:"How many pairs the report lists of each kind (default 100); the counts cover all."`
	Pacing           *ReplayPacing `json:"pacing,omitempty" doc:"How a large replay is paced; the defaults suit most."`
}

// ReplayFilter is a replay's selection in a body: ops.ReplayFilter, named
// so here for the schema the document has always called it by.
type ReplayFilter = ops.ReplayFilter

// ReplayPacing tunes a replay's batches.
type ReplayPacing struct {
	MaxBatch     int    `json:"max_batch,omitempty" minimum:"0" maximum:"5000" doc:"The most pairs per batch."`
	StallTimeout string `json:"stall_timeout,omitempty" doc:"End the replay when a batch makes no progress this long (30s, 2m)."`
}

func (b ReplayBody) request() (ops.ReplayRequest, error) {
	f, err := b.Filter.Parse()
	if err != nil {
		return ops.ReplayRequest{}, err
	}
	req := ops.ReplayRequest{Filter: f, IncludeDelivered: b.IncludeDelivered, IncludeStale: b.IncludeStale, IgnoreFilter: b.IgnoreFilter,
		DryRun: b.DryRun, ListLimit: b.ListLimit}
	if b.EventID != "" {
		if req.EventID, err = uuid.Parse(b.EventID); err != nil {
			return req, ops.Invalid("event_id: not a uuid")
		}
	} else if f == (ops.EventFilter{}) {
		return req, ops.Invalid("refusing to replay everything: give event_id or a filter")
	}
	if p := b.Pacing; p != nil {
		req.MaxBatch = p.MaxBatch
		if p.StallTimeout != "" {
			if req.StallTimeout, err = config.ParseDuration(p.StallTimeout); err != nil || req.StallTimeout <= 0 {
				return req, ops.Invalid("pacing.stall_timeout: want a positive duration with a unit (30s, 2m)")
			}
		}
	}
	return req, nil
}

// DeadListInput reads a route's dead letters.
type DeadListInput struct {
	RouteInput
	State string `query:"state" enum:"pending,retrying,delivered,dead,stale,missing" doc:"Only letters whose pair is in this state."`
	Limit int    `query:"limit" minimum:"1" maximum:"1000" default:"100" doc:"The most letters to show."`
}

func (a *server) deadLetters() {
	huma.Register(a.api, op(http.MethodGet, "/routes/{route}/dead-letters", "list-dead-letters", ops.ActionRead,
		"Read a route's dead letters without consuming them, each with its pair's state in Postgres", http.StatusNotFound),
		func(ctx context.Context, in *DeadListInput) (*body[Listing[ops.DeadLetter]], error) {
			list, err := a.svc.DeadList(ctx, ops.DeadListRequest{Route: in.Route, State: in.State, Limit: in.Limit})
			if err != nil {
				return nil, a.fail(ctx, "reading dead letters", err)
			}
			// A queue is read from its head: there is no later page to
			// point at, only how many the queue holds.
			return answer(Listing[ops.DeadLetter]{Total: int64(list.Total), Items: list.Items}), nil
		})
	huma.Register(a.api, jobOp(http.MethodPost, "/routes/{route}/dead-letters/requeue", "requeue-dead-letters", ops.ActionDeadRequeue,
		"Move a route's dead letters back to its queue as fresh attempt series, as a job; a deleted route's answer 409 (it has no queue)",
		http.StatusNotFound, http.StatusConflict),
		func(ctx context.Context, in *struct {
			RouteInput
			IdempotencyInput
			Body RequeueBody
		}) (*jobAnswer, error) {
			if err := a.svc.CheckDeadLetterRoute(ctx, in.Route); err != nil {
				return nil, a.fail(ctx, "requeue", err)
			}
			if in.Body.Where != "" || in.Body.Since != "" || in.Body.Until != "" {
				f, err := ops.FilterFields{Where: in.Body.Where, Since: in.Body.Since, Until: in.Body.Until}.Parse()
				if err == nil && (f.Search == nil || in.Body.Limit != 0) {
					err = ops.Invalid("where: a requeue by query takes where (since and until narrow it), and no limit")
				}
				if err != nil {
					return nil, a.fail(ctx, "requeue", err)
				}
				return a.start(ctx, "requeue", in.IdempotencyKey, map[string]any{"route": in.Route, "where": in.Body.Where, "since": in.Body.Since, "until": in.Body.Until},
					func(ctx context.Context, progress func(any)) (any, error) {
						moved, found, err := a.svc.DeadRequeueWhere(ctx, in.Route, f, func(moved, read int) {
							progress(RequeueProgress{Moved: moved, Total: read})
						})
						return RequeueResult{Route: in.Route, Moved: moved, Found: &found}, err
					})
			}
			return a.start(ctx, "requeue", in.IdempotencyKey, map[string]any{"route": in.Route, "limit": in.Body.Limit},
				func(ctx context.Context, progress func(any)) (any, error) {
					moved, err := a.svc.DeadRequeue(ctx, in.Route, in.Body.Limit, func(moved, total int) {
						progress(RequeueProgress{Moved: moved, Total: total})
					})
					return RequeueResult{Route: in.Route, Moved: moved}, err
				})
		})
	huma.Register(a.api, op(http.MethodPost, "/routes/{route}/dead-letters/drop-delivered", "drop-delivered-dead-letters", ops.ActionDeadDrop,
		"Remove a route's dead letters whose pair was delivered since (a replay, a requeue); the rest stay", http.StatusNotFound),
		func(ctx context.Context, in *struct {
			RouteInput
			Body DropBody
		}) (*body[*ops.DeadDropResult], error) {
			res, err := a.svc.DeadDropDelivered(ctx, in.Route, in.Body.DryRun)
			if err != nil {
				return nil, a.fail(ctx, "dropping dead letters", err)
			}
			return answer(res), nil
		})
	huma.Register(a.api, op(http.MethodPost, "/routes/{route}/dead-letters/drop", "drop-dead-letters", ops.ActionDeadDrop,
		"Remove every dead letter of a deleted route (its queue is gone: they cannot be requeued; their pairs stay dead, their events replayable); "+
			"a route there is answers 409", http.StatusNotFound, http.StatusConflict),
		func(ctx context.Context, in *struct {
			RouteInput
			Body DropBody
		}) (*body[*ops.DeadDropResult], error) {
			res, err := a.svc.DeadDropAll(ctx, in.Route, in.Body.DryRun)
			if err != nil {
				return nil, a.fail(ctx, "dropping dead letters", err)
			}
			return answer(res), nil
		})
}

// RequeueBody is the body of requeue-dead-letters.
type RequeueBody struct {
	Limit int    `json:"limit,omitempty" minimum:"0" doc:"The most letters to move; all there are when 0. Not with where."`
	Where string `json:"where,omitempty" maxLength:"16384" doc:"Only the letters of the dead events this expression takes (as the events listing's where; at most 1000 events): body.data.object.customer == \"cus_Q8x\"."`
	Since string `json:"since,omitempty" doc:"With where: events received at or after (RFC 3339, or an age); the last 24 hours when absent."`
	Until string `json:"until,omitempty" doc:"With where: events received before."`
}

// RequeueProgress is where a requeue stands.
type RequeueProgress struct {
	Moved int `json:"moved"`
	Total int `json:"total"`
}

// RequeueResult is a requeue's report.
type RequeueResult struct {
	Route string `json:"route"`
	Moved int    `json:"moved"`
	// Found is, for a requeue by query, how many dead events it found.
	Found *int `json:"found,omitempty"`
}

// DropBody is the body of drop-delivered-dead-letters.
type DropBody struct {
	DryRun bool `json:"dry_run,omitempty" doc:"Count what would be dropped; drop nothing."`
}

// jobAnswer is the answer of an action that runs as a job: 202 and where
// to poll it.
type jobAnswer struct {
	Location string `header:"Location" doc:"Where to poll the job."`
	Body     *ops.Job
}

// start runs an action as a job for the caller in ctx and answers 202
// with it (the earlier job when the idempotency key was used before).
func (a *server) start(ctx context.Context, kind, key string, request any, run func(ctx context.Context, progress func(any)) (any, error)) (*jobAnswer, error) {
	job, _, err := a.svc.StartJob(ctx, kind, key, request, run)
	if err != nil {
		return nil, a.fail(ctx, "starting a "+kind+" job", err)
	}
	return &jobAnswer{Location: Prefix + "/jobs/" + job.ID.String(), Body: job}, nil
}

// JobInput names a job.
type JobInput struct {
	ID uuid.UUID `path:"id" doc:"The job's id."`
}

// JobsInput pages the jobs.
type JobsInput struct {
	Limit  int    `query:"limit" minimum:"1" maximum:"1000" default:"100"`
	Cursor string `query:"cursor" doc:"The next_cursor of the page before."`
}

func (a *server) jobs() {
	huma.Register(a.api, op(http.MethodGet, "/jobs/{id}", "get-job", ops.ActionRead,
		"Show a job: its state (running, succeeded, failed, cancelled), progress, and report once it ended", http.StatusNotFound),
		func(ctx context.Context, in *JobInput) (*body[*ops.Job], error) {
			j, err := a.svc.JobGet(ctx, in.ID)
			if err != nil {
				return nil, a.fail(ctx, "reading a job", err)
			}
			return answer(j), nil
		})
	huma.Register(a.api, op(http.MethodPost, "/jobs/{id}/cancel", "cancel-job", ops.ActionJobCancel,
		"Stop a running job: it stops within 2 seconds and ends cancelled, its progress saying how far it got "+
			"(a replay's after: POST /jobs/{id}/resume runs it again for exactly the rest); 409 for a job that is not running",
		http.StatusNotFound, http.StatusConflict),
		func(ctx context.Context, in *JobInput) (*body[*ops.Job], error) {
			j, err := a.svc.JobCancel(ctx, in.ID)
			if err != nil {
				return nil, a.fail(ctx, "cancelling a job", err)
			}
			return answer(j), nil
		})
	huma.Register(a.api, jobOp(http.MethodPost, "/jobs/{id}/resume", "resume-replay", ops.ActionReplay,
		"Run a replay that was cancelled or stopped (failed, abandoned) again for the rest: its selection, window as it was, "+
			"after the position it reached, as the same replay, so that no pair it sent is sent again; 409 for a job running or succeeded",
		http.StatusNotFound, http.StatusConflict),
		func(ctx context.Context, in *struct {
			JobInput
			IdempotencyInput
		}) (*jobAnswer, error) {
			req, err := a.svc.ReplayResumeOf(ctx, in.ID)
			if err != nil {
				return nil, a.fail(ctx, "resuming a replay", err)
			}
			return a.start(ctx, "replay", in.IdempotencyKey, map[string]any{"resume": in.ID}, func(ctx context.Context, progress func(any)) (any, error) {
				req.ProgressFunc = func(p ops.ReplayProgress) { progress(p) }
				return a.svc.Replay(ctx, req)
			})
		})
	huma.Register(a.api, op(http.MethodGet, "/jobs", "list-jobs", ops.ActionRead, "List jobs, newest first"),
		func(ctx context.Context, in *JobsInput) (*body[Listing[ops.Job]], error) {
			var before uuid.UUID
			if in.Cursor != "" {
				var err error
				if before, err = uuid.Parse(in.Cursor); err != nil {
					return nil, a.fail(ctx, "listing jobs", ops.Invalid("cursor: not one this listing gave"))
				}
			}
			list, total, err := a.svc.JobList(ctx, before, in.Limit+1) // one more says whether a next page exists
			if err != nil {
				return nil, a.fail(ctx, "listing jobs", err)
			}
			out := Listing[ops.Job]{Total: total, Items: list}
			if len(list) > in.Limit {
				out.Items = list[:in.Limit]
				out.NextCursor = out.Items[in.Limit-1].ID.String()
			}
			return answer(out), nil
		})
}

// PurgeBody says what to purge.
type PurgeBody struct {
	OlderThan   string `json:"older_than" minLength:"1" doc:"Purge what is older than this (30d, 720h)."`
	IncludeDead bool   `json:"include_dead,omitempty" doc:"Purge events with dead deliveries too."`
	DryRun      bool   `json:"dry_run,omitempty" doc:"Count what would be purged; change nothing."`
	Confirm     bool   `json:"confirm,omitempty" doc:"Required to purge (not for a dry run): a purge cannot be undone."`
}

// TokenBody asks for a token.
type TokenBody struct {
	Name      string `json:"name" minLength:"1" maxLength:"63" doc:"The token's name: a-z 0-9 . _ -"`
	Role      string `json:"role" enum:"viewer,operator,admin"`
	ExpiresIn string `json:"expires_in,omitempty" doc:"End the token this long after now (90d); never when absent."`
	Team      string `json:"team,omitempty" maxLength:"63" doc:"The team the token acts for; the caller's own when absent. Only the platform team's tokens name another team."`
}

// TokenInput names a token.
type TokenInput struct {
	Name string `path:"name" maxLength:"127" doc:"The token's name, of the caller's team; the platform names another team's as TEAM:NAME, or by its name alone when one team only has a live token so named."`
}

// AuditInput filters the audit log.
type AuditInput struct {
	Actor  string `query:"actor" doc:"Only this actor: token:NAME, cli:USER, config:admin.token."`
	Action string `query:"action" doc:"Only this action."`
	Target string `query:"target" doc:"Only this target (a route, a token)."`
	Since  string `query:"since" doc:"At or after: RFC 3339, or an age (2h, 3d)."`
	Until  string `query:"until" doc:"Before: RFC 3339, or an age."`
	Limit  int    `query:"limit" minimum:"1" maximum:"1000" default:"100"`
	Cursor string `query:"cursor" doc:"The next_cursor of the page before."`
}

func (a *server) admin() {
	huma.Register(a.api, jobOp(http.MethodPost, "/purge", "purge", ops.ActionPurge,
		"Delete old delivered events (keeping dedupe keys for the window and anything undelivered), as a job"),
		func(ctx context.Context, in *struct {
			IdempotencyInput
			Body PurgeBody
		}) (*jobAnswer, error) {
			// Refused before the job starts: a team's token purges nothing.
			if err := ops.PurgeAllowed(ctx); err != nil {
				return nil, a.fail(ctx, "purge", err)
			}
			d, err := config.ParseDuration(in.Body.OlderThan)
			if err != nil || d <= 0 {
				return nil, a.fail(ctx, "purge", ops.Invalid("older_than: want a positive duration with a unit (30d, 720h)"))
			}
			if !in.Body.DryRun && !in.Body.Confirm {
				return nil, apiError(http.StatusBadRequest, "confirm_required", "a purge cannot be undone: run it with dry_run first, then with confirm: true")
			}
			req := ops.PurgeRequest{OlderThan: d, IncludeDead: in.Body.IncludeDead, DryRun: in.Body.DryRun}
			return a.start(ctx, "purge", in.IdempotencyKey, in.Body, func(ctx context.Context, progress func(any)) (any, error) {
				req.ProgressFunc = func(r ops.PurgeResult) { progress(r) }
				return a.svc.Purge(ctx, req)
			})
		})
	huma.Register(a.api, op(http.MethodGet, "/tokens", "list-tokens", ops.ActionTokenList, "List the named tokens; never their secrets"),
		func(ctx context.Context, _ *struct{}) (*body[Listing[ops.Token]], error) {
			list, err := a.svc.TokenList(ctx)
			if err != nil {
				return nil, a.fail(ctx, "listing tokens", err)
			}
			return answer(Listing[ops.Token]{Total: int64(len(list)), Items: list}), nil
		})
	create := op(http.MethodPost, "/tokens", "create-token", ops.ActionTokenCreate, "Create a named token; its secret is in this answer only", http.StatusConflict)
	create.DefaultStatus = http.StatusCreated
	huma.Register(a.api, create, func(ctx context.Context, in *struct{ Body TokenBody }) (*body[*ops.NewToken], error) {
		req := ops.TokenRequest{Name: in.Body.Name, Role: in.Body.Role, Team: in.Body.Team}
		if in.Body.ExpiresIn != "" {
			d, err := config.ParseDuration(in.Body.ExpiresIn)
			if err != nil || d <= 0 {
				return nil, a.fail(ctx, "creating a token", ops.Invalid("expires_in: want a positive duration with a unit (90d)"))
			}
			req.ExpiresIn = d
		}
		t, err := a.svc.TokenCreate(ctx, req)
		if err != nil {
			return nil, a.fail(ctx, "creating a token", err)
		}
		return answer(t), nil
	})
	huma.Register(a.api, op(http.MethodDelete, "/tokens/{name}", "revoke-token", ops.ActionTokenRevoke,
		"Revoke a token: the next request carrying it is refused", http.StatusNotFound),
		func(ctx context.Context, in *TokenInput) (*struct{}, error) {
			if err := a.svc.TokenRevoke(ctx, in.Name); err != nil {
				return nil, a.fail(ctx, "revoking a token", err)
			}
			return nil, nil
		})
	huma.Register(a.api, op(http.MethodGet, "/audit", "list-audit", ops.ActionRead,
		"List the audit log, newest first: who changed what, when, with which arguments and result"),
		func(ctx context.Context, in *AuditInput) (*body[Listing[ops.AuditEntry]], error) {
			ff := ops.AuditFilterFlags{Actor: in.Actor, Action: in.Action, Target: in.Target, Since: in.Since, Until: in.Until, Limit: in.Limit}
			if in.Cursor != "" {
				n, err := strconv.ParseInt(in.Cursor, 10, 64)
				if err != nil || n <= 0 {
					return nil, a.fail(ctx, "listing the audit log", ops.Invalid("cursor: not one this listing gave"))
				}
				ff.Before = n
			}
			f, err := ff.Filter()
			if err != nil {
				return nil, a.fail(ctx, "listing the audit log", err)
			}
			f.Limit++ // one more says whether a next page exists
			rows, total, err := a.svc.AuditList(ctx, f)
			if err != nil {
				return nil, a.fail(ctx, "listing the audit log", err)
			}
			out := Listing[ops.AuditEntry]{Total: total, Items: rows}
			if len(rows) > in.Limit {
				out.Items = rows[:in.Limit]
				out.NextCursor = strconv.FormatInt(out.Items[in.Limit-1].ID, 10)
			}
			return answer(out), nil
		})
}
