package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/webhook"
)

func (c *console) deadLetters(w http.ResponseWriter, r *http.Request, u user) {
	route := r.PathValue("route")
	list, err := c.svc.DeadList(r.Context(), ops.DeadListRequest{Route: route, State: r.URL.Query().Get("state"), Limit: 100})
	if err != nil {
		c.failed(w, r, "reading dead letters", err)
		return
	}
	c.render(w, r, "dead", u, map[string]any{"Route": route, "List": list})
}

// startJob runs an action as a job for the signed-in user and shows its
// page, where it can be followed.
func (c *console) startJob(w http.ResponseWriter, r *http.Request, kind string, request any, run func(ctx context.Context, progress func(any)) (any, error)) {
	job, _, err := c.svc.StartJob(r.Context(), kind, "", request, run)
	if err != nil {
		c.failed(w, r, "starting a "+kind, err)
		return
	}
	http.Redirect(w, r, "/jobs/"+job.ID.String(), http.StatusSeeOther)
}

// requeue moves dead letters back to their route as a job: the ones
// chosen (event fields), or all of them (none chosen, all=1).
func (c *console) requeue(w http.ResponseWriter, r *http.Request, _ user) {
	route := r.PathValue("route")
	if err := c.svc.CheckDeadLetterRoute(r.Context(), route); err != nil {
		c.failed(w, r, "requeue", err)
		return
	}
	if err := r.ParseForm(); err != nil {
		http.Error(w, "unreadable form", http.StatusBadRequest)
		return
	}
	if chosen := r.PostForm["event"]; len(chosen) > 0 {
		ids := make([]uuid.UUID, 0, len(chosen))
		seen := map[uuid.UUID]bool{}
		for _, v := range chosen {
			id, err := uuid.Parse(v)
			if err != nil {
				http.Error(w, "not an event id: "+v, http.StatusBadRequest)
				return
			}
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
		if len(ids) > ops.MaxRequeueEvents {
			c.failed(w, r, "requeue", ops.Invalid(fmt.Sprintf("at most %d dead letters at once", ops.MaxRequeueEvents)))
			return
		}
		c.startJob(w, r, "requeue", map[string]any{"route": route, "events": chosen}, func(ctx context.Context, progress func(any)) (any, error) {
			moved, err := c.svc.DeadRequeueEvents(ctx, route, ids, func(moved, read int) {
				progress(map[string]int{"moved": moved, "read": read, "chosen": len(ids)})
			})
			return map[string]any{"route": route, "moved": moved, "chosen": len(ids)}, err
		})
		return
	}
	if r.PostForm.Get("all") == "" {
		c.flash(r, "nothing chosen: tick the dead letters to requeue, or use Requeue all")
		http.Redirect(w, r, "/routes/"+url.PathEscape(route)+"/dead-letters", http.StatusSeeOther)
		return
	}
	c.startJob(w, r, "requeue", map[string]any{"route": route, "limit": 0}, func(ctx context.Context, progress func(any)) (any, error) {
		moved, err := c.svc.DeadRequeue(ctx, route, 0, func(moved, total int) {
			progress(map[string]int{"moved": moved, "total": total})
		})
		return map[string]any{"route": route, "moved": moved}, err
	})
}

func (c *console) dropDelivered(w http.ResponseWriter, r *http.Request, _ user) {
	route := r.PathValue("route")
	res, err := c.svc.DeadDropDelivered(r.Context(), route, false)
	if err != nil {
		c.failed(w, r, "dropping dead letters", err)
		return
	}
	c.flash(r, fmt.Sprintf("%d delivered letter(s) dropped of %d read", res.Dropped, res.Read))
	http.Redirect(w, r, "/routes/"+url.PathEscape(route)+"/dead-letters", http.StatusSeeOther)
}

// dropAll drops every dead letter of a deleted route.
func (c *console) dropAll(w http.ResponseWriter, r *http.Request, _ user) {
	route := r.PathValue("route")
	res, err := c.svc.DeadDropAll(r.Context(), route, false)
	if err != nil {
		c.failed(w, r, "dropping dead letters", err)
		return
	}
	c.flash(r, fmt.Sprintf("%d letter(s) dropped of %d read", res.Dropped, res.Read))
	http.Redirect(w, r, "/routes/"+url.PathEscape(route)+"/dead-letters", http.StatusSeeOther)
}

// replayPage shows the replay form and, asked to preview, what a replay
// of that selection would do: the dry run the confirm button then runs.
func (c *console) replayPage(w http.ResponseWriter, r *http.Request, u user) {
	q := r.URL.Query()
	ff := ops.FilterFieldsFromQuery(q)
	routes, err := c.svc.RouteList(r.Context())
	if err != nil {
		c.failed(w, r, "listing routes", err)
		return
	}
	// The routes the user sees and a dispatcher delivers (and the one
	// asked for, as typed, so the form shows what it previews).
	var names []string
	for _, rt := range routes.Routes {
		if !rt.Unserved {
			names = append(names, rt.Route)
		}
	}
	if ff.Route != "" && !slices.Contains(names, ff.Route) {
		names = append(names, ff.Route)
	}
	data := map[string]any{"Filter": ff, "States": []string{"", string(webhook.StateDead), string(webhook.StateDelivered), string(webhook.StateStale)}, "Routes": names}
	if q.Has("preview") {
		f, err := ff.Parse()
		if err == nil && f == (ops.EventFilter{}) {
			err = ops.Invalid("give a filter: a replay of everything is refused")
		}
		if err != nil {
			c.failed(w, r, "previewing a replay", err)
			return
		}
		// The confirm replays what the preview counted: a default window
		// is pinned to the time it started at now.
		ff = pinWindow(ff, f)
		data["Filter"] = ff
		res, err := c.svc.Replay(r.Context(), ops.ReplayRequest{Filter: f, DryRun: true, ListLimit: 20})
		if err != nil {
			c.failed(w, r, "previewing a replay", err)
			return
		}
		data["Preview"] = res
	}
	c.render(w, r, "replay", u, data)
}

// pinWindow writes a search's default window (the last 24 hours from
// now) into ff as a time, so that a form or a link made of ff selects
// what f selected now, not what a later now would.
func pinWindow(ff ops.FilterFields, f ops.EventFilter) ops.FilterFields {
	if f.Search != nil && f.Search.DefaultWindow {
		ff.Since = f.Since.UTC().Format(time.RFC3339Nano)
	}
	return ff
}

func (c *console) replay(w http.ResponseWriter, r *http.Request, _ user) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, "unreadable form", http.StatusBadRequest)
		return
	}
	ff := ops.FilterFieldsFromQuery(r.PostForm)
	f, err := ff.Parse()
	if err == nil && f == (ops.EventFilter{}) {
		err = ops.Invalid("give a filter: a replay of everything is refused")
	}
	if err == nil {
		err = c.svc.CheckRoute(r.Context(), f.Route)
	}
	if err != nil {
		c.failed(w, r, "replay", err)
		return
	}
	c.startJob(w, r, "replay", map[string]any{"filter": ff}, func(ctx context.Context, progress func(any)) (any, error) {
		return c.svc.Replay(ctx, ops.ReplayRequest{Filter: f, ProgressFunc: func(p ops.ReplayProgress) { progress(p) }})
	})
}

