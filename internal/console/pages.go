package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/webhook"
)

// pageNames are the templates under templates/, each with layout.html.
var pageNames = []string{"signin", "overview", "route", "events", "event", "dead", "replay", "job", "audit", "newroute", "secret", "error"}

func parsePages() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"utc": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
		"ago": ago,
		"utcp": func(t *time.Time) string {
			if t == nil {
				return "-"
			}
			return t.UTC().Format("2006-01-02 15:04:05Z")
		},
		"deref": func(p *int) string {
			if p == nil {
				return ops.NoValue
			}
			return fmt.Sprint(*p)
		},
		"status":   ops.StatusText[int],
		"status64": ops.StatusText[int64],
		"derefs": func(p *string) string {
			if p == nil {
				return ""
			}
			return *p
		},
		"seconds": ops.AgeText,
		"ms":      ops.DurationText,
		"join":    strings.Join,
		"chart":   chart,
		"isUUID": func(s string) bool {
			_, err := uuid.Parse(s)
			return err == nil
		},
		"ratio": ratio,
		"perMin": func(n int64) string {
			per := float64(n) / ops.ActivityWindow.Minutes()
			if per < 0.1 {
				return ""
			}
			return fmt.Sprintf(" (%.1f/min)", per)
		},
	}
	out := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(files, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console template %s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

// ago says how long ago t was: "4 min ago".
func ago(t time.Time) string {
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%d s ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%d min ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h ago", int(d.Hours()))
	}
	return fmt.Sprintf("%d days ago", int(d.Hours()/24))
}

