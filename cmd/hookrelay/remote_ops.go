package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/apiclient"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ops"
)

// The operator commands over the admin API. Each answer is read into the
// ops type the direct mode returns (the API answers with those shapes),
// so both modes print alike; the requests are the generated client's.

func (r *remote) routeList(ctx context.Context) (*ops.RouteList, error) {
	var l struct {
		listing[ops.RouteSummary]
		BrokerError string `json:"broker_error"`
	}
	if err := into(&l)(r.api.ListRoutes(ctx)); err != nil {
		return nil, err
	}
	return &ops.RouteList{Routes: l.Items, BrokerError: l.BrokerError}, nil
}

func (r *remote) routePause(ctx context.Context, route string, pause bool, reason string) (*ops.RoutePauseResult, error) {
	var res ops.RoutePauseResult
	if pause {
		return &res, into(&res)(r.api.PauseRoute(ctx, route, apiclient.PauseRouteBody{Reason: opt(reason)}))
	}
	return &res, into(&res)(r.api.ResumeRoute(ctx, route))
}

func (r *remote) eventList(ctx context.Context, f filter) (*ops.EventList, error) {
	p := &apiclient.ListEventsParams{
		Source: opt(f.Source), EventType: opt(f.EventType), Route: opt(f.Route), Since: opt(f.Since), Until: opt(f.Until),
		Where: opt(f.Where), Key: opt(f.key), Limit: opt(int64(f.limit)),
	}
	if f.State != "" {
		st := apiclient.ListEventsParamsState(f.State)
		p.State = &st
	}
	var l struct {
		listing[ops.EventSummary]
		Search *ops.SearchInfo `json:"search"`
	}
	if err := into(&l)(r.api.ListEvents(ctx, p)); err != nil {
		return nil, err
	}
	return &ops.EventList{Total: l.Total, Shown: len(l.Items), Items: l.Items, NextCursor: l.NextCursor, Search: l.Search}, nil
}

// eventFind is an event by our id or by the sender's (its idempotency
// key, of source when given), as events show takes it.
func (r *remote) eventFind(ctx context.Context, ref, source string) (*ops.EventDetail, error) {
	id, err := uuid.Parse(ref)
	if err != nil {
		var l listing[ops.EventSummary]
		if err := into(&l)(r.api.ListEvents(ctx, &apiclient.ListEventsParams{Key: &ref, Source: opt(source), Limit: opt(int64(2))})); err != nil {
			return nil, err
		}
		switch {
		case len(l.Items) == 0:
			return nil, fmt.Errorf("no event %q (neither our id nor a sender's id that is stored)", ref)
		case len(l.Items) > 1:
			return nil, fmt.Errorf("the sender's id %q is used by more than one source: give --source", ref)
		}
		id = l.Items[0].ID
	}
	var ev ops.EventDetail
	if err := into(&ev)(r.api.GetEvent(ctx, id.String())); err != nil {
		var ae *APIError
		if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
			return nil, fmt.Errorf("no event %s", id)
		}
		return nil, err
	}
	return &ev, nil
}

func (r *remote) auditList(ctx context.Context, f ops.AuditFilterFlags) ([]ops.AuditEntry, int64, error) {
	var l listing[ops.AuditEntry]
	err := into(&l)(r.api.ListAudit(ctx, &apiclient.ListAuditParams{
		Actor: opt(f.Actor), Action: opt(f.Action), Target: opt(f.Target), Since: opt(f.Since), Until: opt(f.Until), Limit: opt(int64(f.Limit)),
	}))
	return l.Items, l.Total, err
}

func (r *remote) tokenList(ctx context.Context) ([]ops.Token, error) {
	var l listing[ops.Token]
	err := into(&l)(r.api.ListTokens(ctx))
	return l.Items, err
}

func (r *remote) tokenCreate(ctx context.Context, name, role, team, expires string) (*ops.NewToken, error) {
	var t ops.NewToken
	err := into(&t)(r.api.CreateToken(ctx, apiclient.TokenBody{Name: name, Role: apiclient.TokenBodyRole(role), Team: opt(team), ExpiresIn: opt(expires)}))
	return &t, err
}

func (r *remote) tokenRevoke(ctx context.Context, name string) error {
	return into(nil)(r.api.RevokeToken(ctx, name))
}

func (r *remote) version(ctx context.Context, req ops.VersionRequest, reset bool) (*ops.Version, error) {
	var v ops.Version
	if reset {
		return &v, into(&v)(r.api.ResetVersion(ctx, req.Route, &apiclient.ResetVersionParams{Source: req.Source, Resource: req.Resource}))
	}
	return &v, into(&v)(r.api.GetVersion(ctx, req.Route, &apiclient.GetVersionParams{Source: req.Source, Resource: req.Resource}))
}

func (r *remote) jobList(ctx context.Context, limit int) ([]ops.Job, int64, error) {
	var l listing[ops.Job]
	err := into(&l)(r.api.ListJobs(ctx, &apiclient.ListJobsParams{Limit: opt(int64(limit))}))
	return l.Items, l.Total, err
}