// jobCancel stops a running job (it ends cancelled, its progress saying
// how far it got) and shows it.
func (c *console) jobCancel(w http.ResponseWriter, r *http.Request, _ user) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		http.Error(w, "not a job id", http.StatusBadRequest)
		return
	}
	if _, err := c.svc.JobCancel(r.Context(), id); err != nil {
		c.failed(w, r, "cancelling a job", err)
		return
	}
	c.flash(r, "Cancel asked: the job stops within 2 seconds")
	http.Redirect(w, r, "/jobs/"+id.String(), http.StatusSeeOther)
}

// jobResume runs a cancelled or stopped replay again for the rest, as a
// new job of the same replay (ops.ReplayResumeOf).
func (c *console) jobResume(w http.ResponseWriter, r *http.Request, _ user) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		http.Error(w, "not a job id", http.StatusBadRequest)
		return
	}
	req, err := c.svc.ReplayResumeOf(r.Context(), id)
	if err != nil {
		c.failed(w, r, "resuming a replay", err)
		return
	}
	c.startJob(w, r, "replay", map[string]any{"resume": id}, func(ctx context.Context, progress func(any)) (any, error) {
		req.ProgressFunc = func(p ops.ReplayProgress) { progress(p) }
		return c.svc.Replay(ctx, req)
	})
}

func (c *console) job(w http.ResponseWriter, r *http.Request, u user) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		http.Error(w, "not a job id", http.StatusBadRequest)
		return
	}
	j, err := c.svc.JobGet(r.Context(), id)
	if err != nil {
		c.failed(w, r, "reading a job", err)
		return
	}
	data := map[string]any{"Job": j, "Progress": jsonMap(j.Progress), "Result": jsonMap(j.Result)}
	if j.Kind == "replay" && (j.State == store.JobCancelled || j.State == store.JobFailed) {
		var p ops.ReplayProgress
		data["Resumable"] = json.Unmarshal(j.Progress, &p) == nil && p.Resume != nil
	}
	c.render(w, r, "job", u, data)
}

// jsonMap reads a JSON object's top-level numbers and strings for a
// page; nested values are left out.
func jsonMap(raw []byte) map[string]string {
	var m map[string]any
	if len(raw) == 0 || json.Unmarshal(raw, &m) != nil {
		return nil
	}
	out := map[string]string{}
	for k, v := range m {
		switch v.(type) {
		case float64, string, bool:
			out[k] = fmt.Sprint(v)
		}
	}
	return out
}

func (c *console) audit(w http.ResponseWriter, r *http.Request, u user) {
	q := r.URL.Query()
	f, err := ops.AuditFilterFlags{Actor: q.Get("actor"), Action: q.Get("action"), Target: q.Get("target"), Since: q.Get("since"), Limit: 100}.Filter()
	if err != nil {
		c.failed(w, r, "reading the audit log", err)
		return
	}
	rows, total, err := c.svc.AuditList(r.Context(), f)
	if err != nil {
		c.failed(w, r, "reading the audit log", err)
		return
	}
	c.render(w, r, "audit", u, map[string]any{"Rows": rows, "Total": total, "Filter": q, "Actions": ops.AuditActions})
}