// render writes page with data, the signed-in user and any flash message.
func (c *console) render(w http.ResponseWriter, r *http.Request, page string, u user, data map[string]any) {
	data["User"] = u
	data["Page"] = page
	if msg := c.sessions.PopString(r.Context(), sessionFlash); msg != "" {
		data["Flash"] = msg
	}
	var buf bytes.Buffer
	if err := c.pages[page].Execute(&buf, data); err != nil {
		c.logger.Error().Err(err).Str("page", page).Msg("console: rendering")
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = buf.WriteTo(w) // a client gone mid-page has nothing to be told
}

// failed answers an error of the service: what the operator can act on
// as it is, anything else as unavailable storage (the cause to the log).
func (c *console) failed(w http.ResponseWriter, r *http.Request, what string, err error) {
	switch {
	case errors.Is(err, ops.ErrNotFound), errors.Is(err, ops.ErrUnknownRoute):
		c.errorPage(w, r, http.StatusNotFound, err.Error())
	case errors.Is(err, ops.ErrDestinationRefused):
		// A team probing the relay's side is the operator's business too.
		c.logger.Warn().Err(err).Str("actor", ops.ActorOf(r.Context())).Msg("console: a team's route to the relay's own side refused")
		c.errorPage(w, r, http.StatusUnprocessableEntity, err.Error())
	case errors.Is(err, ops.ErrInvalidRequest):
		c.errorPage(w, r, http.StatusBadRequest, err.Error())
	default:
		if status, ok := refusal(err); ok {
			c.errorPage(w, r, status, err.Error())
			return
		}
		c.logger.Error().Err(err).Str("actor", ops.ActorOf(r.Context())).Msg("console: " + what)
		c.errorPage(w, r, http.StatusServiceUnavailable, what+" failed: storage unavailable (the receiver's log says why)")
	}
}

// errorTitles head the error page, by status.
var errorTitles = map[int]string{
	http.StatusBadRequest: "Not accepted", http.StatusForbidden: "Refused", http.StatusNotFound: "Not found",
	http.StatusConflict: "Refused", http.StatusServiceUnavailable: "Unavailable",
}

// errorPage answers status with msg on a page of the console: its frame
// (the signed-in user's navigation), the message, a way on.
func (c *console) errorPage(w http.ResponseWriter, r *http.Request, status int, msg string) {
	u, _, err := c.current(r)
	if err != nil {
		u = user{} // the frame without the navigation: the message still says what went wrong
	}
	title := errorTitles[status]
	if title == "" {
		title = http.StatusText(status)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	c.render(w, r, "error", u, map[string]any{"Title": title, "Message": msg})
}

// notFound answers a path the console does not have.
func (c *console) notFound(w http.ResponseWriter, r *http.Request) {
	c.errorPage(w, r, http.StatusNotFound, "The console has no page at "+r.URL.Path+".")
}

func (c *console) overview(w http.ResponseWriter, r *http.Request, u user) {
	routes, err := c.svc.RouteList(r.Context())
	if err != nil {
		c.failed(w, r, "listing routes", err)
		return
	}
	act, err := c.svc.Activity(r.Context())
	if err != nil {
		c.failed(w, r, "reading the last hour", err)
		return
	}
	// The database answered both questions; how fast says how it is.
	began := time.Now()
	dbErr := c.opts.DB.PingContext(r.Context())
	if dbErr != nil {
		c.logger.Error().Err(dbErr).Msg("console: the overview's Postgres ping")
	}
	data := map[string]any{"Routes": routes, "Activity": act,
		"DBPing": time.Since(began).Round(100 * time.Microsecond), "DBError": dbErr, "Refresh": overviewRefresh}
	// Each reload counts itself in the URL, and stops after an idle
	// timeout's worth: a tab left open does not keep its session alive.
	auto, _ := strconv.Atoi(r.URL.Query().Get("auto"))
	if time.Duration(auto)*overviewRefresh*time.Second < c.sessions.IdleTimeout {
		data["Next"] = "/?auto=" + strconv.Itoa(auto+1)
	}
	c.render(w, r, "overview", u, data)
}

// overviewRefresh is how often, in seconds, the overview reloads itself
// (a meta refresh: no script).
const overviewRefresh = 15

func (c *console) events(w http.ResponseWriter, r *http.Request, u user) {
	q := r.URL.Query()
	// One box finds an event by our id or by the sender's (its
	// idempotency key).
	if find := strings.TrimSpace(q.Get("find")); find != "" {
		if id, err := uuid.Parse(find); err == nil {
			http.Redirect(w, r, "/events/"+id.String(), http.StatusSeeOther)
			return
		}
		list, err := c.svc.EventsByKey(r.Context(), find)
		if err != nil {
			c.failed(w, r, "finding events", err)
			return
		}
		c.render(w, r, "events", u, map[string]any{"Find": find, "List": list, "Filter": ops.FilterFields{},
			"States": eventStates})
		return
	}
	ff := ops.FilterFieldsFromQuery(q)
	f, err := ops.ListFilter(ff, 50, q.Get("cursor"), "")
	if err != nil {
		c.failed(w, r, "listing events", err)
		return
	}
	list, err := c.svc.EventList(r.Context(), f)
	if err != nil {
		c.failed(w, r, "listing events", err)
		return
	}
	next := ""
	if list.NextCursor != "" {
		v := url.Values{}
		for k, vs := range q {
			v[k] = vs
		}
		v.Set("cursor", list.NextCursor)
		next = "/events?" + v.Encode()
	}
	data := map[string]any{"Filter": ff, "List": list, "Next": next, "States": eventStates}
	if f.Search != nil && list.Total > 0 {
		// "Replay these": the replay page's preview of this selection,
		// its window pinned (pinWindow), then its confirm.
		v := url.Values{"preview": {"1"}}
		pinned := pinWindow(ff, f)
		for k, val := range map[string]string{"source": pinned.Source, "event_type": pinned.EventType, "state": pinned.State,
			"route": pinned.Route, "since": pinned.Since, "until": pinned.Until, "where": pinned.Where} {
			if val != "" {
				v.Set(k, val)
			}
		}
		data["ReplayLink"] = "/replay?" + v.Encode()
	}
	c.render(w, r, "events", u, data)
}

// eventStates are the events page's state choices ("" is any).
var eventStates = []string{"", string(webhook.StatePending), string(webhook.StateRetrying), string(webhook.StateDelivered),
	string(webhook.StateDead), string(webhook.StateStale)}

// maxBody is how much of an event's body the event page shows.
const maxBody = 64 << 10

func (c *console) event(w http.ResponseWriter, r *http.Request, u user) {
	id, ok := c.eventID(w, r)
	if !ok {
		return
	}
	ev, err := c.svc.EventShow(r.Context(), id)
	if err != nil {
		c.failed(w, r, "reading an event", err)
		return
	}
	body, truncated := ev.Body, false
	var pretty bytes.Buffer
	if r.URL.Query().Get("raw") == "" && json.Indent(&pretty, []byte(body), "", "  ") == nil {
		body = pretty.String()
	}
	if len(body) > maxBody {
		body, truncated = strings.ToValidUTF8(body[:maxBody], ""), true // not half a character
	}
	traces := map[string][]step{}
	routes := []string{}
	for _, d := range ev.Deliveries {
		traces[d.Route] = trace(ev, d)
		if !d.Unserved {
			routes = append(routes, d.Route)
		}
	}
	c.render(w, r, "event", u, map[string]any{"Event": ev, "Body": body, "Truncated": truncated, "Traces": traces, "Routes": routes})
}

func (c *console) retry(w http.ResponseWriter, r *http.Request, _ user) {
	id, ok := c.eventID(w, r)
	if !ok {
		return
	}
	res, err := c.svc.Retry(r.Context(), ops.RetryRequest{EventID: id, Route: r.PostFormValue("route")})
	if err != nil {
		c.failed(w, r, "retrying", err)
		return
	}
	msg := fmt.Sprintf("%d delivery(ies) attempted now", res.RetriedCount)
	for _, s := range res.Skipped {
		msg += fmt.Sprintf("; %s skipped: %s", s.Route, s.Skipped)
	}
	c.flash(r, msg)
	http.Redirect(w, r, "/events/"+id.String(), http.StatusSeeOther)
}

// eventID reads the path's event id, answering 404 when it is none (no
// event has it).
func (c *console) eventID(w http.ResponseWriter, r *http.Request) (uuid.UUID, bool) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		c.errorPage(w, r, http.StatusNotFound, "not an event id: "+r.PathValue("id"))
		return uuid.Nil, false
	}
	return id, true
}