func (r *remote) job(ctx context.Context, id string) (*ops.Job, error) {
	var j ops.Job
	return &j, into(&j)(r.api.GetJob(ctx, id))
}

func (r *remote) jobCancel(ctx context.Context, id string) (*ops.Job, error) {
	var j ops.Job
	return &j, into(&j)(r.api.CancelJob(ctx, id))
}

// wait polls job until it ends, calling progress with each read, and
// returns it ended. A job that failed or was cancelled is returned with
// an error saying so.
func (r *remote) wait(ctx context.Context, j *ops.Job, progress func(*ops.Job)) (*ops.Job, error) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for j.FinishedAt == nil {
		select {
		case <-ctx.Done():
			return j, fmt.Errorf("stopped waiting for job %s, which goes on (hookrelay jobs show %s; jobs cancel to end it): %w", j.ID, j.ID, ctx.Err())
		case <-tick.C:
		}
		next, err := r.job(ctx, j.ID.String())
		if err != nil {
			return j, err
		}
		j = next
		if progress != nil {
			progress(j)
		}
	}
	if j.State != "succeeded" {
		return j, fmt.Errorf("job %s %s: %s", j.ID, j.State, j.Error)
	}
	return j, nil
}

// idempotencyKey is a fresh key for a job-starting request: a retried
// request (the CLI's own) starts no second job.
func idempotencyKey() *string {
	k := "cli-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-" + uuid.NewString()[:8]
	return &k
}

// runJob starts a job with start (an Idempotency-Key fresh for it), waits
// for its end, calling progress with each progress read, and reads its
// report into a T. A job that failed returns its report so far with the
// error.
func runJob[T any](ctx context.Context, r *remote, start func(key *string) (*http.Response, error), progress func(raw json.RawMessage)) (*T, error) {
	var j ops.Job
	if err := into(&j)(start(idempotencyKey())); err != nil {
		return nil, err
	}
	ended, werr := r.wait(ctx, &j, func(j *ops.Job) {
		if progress != nil && len(j.Progress) > 0 && string(j.Progress) != "null" {
			progress(j.Progress)
		}
	})
	if len(ended.Result) == 0 || string(ended.Result) == "null" {
		return nil, werr
	}
	var out T
	if err := json.Unmarshal(ended.Result, &out); err != nil {
		return nil, errors.Join(werr, fmt.Errorf("job %s: a report this CLI cannot read: %w", ended.ID, err))
	}
	return &out, werr
}

// progressOf decodes a job's progress into a P for fn; one it cannot
// read is skipped (progress is for people: the report is what counts).
func progressOf[P any](fn func(P)) func(json.RawMessage) {
	return func(raw json.RawMessage) {
		var p P
		if json.Unmarshal(raw, &p) == nil {
			fn(p)
		}
	}
}

func (r *remote) deadList(ctx context.Context, req ops.DeadListRequest) (*ops.DeadLetterList, error) {
	p := &apiclient.ListDeadLettersParams{Limit: opt(int64(req.Limit))}
	if req.State != "" {
		st := apiclient.ListDeadLettersParamsState(req.State)
		p.State = &st
	}
	var l ops.DeadLetterList
	return &l, into(&l)(r.api.ListDeadLetters(ctx, req.Route, p))
}

func (r *remote) deadDrop(ctx context.Context, route string, all, dryRun bool) (*ops.DeadDropResult, error) {
	var res ops.DeadDropResult
	if all {
		return &res, into(&res)(r.api.DropDeadLetters(ctx, route, apiclient.DropBody{DryRun: opt(dryRun)}))
	}
	return &res, into(&res)(r.api.DropDeliveredDeadLetters(ctx, route, apiclient.DropBody{DryRun: opt(dryRun)}))
}

// requeueReport is a requeue job's report.
type requeueReport struct {
	Route string `json:"route"`
	Moved int    `json:"moved"`
	Found *int   `json:"found"`
}

func (r *remote) deadRequeue(ctx context.Context, route string, limit int, q ops.FilterFields, progress func(moved, total int)) (*requeueReport, error) {
	body := apiclient.RequeueBody{Limit: opt(int64(limit)), Where: opt(q.Where), Since: opt(q.Since), Until: opt(q.Until)}
	return runJob[requeueReport](ctx, r, func(key *string) (*http.Response, error) {
		return r.api.RequeueDeadLetters(ctx, route, &apiclient.RequeueDeadLettersParams{IdempotencyKey: key}, body)
	}, progressOf(func(p struct{ Moved, Total int }) { progress(p.Moved, p.Total) }))
}

