package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/ops"
)

// pageNames are the templates under templates/, each with layout.html.
var pageNames = []string{"signin", "overview", "events", "event", "dead", "replay", "job", "audit"}

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
				return "-"
			}
			return fmt.Sprint(*p)
		},
		"derefs": func(p *string) string {
			if p == nil {
				return ""
			}
			return *p
		},
		"seconds": func(p *float64) string {
			if p == nil {
				return "-"
			}
			return (time.Duration(*p * float64(time.Second))).Round(time.Second).String()
		},
		"ms":       func(n int) string { return (time.Duration(n) * time.Millisecond).String() },
		"operator": func() string { return ops.RoleOperator },
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
		http.Error(w, err.Error(), http.StatusNotFound)
	case errors.Is(err, ops.ErrInvalidRequest):
		http.Error(w, err.Error(), http.StatusBadRequest)
	default:
		c.logger.Error().Err(err).Str("actor", ops.ActorOf(r.Context())).Msg("console: " + what)
		http.Error(w, what+" failed: storage unavailable (the receiver's log says why)", http.StatusServiceUnavailable)
	}
}

func (c *console) overview(w http.ResponseWriter, r *http.Request, u user) {
	routes, err := c.svc.RouteList(r.Context())
	if err != nil {
		c.failed(w, r, "listing routes", err)
		return
	}
	c.render(w, r, "overview", u, map[string]any{"Routes": routes})
}

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
	ff := ops.FilterFields{Source: q.Get("source"), EventType: q.Get("event_type"), State: q.Get("state"), Route: q.Get("route"),
		Since: q.Get("since"), Until: q.Get("until"), Cursor: q.Get("cursor"), Limit: 50}
	f, err := ops.FilterFromFields(ff)
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
	c.render(w, r, "events", u, map[string]any{"Filter": ff, "List": list, "Next": next,
		"States": eventStates})
}

// eventStates are the events page's state choices ("" is any).
var eventStates = []string{"", "pending", "retrying", "delivered", "dead", "stale"}

// maxBody is how much of an event's body the event page shows.
const maxBody = 64 << 10

func (c *console) event(w http.ResponseWriter, r *http.Request, u user) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		http.Error(w, "not an event id", http.StatusBadRequest)
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
	c.render(w, r, "event", u, map[string]any{"Event": ev, "Body": body, "Truncated": truncated})
}

func (c *console) retry(w http.ResponseWriter, r *http.Request, _ user) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		http.Error(w, "not an event id", http.StatusBadRequest)
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

func (c *console) pause(paused bool) func(w http.ResponseWriter, r *http.Request, u user) {
	return func(w http.ResponseWriter, r *http.Request, _ user) {
		res, err := c.svc.RoutePause(r.Context(), r.PathValue("route"), paused)
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
		http.Redirect(w, r, "/", http.StatusSeeOther)
	}
}