// replayEvent replays one event to one route or all, now (a handful of
// pairs: no job). Delivered and stale pairs are left alone unless the
// form asks for them (include_delivered), as the CLI leaves them unless
// told; a delivery's own "Replay" asks for its pair whatever its state.
func (c *console) replayEvent(w http.ResponseWriter, r *http.Request, _ user) {
	id, ok := c.eventID(w, r)
	if !ok {
		return
	}
	route := r.PostFormValue("route")
	if err := c.svc.CheckRoute(r.Context(), route); err != nil {
		c.failed(w, r, "replay", err)
		return
	}
	again := r.PostFormValue("include_delivered") != ""
	res, err := c.svc.Replay(r.Context(), ops.ReplayRequest{EventID: id, Filter: ops.EventFilter{Route: route},
		IncludeDelivered: again, IncludeStale: again})
	if err != nil {
		c.failed(w, r, "replay", err)
		return
	}
	msg := fmt.Sprintf("%d pair(s) replayed", res.ReplayedCount)
	for _, s := range res.Skipped {
		msg += fmt.Sprintf("; %s skipped: %s", s.Route, s.Skipped)
	}
	c.flash(r, msg)
	http.Redirect(w, r, "/events/"+id.String(), http.StatusSeeOther)
}

func (c *console) pause(paused bool) func(w http.ResponseWriter, r *http.Request, u user) {
	return func(w http.ResponseWriter, r *http.Request, _ user) {
		res, err := c.svc.RoutePause(r.Context(), r.PathValue("route"), paused, r.PostFormValue("reason"))
		if err != nil {
			c.failed(w, r, "pausing a route", err)
			return
		}
		verb := "resumed"
		if paused {
			verb = "paused"
		}
		if !res.Changed {
			verb = "already " + verb
		}
		c.flash(r, "route "+res.Route+" "+verb)
		back := "/routes/" + url.PathEscape(res.Route)
		if r.PostFormValue("back") == "overview" {
			back = "/"
		}
		http.Redirect(w, r, back, http.StatusSeeOther)
	}
}