func (r *remote) retry(ctx context.Context, req ops.RetryRequest, q ops.FilterFields) (*ops.RetryResult, error) {
	if req.EventID != uuid.Nil {
		body := apiclient.RetryEventBody{Route: opt(req.Route), DryRun: opt(req.DryRun)}
		return runJob[ops.RetryResult](ctx, r, func(key *string) (*http.Response, error) {
			return r.api.RetryEvent(ctx, req.EventID.String(), &apiclient.RetryEventParams{IdempotencyKey: key}, body)
		}, nil)
	}
	body := apiclient.RetryRouteBody{DryRun: opt(req.DryRun), Where: opt(q.Where), Since: opt(q.Since), Until: opt(q.Until)}
	return runJob[ops.RetryResult](ctx, r, func(key *string) (*http.Response, error) {
		return r.api.RetryRoute(ctx, req.Route, &apiclient.RetryRouteParams{IdempotencyKey: key}, body)
	}, progressOf(func(p ops.RetryProgress) {
		if req.ProgressFunc != nil {
			req.ProgressFunc(p)
		}
	}))
}

func (r *remote) replay(ctx context.Context, req ops.ReplayRequest, f filter) (*ops.ReplayResult, error) {
	body := apiclient.ReplayBody{
		DryRun: opt(req.DryRun), IncludeDelivered: opt(req.IncludeDelivered), IncludeStale: opt(req.IncludeStale), IgnoreFilter: opt(req.IgnoreFilter),
		ListLimit: opt(int64(req.ListLimit)),
		Pacing:    &apiclient.ReplayPacing{MaxBatch: opt(int64(req.MaxBatch)), StallTimeout: opt(config.FormatDuration(req.StallTimeout))},
		Filter: &apiclient.ReplayFilter{Source: opt(f.Source), EventType: opt(f.EventType), Route: opt(f.Route), Since: opt(f.Since), Until: opt(f.Until),
			Where: opt(f.Where), Limit: opt(int64(f.limit))},
	}
	if f.State != "" {
		st := apiclient.ReplayFilterState(f.State)
		body.Filter.State = &st
	}
	if req.EventID != uuid.Nil {
		id := req.EventID
		body.EventId = &id
	}
	return runJob[ops.ReplayResult](ctx, r, func(key *string) (*http.Response, error) {
		return r.api.Replay(ctx, &apiclient.ReplayParams{IdempotencyKey: key}, body)
	}, progressOf(func(p ops.ReplayProgress) {
		if req.ProgressFunc != nil {
			req.ProgressFunc(p)
		}
	}))
}

func (r *remote) purge(ctx context.Context, olderThan string, includeDead, dryRun bool, progress func(ops.PurgeResult)) (*ops.PurgeResult, error) {
	body := apiclient.PurgeBody{OlderThan: olderThan, IncludeDead: opt(includeDead), DryRun: opt(dryRun), Confirm: opt(!dryRun)} // the CLI asked already
	return runJob[ops.PurgeResult](ctx, r, func(key *string) (*http.Response, error) {
		return r.api.Purge(ctx, &apiclient.PurgeParams{IdempotencyKey: key}, body)
	}, progressOf(progress))
}

// jsonBody is v as a request body for an operation's WithBody form: the
// route settings are ops.RouteInput's JSON, which the API reads.
func jsonBody(v any) (io.Reader, error) {
	raw, err := json.Marshal(v)
	return bytes.NewReader(raw), err
}

func (r *remote) routeCreate(ctx context.Context, name string, in ops.RouteInput) (*ops.RouteCreated, error) {
	body, err := jsonBody(struct {
		Name string `json:"name"`
		ops.RouteInput
	}{name, in})
	if err != nil {
		return nil, err
	}
	var res ops.RouteCreated
	return &res, into(&res)(r.api.CreateRouteWithBody(ctx, "application/json", body))
}

func (r *remote) routeUpdate(ctx context.Context, name string, in ops.RouteInput) (*ops.RouteDetail, error) {
	body, err := jsonBody(in)
	if err != nil {
		return nil, err
	}
	var d ops.RouteDetail
	return &d, into(&d)(r.api.UpdateRouteWithBody(ctx, name, "application/json", body))
}

func (r *remote) routeDelete(ctx context.Context, name, disposal string) (*ops.RouteDeleted, error) {
	p := &apiclient.DeleteRouteParams{}
	if disposal != "" {
		d := apiclient.DeleteRouteParamsDisposal(disposal)
		p.Disposal = &d
	}
	var res ops.RouteDeleted
	return &res, into(&res)(r.api.DeleteRoute(ctx, name, p))
}

func (r *remote) routeRotate(ctx context.Context, name string, overlap *time.Duration) (*ops.SecretRotated, error) {
	var body apiclient.RotateSecretBody
	if overlap != nil {
		o := config.FormatDuration(*overlap)
		body.Overlap = &o
	}
	var res ops.SecretRotated
	return &res, into(&res)(r.api.RotateRouteSecret(ctx, name, body))
}

func (r *remote) routeTest(ctx context.Context, in ops.RouteTestInput) (*ops.RouteTestResult, error) {
	body, err := jsonBody(in)
	if err != nil {
		return nil, err
	}
	var res ops.RouteTestResult
	return &res, into(&res)(r.api.TestRouteWithBody(ctx, "application/json", body))
}
