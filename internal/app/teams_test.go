package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	hamqp "github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/console"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// teamsHarness is a relay whose processes log in as a role that owns
// nothing, with two look-alike teams: a-billing (team-a) and b-billing
// (team-b) both take the platform source acme's invoices, and b-billing
// also takes bsrc, a source of team-b's. B's destination fails, so B has
// retrying deliveries, attempts and dead letters; A's accepts.
type teamsHarness struct {
	*harness
	api    *apiClient
	tokens map[string]string // team -> admin token
}

func newTeamsHarness(t *testing.T) *teamsHarness {
	h := newHarness(t)
	h.cfg.Database.URL = storetest.AppURL(t, h.dbURL)
	for _, team := range []string{"team-a", "team-b"} {
		_, err := h.db.Pool().Exec(t.Context(), `INSERT INTO teams (name, created_by) VALUES ($1, 'test')`, team)
		require.NoError(t, err)
	}
	dest := newDestination(t, func(w http.ResponseWriter, r *http.Request, body []byte, route string, prior int) int {
		if route == "b-billing" {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	bsrc := h.cfg.Sources[0]
	bsrc.Name, bsrc.Team = "bsrc", "team-b"
	h.cfg.Sources = append(h.cfg.Sources, bsrc)
	// The platform lets team A bind its own routes to acme's events.
	h.cfg.Sources[0].Subscribers = []string{"team-a"}
	h.cfg.Secrets = config.Secrets{Key: testSecretsKey, Overlap: time.Hour}
	// The teams' destinations are loopback servers: the operator allows
	// them (a team's route reaches no loopback address otherwise).
	h.cfg.TeamRoutes.AllowedNetworks = []string{"127.0.0.0/8"}
	t.Cleanup(func() { deleteRuntimeRouteQueues(t, h) }) // after the processes stop
	a := testRoute("a-billing", dest.url("a-billing"), "acme.invoice.*")
	a.Team = "team-a"
	b := testRoute("b-billing", dest.url("b-billing"), "acme.invoice.*", "bsrc.#")
	b.Team, b.MaxAttempts = "team-b", 2
	h.cfg.Routes = []config.Route{a, b}
	h.cfg.Admin.Token = adminToken
	adminLn, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	h.start(app.ReceiverOptions{AdminListener: adminLn})
	h.startDispatcher(app.DispatcherOptions{})
	th := &teamsHarness{harness: h, api: newAPIClient(t, "http://"+adminLn.Addr().String()), tokens: map[string]string{}}
	for _, team := range []string{"team-a", "team-b"} {
		a := th.api.call("create-token", http.MethodPost, "/api/v1/tokens", adminToken,
			map[string]any{"name": team[len(team)-1:] + "-admin", "role": "admin", "team": team})
		require.Equal(t, http.StatusCreated, a.Status, "%s", a.Body)
		var tok ops.NewToken
		a.decode(t, &tok)
		require.Equal(t, team, tok.Team)
		th.tokens[team] = tok.Secret
	}
	return th
}

// postTo posts a signed event to source.
func (h *teamsHarness) postTo(source, id, eventType string) string {
	h.t.Helper()
	body := []byte(fmt.Sprintf(`{"id":%q,"type":%q,"amount":42}`, id, eventType))
	r, err := h.tryPost(source, body, http.Header{"X-Acme-Signature": {sign(acmeSecret, body)}})
	require.NoError(h.t, err)
	require.Equal(h.t, http.StatusOK, r.status, "%+v", r)
	return r.ID
}

// seed gives both teams look-alike rows: the platform's event shared
// (a-billing delivers it, b-billing fails it), one of B's source alone,
// both of B's pairs dead, B's own audit rows (a pause and a resume) and
// B's job. It returns the two events' ids and the job's.
func (h *teamsHarness) seed() (shared, onlyB, bJob string) {
	t, c, tokB := h.t, h.api, h.tokens["team-b"]
	t.Helper()
	shared = h.postTo("acme", "evt_shared", "invoice.paid") // a-billing delivers it, b-billing fails it
	onlyB = h.postTo("bsrc", "evt_b_only", "invoice.paid")  // b-billing's alone
	// B's two pairs end dead (2 attempts each), A's shared pair delivered.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var dead, delivered int
		require.NoError(c, h.db.Pool().QueryRow(context.Background(), `SELECT
			count(*) FILTER (WHERE route = 'b-billing' AND state = 'dead'),
			count(*) FILTER (WHERE route = 'a-billing' AND state = 'delivered') FROM deliveries`).Scan(&dead, &delivered))
		assert.Equal(c, 2, dead)
		assert.Equal(c, 1, delivered)
	}, testenv.Scaled(30*time.Second), 50*time.Millisecond, "B's pairs dead, A's delivered")
	// B's own audit rows and job.
	require.Equal(t, http.StatusOK, c.call("pause-route", http.MethodPost, "/api/v1/routes/b-billing/pause", tokB, map[string]any{"reason": "b's own"}).Status)
	require.Equal(t, http.StatusOK, c.call("resume-route", http.MethodPost, "/api/v1/routes/b-billing/resume", tokB, nil).Status)
	a := c.call("replay", http.MethodPost, "/api/v1/replay", tokB, map[string]any{"filter": map[string]any{"route": "b-billing"}, "dry_run": true})
	require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
	var job ops.Job
	a.decode(t, &job)
	c.waitJob(tokB, job.ID.String(), 30*time.Second)
	bJob = job.ID.String()
	// B acts on its own: a replay of its event writes its pair and an
	// outbox row under B's policies, and the pair is tried again (and
	// fails again: dead, with two more attempts and a third dead letter).
	a = c.call("replay", http.MethodPost, "/api/v1/replay", tokB, map[string]any{"event_id": onlyB})
	require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
	a.decode(t, &job)
	done, _ := c.waitJob(tokB, job.ID.String(), 30*time.Second)
	require.Equal(t, "succeeded", done.State, "%s", done.Error)
	var res ops.ReplayResult
	require.NoError(t, json.Unmarshal(done.Result, &res))
	require.Equal(t, 1, res.ReplayedCount, "%s", done.Result)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var attempts int
		require.NoError(c, h.db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM delivery_attempts a JOIN deliveries d ON d.id = a.delivery_id
			WHERE d.route = 'b-billing' AND d.state = 'dead'`).Scan(&attempts))
		q, err := h.ch.QueueDeclarePassive(h.names.DeadQueue("b-billing"), true, false, false, false, nil)
		require.NoError(c, err)
		assert.Equal(c, 6, attempts)
		assert.Equal(c, 3, q.Messages)
	}, testenv.Scaled(30*time.Second), 50*time.Millisecond, "B's replayed pair dead again")
	return shared, onlyB, bJob
}

// pathParam finds an operation's path parameters.
var pathParam = regexp.MustCompile(`\{([a-z_]+)\}`)

// Issue 22, the adversarial test: every operation of the OpenAPI document,
// enumerated from it, called with team A's admin token on team B's
// identifiers answers 404 (not 403: that would say B's exists), no
// listing of A holds a row of B, and B's rows are as they were. An
// operation with path parameters needs nothing here to be covered; one
// without (a listing, or an action whose target is in its body) fails the
// test until it has a row below.
func TestTeamsCannotReachEachOther(t *testing.T) {
	t.Parallel()
	h := newTeamsHarness(t)
	c, tokA := h.api, h.tokens["team-a"]

	shared, onlyB, bJob := h.seed()
	// What must never reach A: B's route, source, events, job, token, team.
	markers := []string{"b-billing", "bsrc", onlyB, bJob, "b-admin", "team-b"}
	noneOfB := func(what string, body []byte) {
		t.Helper()
		for _, m := range markers {
			assert.NotContains(t, string(body), m, "%s shows B's %s to A", what, m)
		}
	}
	before := h.bState()

	// B's identifiers by parameter name ({id} is an event or a job), and
	// identifiers of nothing at all: A's answer on B's must be the answer
	// on nothing, word for word, or it tells A that B's exist.
	nothing := map[string]string{"{route}": "no-such-route", "{name}": "no-such-token", "{id}": "0190c8d2-0000-7000-8000-000000000000"}
	bOf := func(path, param string) string {
		switch param {
		case "{route}":
			return "b-billing"
		case "{name}":
			return "b-admin"
		case "{id}":
			if strings.HasPrefix(path, "/api/v1/jobs/") {
				return bJob
			}
			return onlyB
		}
		t.Fatalf("path parameter %s of %s: say which of B's identifiers it takes", param, path)
		return ""
	}
	ids := func(path string, of map[string]string) string {
		return pathParam.ReplaceAllStringFunc(path, func(p string) string {
			if of != nil {
				return of[p]
			}
			return bOf(path, p)
		})
	}
	// sameAsNothing calls op on B's things and on nothing: the answers
	// must be one, but for the names the caller gave (swap: nothing's
	// name to B's).
	sameAsNothing := func(op docOperation, pathB, pathNone string, bodyB, bodyNone any, want int, swap map[string]string) {
		t.Helper()
		a := c.call(op.ID, op.Method, pathB, tokA, bodyB)
		assert.Equal(t, want, a.Status, "%s %s as team A: %s", op.Method, pathB, a.Body)
		n := c.call(op.ID, op.Method, pathNone, tokA, bodyNone)
		echo := string(n.Body)
		for from, to := range swap {
			echo = strings.ReplaceAll(echo, from, to)
		}
		assert.Equal(t, n.Status, a.Status, "%s: B's answers as nothing does", op.ID)
		assert.Equal(t, echo, string(a.Body), "%s: A's answer on B's names is its answer on nothing", op.ID)
	}
	// The operations without path parameters: a listing (called, and with
	// B's names as its filter where it takes them), or an action naming
	// B's things in its body; each with its twin on nothing.
	type attempt struct {
		query, queryNone string
		body, bodyNone   any
		swap             map[string]string
		status           int
	}
	routeSwap := map[string]string{"no-such-route": "b-billing"}
	unparameterised := map[string][]attempt{
		"list-routes":  {{status: http.StatusOK}},
		"get-activity": {{status: http.StatusOK}},
		"list-events": {{status: http.StatusOK},
			{query: "?route=b-billing", queryNone: "?route=no-such-route", swap: routeSwap, status: http.StatusOK},
			{query: "?source=bsrc", queryNone: "?source=no-such-source", swap: map[string]string{"no-such-source": "bsrc"}, status: http.StatusOK}},
		"list-jobs": {{status: http.StatusOK}},
		// Listening to B's route is listening to no route.
		"listen":      {{query: "?route=b-billing", queryNone: "?route=no-such-route", swap: routeSwap, status: http.StatusNotFound}},
		"list-tokens": {{status: http.StatusOK}},
		"list-audit": {{status: http.StatusOK},
			{query: "?target=b-billing", queryNone: "?target=no-such-route", swap: routeSwap, status: http.StatusOK}},
		"replay": {
			{body: map[string]any{"event_id": onlyB}, bodyNone: map[string]any{"event_id": nothing["{id}"]},
				swap: map[string]string{nothing["{id}"]: onlyB}, status: http.StatusNotFound},
			{body: map[string]any{"filter": map[string]any{"route": "b-billing"}}, bodyNone: map[string]any{"filter": map[string]any{"route": "no-such-route"}},
				swap: routeSwap, status: http.StatusNotFound},
		},
		// Trying rules reads an event and a route: B's answer as nothing.
		"test-route": {
			{body: map[string]any{"event_id": onlyB, "filter": "true"}, bodyNone: map[string]any{"event_id": nothing["{id}"], "filter": "true"},
				swap: map[string]string{nothing["{id}"]: onlyB}, status: http.StatusNotFound},
			{body: map[string]any{"event_id": shared, "route": "b-billing"}, bodyNone: map[string]any{"event_id": shared, "route": "no-such-route"},
				swap: routeSwap, status: http.StatusNotFound},
		},
		// A team's token names no other team, and purges nothing: the
		// platform's alone (a 403 whatever the team or the age).
		"create-token": {{body: map[string]any{"name": "sneaky", "role": "admin", "team": "team-b"},
			bodyNone: map[string]any{"name": "sneaky", "role": "admin", "team": "no-such-team"}, swap: map[string]string{"no-such-team": "team-b"}, status: http.StatusForbidden}},
		// A team makes routes for itself only, bound to sources that
		// admit it: B's source answers as a source of nobody's.
		"create-route": {
			{body: map[string]any{"name": "sneaky", "team": "team-b", "url": "http://127.0.0.1:9/", "bindings": []string{"acme.invoice.*"}},
				bodyNone: map[string]any{"name": "sneaky", "team": "no-such-team", "url": "http://127.0.0.1:9/", "bindings": []string{"acme.invoice.*"}},
				swap:     map[string]string{"no-such-team": "team-b"}, status: http.StatusForbidden},
			{body: map[string]any{"name": "team-a:sneaky", "url": "http://127.0.0.1:9/", "bindings": []string{"bsrc.invoice.*"}},
				bodyNone: map[string]any{"name": "team-a:sneaky", "url": "http://127.0.0.1:9/", "bindings": []string{"no-such-source.invoice.*"}},
				swap:     map[string]string{"no-such-source": "bsrc"}, status: http.StatusBadRequest},
		},
		"purge": {{body: map[string]any{"older_than": "1s", "confirm": true}, status: http.StatusForbidden},
			{body: map[string]any{"older_than": "1s", "dry_run": true}, status: http.StatusForbidden}},
	}
	docOps := documentOperations(t)
	require.GreaterOrEqual(t, len(docOps), 21)
	for _, op := range docOps {
		if pathParam.MatchString(op.Path) {
			var body any
			if op.HasBody {
				body = map[string]any{}
			}
			query := ""
			for i, q := range op.Queries { // the required ones: B's source, a resource
				query += map[bool]string{true: "?", false: "&"}[i == 0] + q + "=" + map[string]string{"source": "bsrc"}[q] + "r1"
			}
			swap := map[string]string{}
			for _, p := range pathParam.FindAllString(op.Path, -1) {
				swap[nothing[p]] = bOf(op.Path, p)
			}
			sameAsNothing(op, ids(op.Path, nil)+query, ids(op.Path, nothing)+query, body, body, http.StatusNotFound, swap)
			continue
		}
		cases, ok := unparameterised[op.ID]
		require.True(t, ok, "operation %s (%s %s) takes no path parameter: add how team A tries B's rows with it", op.ID, op.Method, op.Path)
		for _, k := range cases {
			if k.query != "" || k.bodyNone != nil {
				sameAsNothing(op, op.Path+k.query, op.Path+k.queryNone, k.body, k.bodyNone, k.status, k.swap)
				continue
			}
			a := c.call(op.ID, op.Method, op.Path, tokA, k.body)
			assert.Equal(t, k.status, a.Status, "%s %s as team A: %s", op.Method, op.Path, a.Body)
			noneOfB(op.ID, a.Body)
		}
	}
	require.Equal(t, before, h.bState(), "B's rows and dead letters are as they were")

	// A sees its own: its route, the shared event with its own delivery
	// only, its token.
	a := c.call("get-event", http.MethodGet, "/api/v1/events/"+shared, tokA, nil)
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	noneOfB("the shared event", a.Body)
	var ev ops.EventDetail
	a.decode(t, &ev)
	require.Len(t, ev.Deliveries, 1)
	require.Equal(t, "a-billing", ev.Deliveries[0].Route)
	a = c.call("list-routes", http.MethodGet, "/api/v1/routes", tokA, nil)
	var routes struct{ Items []ops.RouteSummary }
	a.decode(t, &routes)
	require.Len(t, routes.Items, 1)
	require.Equal(t, "a-billing", routes.Items[0].Route)
	require.Equal(t, http.StatusOK, c.call("pause-route", http.MethodPost, "/api/v1/routes/a-billing/pause", tokA, nil).Status)
	// The platform sees both.
	a = c.call("get-event", http.MethodGet, "/api/v1/events/"+shared, adminToken, nil)
	a.decode(t, &ev)
	require.Len(t, ev.Deliveries, 2)
	a = c.call("list-routes", http.MethodGet, "/api/v1/routes", adminToken, nil)
	a.decode(t, &routes)
	require.Len(t, routes.Items, 2)
}

// bState is what A must not change of B's: its pairs, its route's state,
// its token, its dead letters.
func (h *teamsHarness) bState() string {
	h.t.Helper()
	ctx := context.Background()
	var rows string
	require.NoError(h.t, h.db.Pool().QueryRow(ctx, `SELECT
		(SELECT string_agg(event_id || ':' || state || ':' || attempts, ',' ORDER BY event_id) FROM deliveries WHERE route = 'b-billing') || ' ' ||
		(SELECT count(*) FROM delivery_attempts a JOIN deliveries d ON d.id = a.delivery_id WHERE d.route = 'b-billing') || ' ' ||
		(SELECT coalesce(paused::text, 'none') FROM route_state WHERE route = 'b-billing') || ' ' ||
		(SELECT coalesce(revoked_at::text, 'live') FROM api_tokens WHERE name = 'b-admin')`).Scan(&rows))
	q, err := h.ch.QueueDeclarePassive(h.names.DeadQueue("b-billing"), true, false, false, false, nil)
	require.NoError(h.t, err)
	return fmt.Sprintf("%s dead-letters:%d", rows, q.Messages)
}

// The receiver and the dispatcher, logged in as a role that row-level
// security does not hold (the tests' superuser), refuse to start once a
// team besides the platform exists, naming what to change.
func TestProcessesRefuseAnOwnerRoleOnceTeamsExist(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	_, err := h.db.Pool().Exec(t.Context(), `INSERT INTO teams (name) VALUES ('payments')`)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	err = app.RunReceiver(ctx, h.cfg, app.ReceiverOptions{Listener: ln})
	require.ErrorContains(t, err, "row-level security does not hold")
	require.ErrorContains(t, err, "database.migrate_url")
	err = app.RunDispatcher(ctx, h.cfg, app.DispatcherOptions{})
	require.ErrorContains(t, err, "row-level security does not hold")
}

// Issue 22, the console's half: signed in as team A in a real browser,
// every page and action of the console (console.Pages, so a new one is
// covered) on B's identifiers answers as on identifiers of nothing, 404;
// A's pages list nothing of B's; B's rows are as they were.
func TestTeamsCannotReachEachOtherInTheConsole(t *testing.T) {
	t.Parallel()
	h := newTeamsHarness(t)
	shared, onlyB, bJob := h.seed()
	ctx := browser(t)
	base := h.api.base
	signIn(t, ctx, base, h.tokens["team-a"])
	waitText(t, ctx, "header form.who", "token:a-admin (admin, team team-a)")
	before := h.bState()
	markers := []string{"b-billing", "bsrc", onlyB, bJob, "b-admin", "team-b"}

	// The listings, as the browser shows them.
	for _, page := range []string{"/", "/events", "/audit", "/replay", "/events/" + shared} {
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+page)))
		body, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.documentElement.outerHTML`))
		require.NoError(t, err)
		for _, m := range markers {
			assert.NotContains(t, body, m, "%s shows B's %s to A", page, m)
		}
	}
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/events/"+shared)))
	require.Contains(t, text(t, ctx, "main"), "a-billing", "A sees its own delivery of the shared event")
	screenshot(t, ctx, "console-team-a-shared-event")

	// Every page and action on B's identifiers, and on nothing's, with
	// the browser's session: one answer, 404.
	client := sessionClient(t, ctx, base)
	// B's identifiers by parameter ({id} is a job under /jobs/, else an
	// event), and nothing's.
	bOf := func(path string) map[string]string {
		if strings.HasPrefix(path, "/jobs/") {
			return map[string]string{"{id}": bJob}
		}
		return map[string]string{"{route}": "b-billing", "{id}": onlyB}
	}
	nothing := map[string]string{"{route}": "no-such-route", "{id}": "0190c8d2-0000-7000-8000-000000000000"}
	fill := func(path string, of map[string]string) (string, url.Values) {
		path = pathParam.ReplaceAllStringFunc(path, func(p string) string {
			v, ok := of[p]
			require.True(t, ok, "page %s: say which of B's identifiers %s takes", path, p)
			return v
		})
		// What a form of the page would send, naming the same things.
		return path, url.Values{"route": {of["{route}"]}, "event_id": {of["{id}"]}, "reason": {"a's"}, "confirm": {"yes"}}
	}
	do := func(method, path string, form url.Values) (int, string) {
		req, err := http.NewRequest(method, base+path, strings.NewReader(form.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		resp, err := client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}
	tried := 0
	for _, p := range console.Pages {
		method, path, _ := strings.Cut(p.Pattern, " ")
		if !pathParam.MatchString(path) && method != http.MethodPost {
			continue // a listing: above
		}
		if p.Pattern == "POST /routes" {
			continue // names no existing thing: below
		}
		of := bOf(path)
		pathB, formB := fill(path, of)
		pathNone, formNone := fill(path, nothing)
		status, body := do(method, pathB, formB)
		statusNone, bodyNone := do(method, pathNone, formNone)
		assert.Equal(t, http.StatusNotFound, status, "%s as team A on B's: %s", pathB, body)
		assert.Equal(t, statusNone, status, "%s: B's answers as nothing does", p.Pattern)
		for param, b := range of {
			bodyNone = strings.ReplaceAll(bodyNone, nothing[param], b)
		}
		assert.Equal(t, bodyNone, body, "%s: A's answer on B's names is its answer on nothing", p.Pattern)
		tried++
	}
	require.GreaterOrEqual(t, tried, 12)
	// Making a route: for B's team, or bound to B's source, answers as
	// for a team or a source of nobody's.
	for _, k := range []struct{ b, none url.Values }{
		{url.Values{"name": {"sneaky"}, "team": {"team-b"}, "url": {"http://127.0.0.1:9/"}, "bindings": {"acme.invoice.*"}},
			url.Values{"name": {"sneaky"}, "team": {"no-such-team"}, "url": {"http://127.0.0.1:9/"}, "bindings": {"acme.invoice.*"}}},
		{url.Values{"name": {"sneaky"}, "url": {"http://127.0.0.1:9/"}, "bindings": {"bsrc.invoice.*"}},
			url.Values{"name": {"sneaky"}, "url": {"http://127.0.0.1:9/"}, "bindings": {"no-such-source.invoice.*"}}},
	} {
		status, body := do(http.MethodPost, "/routes", k.b)
		statusNone, bodyNone := do(http.MethodPost, "/routes", k.none)
		assert.Contains(t, []int{http.StatusForbidden, http.StatusBadRequest}, status, "%s", body)
		assert.Equal(t, statusNone, status)
		bodyNone = strings.NewReplacer("no-such-team", "team-b", "no-such-source", "bsrc").Replace(bodyNone)
		assert.Equal(t, bodyNone, body, "making a route: A's answer on B's names is its answer on nothing")
	}
	// A listing filtered by B's names: as filtered by nothing's.
	for _, q := range []string{"route=%s", "source=%s", "find=%s"} {
		for b, none := range map[string]string{"b-billing": "no-such-route", "bsrc": "no-such-source", onlyB: nothing["{id}"]} {
			status, body := do(http.MethodGet, "/events?"+fmt.Sprintf(q, url.QueryEscape(b)), nil)
			statusNone, bodyNone := do(http.MethodGet, "/events?"+fmt.Sprintf(q, url.QueryEscape(none)), nil)
			assert.Equal(t, statusNone, status, "/events?%s", fmt.Sprintf(q, b))
			assert.Equal(t, strings.ReplaceAll(bodyNone, none, b), body, "/events?%s: A's answer on B's names is its answer on nothing", fmt.Sprintf(q, b))
		}
	}
	// The find box finds, by the sender's id, the events A sees (issue 38):
	// the platform's event delivered to A's route.
	status, body := do(http.MethodGet, "/events?find=evt_shared", nil)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, shared, "A finds the shared event by the sender's id")
	require.Equal(t, before, h.bState(), "B's rows and dead letters are as they were")
}

