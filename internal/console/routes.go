package console

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ops"
)

// The route forms: make a route at run time, change it, rotate its
// secret, delete it. A secret is shown once, on the page that answers the
// form (never through the session's flash, which Postgres stores).

// newRoutePage is the form that makes a route.
func (c *console) newRoutePage(w http.ResponseWriter, r *http.Request, u user) {
	c.render(w, r, "newroute", u, map[string]any{})
}

// routeInput reads a route form: the fields it sends (an empty one is
// left out: its default, or its value, stays).
func routeInput(r *http.Request) (ops.RouteInput, error) {
	var in ops.RouteInput
	str := func(name string) *string {
		if v := strings.TrimSpace(r.PostFormValue(name)); v != "" {
			return &v
		}
		return nil
	}
	num := func(name string) (*int, error) {
		v := str(name)
		if v == nil {
			return nil, nil
		}
		n, err := strconv.Atoi(*v)
		if err != nil {
			return nil, ops.Invalid(name + ": want a whole number")
		}
		return &n, nil
	}
	in.Team = strings.TrimSpace(r.PostFormValue("team"))
	in.URL, in.Timeout = str("url"), str("timeout")
	in.Kind, in.Exchange, in.RoutingKey = str("kind"), str("exchange"), str("routing_key")
	if b := strings.Fields(strings.ReplaceAll(r.PostFormValue("bindings"), ",", " ")); len(b) > 0 {
		in.Bindings = b
	}
	var err error
	if in.Concurrency, err = num("concurrency"); err != nil {
		return in, err
	}
	if in.MaxAttempts, err = num("max_attempts"); err != nil {
		return in, err
	}
	if v := str("rate_limit"); v != nil {
		f, err := strconv.ParseFloat(*v, 64)
		if err != nil {
			return in, ops.Invalid("rate_limit: want a number")
		}
		in.RateLimit = &f
	}
	// The rules (docs/rules.md): a form that shows them (rules=1) sends
	// all three, so an emptied box removes its rule; the new-route form's
	// empty boxes mean none.
	rule := func(name string) *string {
		if v := strings.TrimSpace(r.PostFormValue(name)); v != "" || r.PostFormValue("rules") == "1" {
			return &v
		}
		return nil
	}
	in.Filter, in.Transform, in.TransformHeaders = rule("filter"), rule("transform"), rule("transform_headers")
	return in, nil
}

// routeTest tries the rules of the route page's form on a stored event and
// shows the route page with what a delivery would send: nothing is saved,
// sent or audited.
func (c *console) routeTest(w http.ResponseWriter, r *http.Request, u user) {
	data, ok := c.routeData(w, r)
	if !ok {
		return
	}
	field := func(name string) *string {
		v := strings.TrimSpace(r.PostFormValue(name))
		return &v
	}
	in := ops.RouteTestInput{EventID: strings.TrimSpace(r.PostFormValue("event_id")), Route: r.PathValue("route"),
		Filter: field("filter"), Transform: field("transform"), TransformHeaders: field("transform_headers")}
	res, err := c.svc.RouteTest(r.Context(), in)
	if err != nil {
		c.failed(w, r, "testing a route's rules", err)
		return
	}
	data["Test"], data["TestInput"] = res, in
	c.render(w, r, "route", u, data)
}

// createRoute makes a route and shows its secret once.
func (c *console) createRoute(w http.ResponseWriter, r *http.Request, u user) {
	in, err := routeInput(r)
	if err != nil {
		c.failed(w, r, "making a route", err)
		return
	}
	name := strings.TrimSpace(r.PostFormValue("name"))
	if name == "" {
		c.failed(w, r, "making a route", ops.Invalid("name: required"))
		return
	}
	res, err := c.svc.RouteCreate(r.Context(), name, in)
	if err != nil {
		c.failed(w, r, "making a route", err)
		return
	}
	c.render(w, r, "secret", u, map[string]any{"Route": res.Route.Name, "Secret": res.Secret, "Fingerprint": res.Route.SecretFingerprint,
		"What": "Route " + res.Route.Name + " made for team " + res.Route.Team + "; every dispatcher delivers it within 2 s."})
}

// updateRoute changes a run-time route's settings.
func (c *console) updateRoute(w http.ResponseWriter, r *http.Request, _ user) {
	in, err := routeInput(r)
	if err != nil {
		c.failed(w, r, "changing a route", err)
		return
	}
	d, err := c.svc.RouteUpdate(r.Context(), r.PathValue("route"), in)
	if err != nil {
		c.failed(w, r, "changing a route", err)
		return
	}
	c.flash(r, fmt.Sprintf("route %s changed (version %d); every dispatcher follows within 2 s", d.Name, d.Version))
	http.Redirect(w, r, "/routes/"+url.PathEscape(d.Name), http.StatusSeeOther)
}

// rotateSecret gives a run-time route a new secret and shows it once.
func (c *console) rotateSecret(w http.ResponseWriter, r *http.Request, u user) {
	var overlap *time.Duration
	if v := strings.TrimSpace(r.PostFormValue("overlap")); v != "" {
		d, err := config.ParseDuration(v)
		if err != nil {
			c.failed(w, r, "rotating a secret", ops.Invalid("overlap: want a duration with a unit (24h), or 0s"))
			return
		}
		overlap = &d
	}
	res, err := c.svc.RouteRotateSecret(r.Context(), r.PathValue("route"), overlap)
	if err != nil {
		c.failed(w, r, "rotating a secret", err)
		return
	}
	what := "The previous secret no longer signs."
	if res.PreviousUntil != nil {
		what = "The previous secret still signs, after the new one, until " + res.PreviousUntil.UTC().Format("2006-01-02 15:04:05Z") + "."
	}
	c.render(w, r, "secret", u, map[string]any{"Route": res.Route, "Secret": res.Secret, "Fingerprint": res.Fingerprint, "What": what})
}

// deleteRoute deletes a run-time route, as the form says to dispose of
// its backlog.
func (c *console) deleteRoute(w http.ResponseWriter, r *http.Request, _ user) {
	disposal := r.PostFormValue("disposal")
	if disposal == "refuse" {
		disposal = ""
	}
	res, err := c.svc.RouteDelete(r.Context(), r.PathValue("route"), disposal)
	if err != nil {
		c.failed(w, r, "deleting a route", err)
		return
	}
	c.flash(r, fmt.Sprintf("route %s deleted; %d undelivered: %s", res.Route, res.Undelivered,
		map[string]string{ops.DisposeDeliver: "delivered first", ops.DisposeDeadLetter: "moved to its dead letters"}[res.Disposal]))
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// refusal is how the console answers a refused route change.
func refusal(err error) (int, bool) {
	switch {
	case errors.Is(err, ops.ErrConflict), errors.Is(err, ops.ErrExists):
		return http.StatusConflict, true
	case errors.Is(err, ops.ErrForbidden):
		return http.StatusForbidden, true
	case errors.Is(err, ops.ErrNoKey):
		return http.StatusServiceUnavailable, true
	}
	return 0, false
}