// routePage shows one route: its state with the pause's reason, circuit
// and holds, its backlog and last hour, and the resource versions.
func (c *console) routePage(w http.ResponseWriter, r *http.Request, u user) {
	data, ok := c.routeData(w, r)
	if !ok {
		return
	}
	c.render(w, r, "route", u, data)
}

// routeData is what the route page shows; false when it answered the
// request already (an error page).
func (c *console) routeData(w http.ResponseWriter, r *http.Request) (map[string]any, bool) {
	name := r.PathValue("route")
	if err := c.svc.CheckRoute(r.Context(), name); err != nil || name == "" {
		c.failed(w, r, "reading a route", fmt.Errorf("%w: %q", ops.ErrUnknownRoute, name))
		return nil, false
	}
	list, err := c.svc.RouteList(r.Context())
	if err != nil {
		c.failed(w, r, "reading a route", err)
		return nil, false
	}
	var route *ops.RouteSummary
	for i := range list.Routes {
		if list.Routes[i].Route == name {
			route = &list.Routes[i]
		}
	}
	if route == nil {
		c.failed(w, r, "reading a route", fmt.Errorf("%w: %q", ops.ErrUnknownRoute, name))
		return nil, false
	}
	act, err := c.svc.Activity(r.Context())
	if err != nil {
		c.failed(w, r, "reading the last hour", err)
		return nil, false
	}
	var limited bool
	if rc := c.svc.RoutesNow().Get(name); rc != nil {
		limited = rc.RateLimit > 0
	}
	data := map[string]any{"Route": route, "BrokerError": list.BrokerError, "Activity": act.Routes[name], "RateLimited": limited}
	if !route.Unserved {
		d, err := c.svc.RouteGet(r.Context(), name)
		if err != nil {
			c.failed(w, r, "reading a route", err)
			return nil, false
		}
		data["Detail"] = d
	}
	// A version asked for: show it, or say none is kept.
	q := r.URL.Query()
	if src, res := q.Get("source"), q.Get("resource"); src != "" || res != "" {
		data["Source"], data["Resource"] = src, res
		v, err := c.svc.ResourceVersion(r.Context(), ops.VersionRequest{Route: name, Source: src, Resource: res})
		switch {
		case errors.Is(err, ops.ErrNotFound):
			data["NoVersion"] = true
		case err != nil:
			c.failed(w, r, "reading a version", err)
			return nil, false
		default:
			data["Version"] = v
		}
	}
	return data, true
}

func (c *console) versionReset(w http.ResponseWriter, r *http.Request, _ user) {
	name := r.PathValue("route")
	req := ops.VersionRequest{Route: name, Source: r.PostFormValue("source"), Resource: r.PostFormValue("resource")}
	v, err := c.svc.ResourceVersionReset(r.Context(), req)
	switch {
	case errors.Is(err, ops.ErrNotFound):
		c.flash(r, "no version was kept for "+req.Source+" "+req.Resource+": nothing to reset")
	case err != nil:
		c.failed(w, r, "resetting a version", err)
		return
	default:
		c.flash(r, fmt.Sprintf("version %s of %s %s forgotten: the resource's next event is delivered whatever its version", v.Version, v.Source, v.Resource))
	}
	http.Redirect(w, r, "/routes/"+url.PathEscape(name)+"?"+url.Values{"source": {req.Source}, "resource": {req.Resource}}.Encode(), http.StatusSeeOther)
}