// Issue 38, security 8: names never meet across teams. A team's route is
// named TEAM:NAME: a name the platform later puts in config.yaml (whose
// names have no colon) was never the team's to take, so the next deploy
// starts; and two teams' names never meet. A token's name is its team's
// own: a name another team uses is free (no 409 telling of it), each
// revokes its own, a team naming another's token finds nothing, and the
// platform names another team's as TEAM:NAME.
func TestNamesNeverMeetAcrossTeams(t *testing.T) {
	t.Parallel()
	h := newTeamsHarness(t)
	c, tokA, tokB := h.api, h.tokens["team-a"], h.tokens["team-b"]
	route := func(name string) map[string]any {
		return map[string]any{"name": name, "url": "http://127.0.0.1:9/", "bindings": []string{"acme.invoice.*"}}
	}
	a := c.call("create-route", http.MethodPost, "/api/v1/routes", tokA, route("ledger"))
	require.Equal(t, http.StatusBadRequest, a.Status, "a team does not take a name the config may use: %s", a.Body)
	require.Contains(t, string(a.Body), "team-a:NAME")
	a = c.call("create-route", http.MethodPost, "/api/v1/routes", tokA, route("team-a:ledger"))
	require.Equal(t, http.StatusCreated, a.Status, "%s", a.Body)
	var made ops.RouteCreated
	a.decode(t, &made)
	require.Equal(t, "team-a", made.Route.Team)
	// B's admits nothing of acme: it binds its own source.
	a = c.call("create-route", http.MethodPost, "/api/v1/routes", tokB,
		map[string]any{"name": "team-b:ledger", "url": "http://127.0.0.1:9/", "bindings": []string{"bsrc.invoice.*"}})
	require.Equal(t, http.StatusCreated, a.Status, "B's ledger never meets A's: %s", a.Body)
	a = c.call("create-route", http.MethodPost, "/api/v1/routes", tokB, route("team-a:other"))
	require.Equal(t, http.StatusForbidden, a.Status, "%s", a.Body)
	a = c.call("create-route", http.MethodPost, "/api/v1/routes", adminToken, route("platform:ledger"))
	require.Equal(t, http.StatusBadRequest, a.Status, "the platform's run-time routes have plain names: %s", a.Body)

	// The platform adds ledger to config.yaml: the next deploy starts,
	// A's route beside it.
	cfg := *h.cfg
	cfg.Routes = append(slices.Clone(cfg.Routes), testRoute("ledger", "http://127.0.0.1:9/", "acme.nothing.*"))
	amqptest.DeleteTopology(t, hamqp.Topology{Queues: []hamqp.Queue{{Name: h.names.RouteQueue("ledger")}, {Name: h.names.DeadQueue("ledger")}}})
	h.startDispatcherWith(&cfg, app.DispatcherOptions{})
	require.EventuallyWithT(t, func(col *assert.CollectT) {
		var declared bool
		require.NoError(col, h.db.Pool().QueryRow(context.Background(), `SELECT declared FROM routes WHERE name = 'ledger'`).Scan(&declared))
		assert.True(col, declared)
	}, testenv.Scaled(5*time.Second), 20*time.Millisecond)

	// Tokens: B takes a name A uses.
	for _, tok := range []string{tokA, tokB} {
		a = c.call("create-token", http.MethodPost, "/api/v1/tokens", tok, map[string]any{"name": "ci", "role": "viewer"})
		require.Equal(t, http.StatusCreated, a.Status, "a name another team uses is free: %s", a.Body)
	}
	a = c.call("create-token", http.MethodPost, "/api/v1/tokens", tokB, map[string]any{"name": "ci", "role": "viewer"})
	require.Equal(t, http.StatusConflict, a.Status, "a team's own name is taken: %s", a.Body)
	var list struct{ Items []ops.Token }
	c.call("list-tokens", http.MethodGet, "/api/v1/tokens", tokA, nil).decode(t, &list)
	for _, tok := range list.Items {
		require.Equal(t, "team-a", tok.Team, "A lists its own tokens only")
	}
	// A naming B's token finds nothing, as for a token nobody has.
	a = c.call("revoke-token", http.MethodDelete, "/api/v1/tokens/team-b:ci", tokA, nil)
	none := c.call("revoke-token", http.MethodDelete, "/api/v1/tokens/team-b:no-such-token", tokA, nil)
	require.Equal(t, http.StatusNotFound, a.Status, "%s", a.Body)
	require.Equal(t, http.StatusNotFound, none.Status)
	// The platform: ci names two teams' tokens; TEAM:ci names one.
	a = c.call("revoke-token", http.MethodDelete, "/api/v1/tokens/ci", adminToken, nil)
	require.Equal(t, http.StatusBadRequest, a.Status, "%s", a.Body)
	require.Contains(t, string(a.Body), "team-a, team-b")
	a = c.call("revoke-token", http.MethodDelete, "/api/v1/tokens/ci", tokB, nil)
	require.Equal(t, http.StatusNoContent, a.Status, "B revokes its own: %s", a.Body)
	c.call("list-tokens", http.MethodGet, "/api/v1/tokens", adminToken, nil).decode(t, &list)
	revoked := map[string]bool{}
	for _, tok := range list.Items {
		if tok.Name == "ci" {
			revoked[tok.Team] = tok.RevokedAt != nil
		}
	}
	require.Equal(t, map[string]bool{"team-a": false, "team-b": true}, revoked, "B's revoke left A's token alone")
	a = c.call("revoke-token", http.MethodDelete, "/api/v1/tokens/ci", adminToken, nil)
	require.Equal(t, http.StatusNoContent, a.Status, "one live ci left: its name alone names it: %s", a.Body)
}
