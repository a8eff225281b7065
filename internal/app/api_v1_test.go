package app_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/rule"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/jackc/pgx/v5"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	vconfig "github.com/pb33f/libopenapi-validator/config"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// apiDocument is the committed OpenAPI document: the contract the API
// suite checks every answer against.
const apiDocument = "../../api/openapi.json"

// docOperation is an operation of the document.
type docOperation struct {
	ID, Method, Path, Role string
	// HasBody: it takes a request body; Queries are its required query
	// parameters.
	HasBody bool
	Queries []string
}

// documentOperations reads every operation of the committed document.
func documentOperations(t *testing.T) []docOperation {
	t.Helper()
	raw, err := os.ReadFile(apiDocument)
	require.NoError(t, err)
	var doc struct {
		Paths map[string]map[string]struct {
			OperationID string          `json:"operationId"`
			Role        string          `json:"x-required-role"`
			RequestBody json.RawMessage `json:"requestBody"`
			Parameters  []struct {
				Name     string `json:"name"`
				In       string `json:"in"`
				Required bool   `json:"required"`
			} `json:"parameters"`
		} `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	var out []docOperation
	for path, item := range doc.Paths {
		for method, o := range item {
			op := docOperation{ID: o.OperationID, Method: strings.ToUpper(method), Path: path, Role: o.Role, HasBody: len(o.RequestBody) > 0}
			for _, p := range o.Parameters {
				if p.In == "query" && p.Required {
					op.Queries = append(op.Queries, p.Name)
				}
			}
			out = append(out, op)
		}
	}
	slices.SortFunc(out, func(a, b docOperation) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// apiClient calls /api/v1 and checks every answer against the document,
// counting the operations each test reached.
type apiClient struct {
	t    *testing.T
	base string
	v    validator.Validator

	mu      sync.Mutex
	reached map[string]bool // operation id -> answered with a 2xx
}

func newAPIClient(t *testing.T, base string) *apiClient {
	t.Helper()
	raw, err := os.ReadFile(apiDocument)
	require.NoError(t, err)
	doc, err := libopenapi.NewDocument(raw)
	require.NoError(t, err)
	v, errs := validator.NewValidator(doc, vconfig.WithFormatAssertions())
	require.Empty(t, errs)
	ok, verrs := v.ValidateDocument()
	require.True(t, ok, "the document is valid OpenAPI: %v", verrs)
	return &apiClient{t: t, base: base, v: v, reached: map[string]bool{}}
}

// apiAnswer is one answer of the API.
type apiAnswer struct {
	Status int
	Header http.Header
	Body   []byte
}

// decode reads the answer's JSON into v; t is the test, or
// EventuallyWithT's collector inside a condition.
func (a apiAnswer) decode(t require.TestingT, v any) {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	require.NoError(t, json.Unmarshal(a.Body, v), "%s", a.Body)
}

// apiErrorBody is the document's Error.
type apiErrorBody struct {
	Code         string `json:"code"`
	Message      string `json:"message"`
	RequiredRole string `json:"required_role"`
}

// call sends one request as operation op (its id in the document) and
// validates the answer against the document; a 2xx marks op reached.
func (c *apiClient) call(op, method, path, token string, body any, header ...string) apiAnswer {
	c.t.Helper()
	return c.try(c.t, op, method, path, token, body, header...)
}

// try is call failing t: the test, or EventuallyWithT's collector inside a
// condition (which must not fail the test from testify's goroutine).
func (c *apiClient) try(t require.TestingT, op, method, path, token string, body any, header ...string) apiAnswer {
	var raw []byte
	if body != nil {
		var err error
		raw, err = json.Marshal(body)
		require.NoError(t, err)
	}
	build := func() *http.Request {
		req, err := http.NewRequest(method, c.base+path, bytes.NewReader(raw))
		require.NoError(t, err)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		return req
	}
	resp, err := http.DefaultClient.Do(build())
	require.NoError(t, err)
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	// The validator reads the answer's body: hand it a fresh copy.
	resp.Body = io.NopCloser(bytes.NewReader(got))
	ok, verrs := c.v.ValidateHttpResponse(build(), resp)
	if !ok {
		for _, e := range verrs {
			t.Errorf("%s %s %s answered %d against the document: %s: %s", op, method, path, resp.StatusCode, e.Message, e.Reason)
			for _, se := range e.SchemaValidationErrors {
				t.Errorf("    %s at %s", se.Reason, se.FieldPath)
			}
		}
		t.Errorf("body: %s", got)
	}
	if resp.StatusCode < 300 {
		c.mu.Lock()
		c.reached[op] = true
		c.mu.Unlock()
	}
	return apiAnswer{Status: resp.StatusCode, Header: resp.Header, Body: got}
}

// stream opens the listen stream path as op, reads its first n events
// and closes it; the stream is an answer the validator cannot read whole,
// so its frames are checked here: ready first, then event.
func (c *apiClient) stream(op, path, token string, n int) []ops.ListenEvent {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Scaled(20*time.Second))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	require.NoError(c.t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	require.Equal(c.t, http.StatusOK, resp.StatusCode)
	require.Equal(c.t, "text/event-stream", resp.Header.Get("Content-Type"))
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var events []string
	var out []ops.ListenEvent
	event := ""
	for len(out) < n && sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
			events = append(events, event)
		case strings.HasPrefix(line, "data: ") && event == "event":
			var ev ops.ListenEvent
			require.NoError(c.t, json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev))
			out = append(out, ev)
		}
	}
	require.Len(c.t, out, n, "events before the stream ended: %v (%v)", events, sc.Err())
	require.Equal(c.t, "ready", events[0], "the first frame says what the stream follows")
	c.mu.Lock()
	c.reached[op] = true
	c.mu.Unlock()
	return out
}

// waitJob polls a job until it ends and returns it, with every distinct
// progress it saw on the way.
func (c *apiClient) waitJob(token, id string, timeout time.Duration) (ops.Job, []string) {
	c.t.Helper()
	var job ops.Job
	var seen []string
	require.EventuallyWithT(c.t, func(col *assert.CollectT) {
		a := c.try(col, "get-job", http.MethodGet, "/api/v1/jobs/"+id, token, nil)
		require.Equal(col, http.StatusOK, a.Status, "%s", a.Body)
		var got ops.Job
		a.decode(col, &got)
		job = got
		if p := string(job.Progress); len(seen) == 0 || seen[len(seen)-1] != p {
			seen = append(seen, p)
		}
		assert.NotEqual(col, "running", job.State)
	}, testenv.Scaled(timeout), 50*time.Millisecond, "job %s ends", id)
	return job, seen
}

// apiHarness is a receiver with the admin API, a dispatcher, a billing
// route whose destination fails while billingDown is set, and a token of
// each role.
type apiHarness struct {
	*harness
	api         *apiClient
	tokens      map[string]string // role -> secret
	billingDown *atomic.Bool
	dest        *destination
}

func newAPIHarness(t *testing.T, authFailuresPerMinute int, configure ...func(*config.Config)) *apiHarness {
	h := newHarness(t)
	h.cfg.Admin.AuthFailuresPerMinute = authFailuresPerMinute
	down := &atomic.Bool{}
	dest := newDestination(t, func(w http.ResponseWriter, r *http.Request, body []byte, route string, prior int) int {
		if route == "billing" && down.Load() {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	billing := testRoute("billing", dest.url("billing"), "acme.invoice.*")
	billing.MaxAttempts = 2
	h.cfg.Routes = []config.Route{billing}
	h.cfg.Admin.Token = adminToken
	h.cfg.Secrets = config.Secrets{Key: testSecretsKey, Overlap: time.Hour}
	t.Cleanup(func() { deleteRuntimeRouteQueues(t, h) })
	for _, f := range configure {
		f(h.cfg)
	}
	adminLn, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	// The last hour's counts reach Postgres within a fifth of a second.
	h.start(app.ReceiverOptions{AdminListener: adminLn, ActivityInterval: 200 * time.Millisecond})
	h.startDispatcher(app.DispatcherOptions{ActivityInterval: 200 * time.Millisecond})
	ah := &apiHarness{harness: h, api: newAPIClient(t, "http://"+adminLn.Addr().String()), tokens: map[string]string{}, billingDown: down, dest: dest}
	for _, role := range ops.Roles {
		a := ah.api.call("create-token", http.MethodPost, "/api/v1/tokens", adminToken, map[string]any{"name": "t-" + role, "role": role})
		require.Equal(t, http.StatusCreated, a.Status, "%s", a.Body)
		var tok ops.NewToken
		a.decode(t, &tok)
		require.True(t, strings.HasPrefix(tok.Secret, ops.TokenPrefix))
		ah.tokens[role] = tok.Secret
	}
	return ah
}

// deleteRuntimeRouteQueues deletes the queues of the routes a test made
// at run time. Register it before the receiver and the dispatchers start:
// it then runs after they stopped, when nothing declares the queues again,
// and long after they were declared. (RabbitMQ 3.10 trap: a quorum queue
// deleted while its at-least-once dead-letter worker still starts,
// milliseconds after the declare, crashes that worker; a few such crashes
// together take down rabbit_fifo_dlx_sup for good, and every later declare
// of a dead-lettering quorum queue fails with INTERNAL_ERROR until the
// node's app restarts.)
func deleteRuntimeRouteQueues(t *testing.T, h *harness) {
	rows, err := h.db.Pool().Query(context.Background(), `SELECT name FROM routes WHERE NOT declared`)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	conn := amqptest.Dial(t)
	for _, name := range names {
		for _, q := range []string{h.names.RouteQueue(name), h.names.DeadQueue(name)} {
			ch, err := conn.Channel()
			require.NoError(t, err)
			if _, err := ch.QueueDelete(q, false, false, false); err != nil {
				t.Logf("cleanup: deleting queue %s: %v", q, err) // a retired route's is gone
			}
			_ = ch.Close() // closed already by a failed delete
		}
	}
}

// auditCount counts the audit log's rows.
func (h *apiHarness) auditCount() int64 {
	var n int64
	require.NoError(h.t, h.db.Pool().QueryRow(h.t.Context(), `SELECT count(*) FROM audit_log`).Scan(&n))
	return n
}

// roleSample is a request each role makes of an operation: harmless when
// allowed (a dry run, a name that does not exist), so the table can run
// every operation with every role.
type roleSample struct {
	path string
	body any
}

// roleSamples has one row per operation of the document; an operation
// without a row fails TestAPIRolesPerOperation.
func roleSamples(eventID string) map[string]roleSample {
	return map[string]roleSample{
		"list-routes":                 {"/api/v1/routes", nil},
		"get-activity":                {"/api/v1/activity", nil},
		"pause-route":                 {"/api/v1/routes/billing/pause", nil},
		"resume-route":                {"/api/v1/routes/billing/resume", nil},
		"retry-route":                 {"/api/v1/routes/billing/retry", map[string]any{"dry_run": true}},
		"get-version":                 {"/api/v1/routes/billing/versions?source=acme&resource=r1", nil},
		"reset-version":               {"/api/v1/routes/billing/versions?source=acme&resource=r1", nil},
		"list-events":                 {"/api/v1/events?limit=1", nil},
		"get-event":                   {"/api/v1/events/" + eventID, nil},
		"retry-event":                 {"/api/v1/events/" + eventID + "/retry", map[string]any{"dry_run": true}},
		"replay":                      {"/api/v1/replay", map[string]any{"event_id": eventID, "dry_run": true}},
		"list-dead-letters":           {"/api/v1/routes/billing/dead-letters?limit=1", nil},
		"requeue-dead-letters":        {"/api/v1/routes/billing/dead-letters/requeue", map[string]any{"limit": 1}},
		"drop-delivered-dead-letters": {"/api/v1/routes/billing/dead-letters/drop-delivered", map[string]any{"dry_run": true}},
		"get-job":                     {"/api/v1/jobs/" + uuid.NewString(), nil},
		"cancel-job":                  {"/api/v1/jobs/" + uuid.NewString() + "/cancel", nil},
		"resume-replay":               {"/api/v1/jobs/" + uuid.NewString() + "/resume", nil},
		"list-jobs":                   {"/api/v1/jobs?limit=1", nil},
		"purge":                       {"/api/v1/purge", map[string]any{"older_than": "3650d", "dry_run": true}},
		"list-tokens":                 {"/api/v1/tokens", nil},
		"create-token":                {"/api/v1/tokens", map[string]any{"name": "from-table", "role": "viewer"}},
		"revoke-token":                {"/api/v1/tokens/no-such-token", nil},
		"list-audit":                  {"/api/v1/audit?limit=1", nil},
		"listen":                      {"/api/v1/listen?route=no-such-route", nil}, // 404 at once: no stream to wait for
		"get-route":                   {"/api/v1/routes/billing", nil},
		"test-route":                  {"/api/v1/routes/test", map[string]any{"event_id": eventID, "filter": "true"}},
		"create-route":                {"/api/v1/routes", map[string]any{"name": "from-table", "url": "http://127.0.0.1:9/", "bindings": []string{"acme.nothing.*"}}},
		// billing is declared: a change answers 409, which is neither
		// 401 nor 403.
		"update-route":        {"/api/v1/routes/billing", map[string]any{"concurrency": 2}},
		"rotate-route-secret": {"/api/v1/routes/billing/rotate-secret", nil},
		"delete-route":        {"/api/v1/routes/billing", nil},
		"drop-dead-letters":   {"/api/v1/routes/billing/dead-letters/drop", map[string]any{"dry_run": true}}, // billing is not deleted: 409
	}
}

// Each role is allowed and refused on each operation of the document as
// its x-required-role says: a refused one answers 403 naming the role it
// needs, an allowed one anything but 401 or 403. No token, an unknown
// one: 401.
func TestAPIRolesPerOperation(t *testing.T) {
	t.Parallel()
	// Two failed authentications per operation: more than the default
	// limit allows a minute.
	h := newAPIHarness(t, 1000)
	id := h.postSigned("evt_roles", "invoice.paid").ID
	samples := roleSamples(id)
	docOps := documentOperations(t)
	require.GreaterOrEqual(t, len(docOps), 20)
	created := 0
	for _, op := range docOps {
		s, ok := samples[op.ID]
		require.True(t, ok, "operation %s (%s %s) has no row in roleSamples: add one", op.ID, op.Method, op.Path)
		require.Contains(t, ops.Roles, op.Role, "%s names its role", op.ID)
		for _, role := range ops.Roles {
			body := s.body
			if op.ID == "create-token" {
				created++
				body = map[string]any{"name": fmt.Sprintf("from-table-%d", created), "role": "viewer"}
			}
			a := h.api.call(op.ID, op.Method, s.path, h.tokens[role], body)
			if ops.RoleAllows(role, op.Role) {
				assert.NotContains(t, []int{http.StatusUnauthorized, http.StatusForbidden}, a.Status, "%s as %s: %s", op.ID, role, a.Body)
				assert.Less(t, a.Status, 500, "%s as %s: %s", op.ID, role, a.Body)
				continue
			}
			require.Equal(t, http.StatusForbidden, a.Status, "%s as %s: %s", op.ID, role, a.Body)
			var e apiErrorBody
			a.decode(t, &e)
			require.Equal(t, op.Role, e.RequiredRole, "%s as %s", op.ID, role)
			require.Equal(t, "forbidden", e.Code)
		}
		a := h.api.call(op.ID, op.Method, s.path, "", s.body)
		require.Equal(t, http.StatusUnauthorized, a.Status, "%s without a token", op.ID)
		a = h.api.call(op.ID, op.Method, s.path, ops.TokenPrefix+"not-a-token", s.body)
		require.Equal(t, http.StatusUnauthorized, a.Status, "%s with an unknown token", op.ID)
	}
}

// The API suite: every operation of the document answered with a 2xx and
// checked against it, with the audit log holding one row per change and
// none per read.
func TestAPISuite(t *testing.T) {
	t.Parallel()
	h := newAPIHarness(t, 20)
	c, op, viewer, admin := h.api, h.tokens["operator"], h.tokens["viewer"], h.tokens["admin"]

	// Reading: routes, events (paged), one event.
	var ids []string
	for i := range 3 {
		ids = append(ids, h.postSigned(fmt.Sprint("evt_api_", i), "invoice.paid").ID)
	}
	a := c.call("list-routes", http.MethodGet, "/api/v1/routes", viewer, nil)
	require.Equal(t, http.StatusOK, a.Status)
	// A listing as every other (issue 38, first-time user 8).
	var routes struct {
		Total       int64              `json:"total"`
		Items       []ops.RouteSummary `json:"items"`
		BrokerError string             `json:"broker_error"`
	}
	a.decode(t, &routes)
	require.EqualValues(t, 1, routes.Total)
	require.Len(t, routes.Items, 1)
	require.Equal(t, "billing", routes.Items[0].Route)
	require.NotNil(t, routes.Items[0].Consumers, "consumers from the broker: %s", routes.BrokerError)
	require.Positive(t, *routes.Items[0].Consumers, "a dispatcher consumes billing")
	// The last hour (its figures: TestAPIActivity).
	require.Equal(t, http.StatusOK, c.call("get-activity", http.MethodGet, "/api/v1/activity", viewer, nil).Status)
	// A listener from an hour back gets the stored events, oldest first
	// (the stream itself: hookrelay listen's tests).
	heard := c.stream("listen", "/api/v1/listen?route=billing&replay_from=1h", viewer, len(ids))
	for i, ev := range heard {
		require.Equal(t, ids[i], ev.ID.String())
		require.True(t, ev.Replayed)
		require.Contains(t, string(ev.Body), "evt_api_")
	}

	type eventPage struct {
		Total      int64              `json:"total"`
		Items      []ops.EventSummary `json:"items"`
		NextCursor string             `json:"next_cursor"`
	}
	var p1, p2 eventPage
	a = c.call("list-events", http.MethodGet, "/api/v1/events?source=acme&limit=2", viewer, nil)
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	a.decode(t, &p1)
	require.EqualValues(t, 3, p1.Total)
	require.Len(t, p1.Items, 2)
	require.NotEmpty(t, p1.NextCursor)
	a = c.call("list-events", http.MethodGet, "/api/v1/events?source=acme&limit=2&cursor="+p1.NextCursor, viewer, nil)
	a.decode(t, &p2)
	require.EqualValues(t, 3, p2.Total, "the total is the filter's, on every page")
	require.Len(t, p2.Items, 1)
	require.Empty(t, p2.NextCursor, "the last page")
	got := []string{p1.Items[0].ID.String(), p1.Items[1].ID.String(), p2.Items[0].ID.String()}
	require.ElementsMatch(t, ids, got, "the pages hold each event once")

	a = c.call("get-event", http.MethodGet, "/api/v1/events/"+ids[0], viewer, nil)
	require.Equal(t, http.StatusOK, a.Status)
	a = c.call("get-event", http.MethodGet, "/api/v1/events/"+uuid.NewString(), viewer, nil)
	require.Equal(t, http.StatusNotFound, a.Status)
	var e apiErrorBody
	a.decode(t, &e)
	require.Equal(t, "not_found", e.Code)
	a = c.call("list-events", http.MethodGet, "/api/v1/events?state=lost", viewer, nil)
	require.Equal(t, http.StatusUnprocessableEntity, a.Status, "an unknown state is refused by the document's enum: %s", a.Body)

	// Reads write nothing to the audit log (invariant 9).
	before := h.auditCount()
	for _, path := range []string{"/api/v1/routes", "/api/v1/events", "/api/v1/audit", "/api/v1/jobs", "/api/v1/tokens"} {
		id := map[string]string{"/api/v1/routes": "list-routes", "/api/v1/events": "list-events", "/api/v1/audit": "list-audit",
			"/api/v1/jobs": "list-jobs", "/api/v1/tokens": "list-tokens"}[path]
		require.Equal(t, http.StatusOK, c.call(id, http.MethodGet, path, admin, nil).Status)
	}
	require.Equal(t, before, h.auditCount(), "reading writes no audit row")

	// Changes: pause and resume, one row each, named by the token.
	a = c.call("pause-route", http.MethodPost, "/api/v1/routes/billing/pause", op, nil)
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	a = c.call("resume-route", http.MethodPost, "/api/v1/routes/billing/resume", op, nil)
	require.Equal(t, http.StatusOK, a.Status)
	a = c.call("pause-route", http.MethodPost, "/api/v1/routes/nosuch/pause", op, nil)
	require.Equal(t, http.StatusNotFound, a.Status)
	a.decode(t, &e)
	require.Equal(t, "unknown_route", e.Code)
	require.Equal(t, before+2, h.auditCount(), "one row per change; a refused route changed nothing")

	// Dead letters: billing fails, two events die, requeue them as a job,
	// then the delivered letters' copies are dropped.
	h.billingDown.Store(true)
	var dead []string
	for i := range 2 {
		dead = append(dead, h.postSigned(fmt.Sprint("evt_dead_", i), "invoice.paid").ID)
	}
	amqptest.WaitCount(t, h.ch, h.names.DeadQueue("billing"), 2, 20*time.Second)
	a = c.call("list-dead-letters", http.MethodGet, "/api/v1/routes/billing/dead-letters", viewer, nil)
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	var letters struct {
		Total int64            `json:"total"`
		Items []ops.DeadLetter `json:"items"`
	}
	a.decode(t, &letters)
	require.EqualValues(t, 2, letters.Total)
	require.Len(t, letters.Items, 2)
	h.billingDown.Store(false)

	// An event's retry and a route's retry (dry run) as jobs.
	a = c.call("retry-event", http.MethodPost, "/api/v1/events/"+dead[0]+"/retry", op, map[string]any{"dry_run": true})
	require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
	var job ops.Job
	a.decode(t, &job)
	require.Equal(t, "/api/v1/jobs/"+job.ID.String(), a.Header.Get("Location"))
	job, _ = c.waitJob(viewer, job.ID.String(), 20*time.Second)
	require.Equal(t, "succeeded", job.State, job.Error)
	a = c.call("retry-event", http.MethodPost, "/api/v1/events/"+uuid.NewString()+"/retry", op, map[string]any{})
	require.Equal(t, http.StatusNotFound, a.Status, "an unknown event is refused at once, not a failed job: %s", a.Body)
	a = c.call("retry-route", http.MethodPost, "/api/v1/routes/billing/retry", op, map[string]any{"dry_run": true})
	require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
	a.decode(t, &job)
	job, _ = c.waitJob(viewer, job.ID.String(), 20*time.Second)
	require.Equal(t, "succeeded", job.State, job.Error)

	auditBefore := h.auditCount()
	a = c.call("requeue-dead-letters", http.MethodPost, "/api/v1/routes/billing/dead-letters/requeue", op, map[string]any{}, "Idempotency-Key", "requeue-1")
	require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
	a.decode(t, &job)
	job, _ = c.waitJob(viewer, job.ID.String(), 30*time.Second)
	require.Equal(t, "succeeded", job.State, job.Error)
	var requeued struct{ Moved int }
	require.NoError(t, json.Unmarshal(job.Result, &requeued))
	require.Equal(t, 2, requeued.Moved)
	// The key used for another request is refused, naming it.
	a = c.call("requeue-dead-letters", http.MethodPost, "/api/v1/routes/billing/dead-letters/requeue", op, map[string]any{"limit": 1}, "Idempotency-Key", "requeue-1")
	require.Equal(t, http.StatusUnprocessableEntity, a.Status, "%s", a.Body)
	a.decode(t, &e)
	require.Equal(t, "idempotency_key_reused", e.Code)
	// The same key again answers the same job and moves nothing.
	a = c.call("requeue-dead-letters", http.MethodPost, "/api/v1/routes/billing/dead-letters/requeue", op, map[string]any{}, "Idempotency-Key", "requeue-1")
	require.Equal(t, http.StatusAccepted, a.Status)
	var again ops.Job
	a.decode(t, &again)
	require.Equal(t, job.ID, again.ID, "an Idempotency-Key names one job")
	for _, id := range dead {
		h.dest.waitFor(20*time.Second, "requeued "+id+" delivered", func([]received) bool { return h.dest.successes()["billing "+id] >= 1 })
	}
	require.Equal(t, auditBefore+2, h.auditCount(), "two rows for the requeue (as it started, as it ended), none for its repeat")

	a = c.call("drop-delivered-dead-letters", http.MethodPost, "/api/v1/routes/billing/dead-letters/drop-delivered", op, map[string]any{})
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)

	// Replay one delivered event as a job; its key replays once.
	a = c.call("replay", http.MethodPost, "/api/v1/replay", op, map[string]any{"event_id": ids[0], "include_delivered": true}, "Idempotency-Key", "replay-1")
	require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
	a.decode(t, &job)
	job, _ = c.waitJob(viewer, job.ID.String(), 30*time.Second)
	require.Equal(t, "succeeded", job.State, job.Error)
	var replayed ops.ReplayResult
	require.NoError(t, json.Unmarshal(job.Result, &replayed))
	require.Equal(t, 1, replayed.ReplayedCount)
	a = c.call("replay", http.MethodPost, "/api/v1/replay", op, map[string]any{}, "Idempotency-Key", "replay-2")
	require.Equal(t, http.StatusBadRequest, a.Status, "an empty selection would replay everything")
	a.decode(t, &e)
	require.Equal(t, "invalid_request", e.Code)

	var resp *http.Response
	// Versions: none kept is 404; a kept one is shown, then reset (one
	// audit row), then gone. (A route with ordering drop_stale keeps them;
	// stale_test.go covers how they are made.)
	const versionPath = "/api/v1/routes/billing/versions?source=acme&resource=gid://shop/Order/1"
	require.Equal(t, http.StatusNotFound, c.call("get-version", http.MethodGet, versionPath, viewer, nil).Status)
	_, err := h.db.Pool().Exec(t.Context(), `INSERT INTO route_resource_versions (route, source, resource, version, event_id) VALUES ('billing', 'acme', 'gid://shop/Order/1', '7', $1)`, ids[0])
	require.NoError(t, err)
	a = c.call("get-version", http.MethodGet, versionPath, viewer, nil)
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	var v ops.Version
	a.decode(t, &v)
	require.Equal(t, "7", v.Version)
	auditBefore = h.auditCount()
	a = c.call("reset-version", http.MethodDelete, versionPath, admin, nil)
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	require.Equal(t, auditBefore+1, h.auditCount(), "the reset is audited in its transaction")
	require.Equal(t, http.StatusNotFound, c.call("get-version", http.MethodGet, versionPath, viewer, nil).Status)

	// Purge: refused without confirm; a dry run is a job that counts.
	a = c.call("purge", http.MethodPost, "/api/v1/purge", admin, map[string]any{"older_than": "30d"})
	require.Equal(t, http.StatusBadRequest, a.Status)
	a.decode(t, &e)
	require.Equal(t, "confirm_required", e.Code)
	a = c.call("purge", http.MethodPost, "/api/v1/purge", admin, map[string]any{"older_than": "30d", "dry_run": true})
	require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
	a.decode(t, &job)
	job, _ = c.waitJob(viewer, job.ID.String(), 20*time.Second)
	require.Equal(t, "succeeded", job.State, job.Error)
	a = c.call("list-jobs", http.MethodGet, "/api/v1/jobs?limit=2", viewer, nil)
	var jobs struct {
		Total      int64     `json:"total"`
		Items      []ops.Job `json:"items"`
		NextCursor string    `json:"next_cursor"`
	}
	a.decode(t, &jobs)
	require.GreaterOrEqual(t, jobs.Total, int64(5))
	require.Len(t, jobs.Items, 2)
	require.Equal(t, job.ID, jobs.Items[0].ID, "newest first")
	a = c.call("list-jobs", http.MethodGet, "/api/v1/jobs?limit=2&cursor="+jobs.NextCursor, viewer, nil)
	var jobs2 struct{ Items []ops.Job }
	a.decode(t, &jobs2)
	require.NotEqual(t, jobs.Items[1].ID, jobs2.Items[0].ID, "the next page starts after the cursor")

	// Tokens: a revoked token is refused within a second.
	a = c.call("create-token", http.MethodPost, "/api/v1/tokens", admin, map[string]any{"name": "short-lived", "role": "viewer", "expires_in": "1h"})
	require.Equal(t, http.StatusCreated, a.Status, "%s", a.Body)
	var tok ops.NewToken
	a.decode(t, &tok)
	require.Equal(t, http.StatusOK, c.call("list-routes", http.MethodGet, "/api/v1/routes", tok.Secret, nil).Status)
	a = c.call("create-token", http.MethodPost, "/api/v1/tokens", admin, map[string]any{"name": "short-lived", "role": "viewer"})
	require.Equal(t, http.StatusConflict, a.Status, "a name is one token")
	a = c.call("revoke-token", http.MethodDelete, "/api/v1/tokens/short-lived", admin, nil)
	require.Equal(t, http.StatusNoContent, a.Status, "%s", a.Body)
	revoked := time.Now()
	require.EventuallyWithT(t, func(col *assert.CollectT) {
		assert.Equal(col, http.StatusUnauthorized, c.try(col, "list-routes", http.MethodGet, "/api/v1/routes", tok.Secret, nil).Status)
	}, testenv.Scaled(time.Second), 10*time.Millisecond, "a revoked token is refused within a second")
	t.Logf("revoked token refused %s after the revoke answered", time.Since(revoked).Round(time.Millisecond))
	a = c.call("list-tokens", http.MethodGet, "/api/v1/tokens", admin, nil)
	var tokens struct {
		Total int64       `json:"total"`
		Items []ops.Token `json:"items"`
	}
	a.decode(t, &tokens)
	i := slices.IndexFunc(tokens.Items, func(t ops.Token) bool { return t.Name == "short-lived" })
	require.GreaterOrEqual(t, i, 0)
	require.NotNil(t, tokens.Items[i].RevokedAt)
	require.NotNil(t, tokens.Items[i].LastUsedAt, "last used is kept")
	require.NotContains(t, string(a.Body), tok.Secret, "a listing never shows a secret")

	// A route made at run time: made, read, changed, its secret rotated,
	// deleted; each change audited.
	a = c.call("create-route", http.MethodPost, "/api/v1/routes", admin,
		map[string]any{"name": "suite", "url": "http://127.0.0.1:9/", "bindings": []string{"acme.suite.*"}, "headers": map[string]string{"X-Token": "t0ken-value"}})
	require.Equal(t, http.StatusCreated, a.Status, "%s", a.Body)
	a = c.call("create-route", http.MethodPost, "/api/v1/routes", admin,
		map[string]any{"name": "orphan", "team": "no-such-team", "url": "http://127.0.0.1:9/", "bindings": []string{"acme.suite.*"}})
	require.Equal(t, http.StatusBadRequest, a.Status, "%s", a.Body)
	require.Contains(t, string(a.Body), "no such team")
	a = c.call("get-route", http.MethodGet, "/api/v1/routes/suite", viewer, nil)
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	require.NotContains(t, string(a.Body), "t0ken-value", "a header's value is not shown")
	var spec string
	require.NoError(t, h.db.Pool().QueryRow(t.Context(), `SELECT spec::text FROM routes WHERE name = 'suite'`).Scan(&spec))
	require.Contains(t, spec, "X-Token")
	require.NotContains(t, spec, "t0ken-value", "a header's value is sealed at rest")
	a = c.call("update-route", http.MethodPatch, "/api/v1/routes/suite", admin, map[string]any{"timeout": "3s"})
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	a = c.call("update-route", http.MethodPatch, "/api/v1/routes/suite", admin, map[string]any{"timeout": "3"})
	require.Equal(t, http.StatusBadRequest, a.Status, "a duration needs its unit: %s", a.Body)
	a = c.call("rotate-route-secret", http.MethodPost, "/api/v1/routes/suite/rotate-secret", admin, map[string]any{"overlap": "0s"})
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	a = c.call("delete-route", http.MethodDelete, "/api/v1/routes/suite", admin, nil)
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	// A deleted route's dead letters stay: read, dropped (none here).
	a = c.call("drop-dead-letters", http.MethodPost, "/api/v1/routes/suite/dead-letters/drop", op, map[string]any{"dry_run": true})
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	a = c.call("list-audit", http.MethodGet, "/api/v1/audit?target=suite", viewer, nil)
	var routeAudit struct {
		Items []ops.AuditEntry `json:"items"`
	}
	a.decode(t, &routeAudit)
	var routeActions []string
	for _, row := range routeAudit.Items {
		routeActions = append(routeActions, row.Action)
	}
	require.Equal(t, []string{"route.delete", "route.rotate_secret", "route.update", "route.create"}, routeActions)
	require.NotContains(t, string(a.Body), "t0ken-value", "the audit log holds no header value")
	// Each action the log holds is one its filter takes (issue 38).
	for _, action := range routeActions {
		a = c.call("list-audit", http.MethodGet, "/api/v1/audit?target=suite&action="+action, viewer, nil)
		require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
		var one struct{ Total int64 }
		a.decode(t, &one)
		require.EqualValues(t, 1, one.Total, action)
	}

	// The audit log: each change once, with its token's name; filtered.
	a = c.call("list-audit", http.MethodGet, "/api/v1/audit?actor=token:t-operator&limit=100", viewer, nil)
	var audit struct {
		Total int64            `json:"total"`
		Items []ops.AuditEntry `json:"items"`
	}
	a.decode(t, &audit)
	var actions []string
	for _, row := range audit.Items {
		require.Equal(t, "token:t-operator", row.Actor)
		actions = append(actions, row.Action+" "+row.Target+" "+row.Outcome)
	}
	slices.Reverse(actions)
	require.Equal(t, []string{"route.pause billing ok", "route.resume billing ok", "dead.requeue billing started", "dead.requeue billing ok",
		"dead.drop billing started", "dead.drop billing ok", "replay " + ids[0] + " started", "replay " + ids[0] + " ok"}, actions,
		"one row per change made with the operator token, two for one that spans transactions; dry runs and refusals change nothing")
	a = c.call("list-audit", http.MethodGet, "/api/v1/audit?action=token.revoke", viewer, nil)
	a.decode(t, &audit)
	require.Len(t, audit.Items, 1)
	require.Equal(t, "token:t-admin", audit.Items[0].Actor)
	require.Equal(t, "short-lived", audit.Items[0].Target)

	// The document itself is served without a token and is the committed
	// one.
	resp, err = http.Get(c.base + "/api/v1/openapi.json")
	require.NoError(t, err)
	served, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	committed, err := os.ReadFile(apiDocument)
	require.NoError(t, err)
	require.Equal(t, string(committed), string(served))

	// A route's rules tried on a stored event (docs/rules.md): a viewer
	// may, nothing changes (the audit rows above are all there are).
	a = c.call("test-route", http.MethodPost, "/api/v1/routes/test", viewer,
		map[string]any{"event_id": ids[0], "route": "billing", "filter": `source == "acme"`, "transform": `{"id": body.id}`})
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	var tried ops.RouteTestResult
	a.decode(t, &tried)
	require.True(t, tried.Matched)
	require.JSONEq(t, `{"id":"evt_api_0"}`, tried.Body)
	a = c.call("test-route", http.MethodPost, "/api/v1/routes/test", viewer, map[string]any{"event_id": ids[0], "filter": "bdy.x > 1"})
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	a.decode(t, &tried)
	require.NotNil(t, tried.FilterError)
	require.Equal(t, "compile", tried.FilterError.Phase)
	require.Equal(t, []rule.Problem{{Line: 1, Column: 1, Message: "undeclared reference to 'bdy'"}}, tried.FilterError.Problems)

	// Cancel and go on for the rest (issue 42): a replay by filter held
	// by a paused route waits on its first batch; cancelled, it ends
	// cancelled; run again once the route resumes, it ends succeeded.
	a = c.call("pause-route", http.MethodPost, "/api/v1/routes/billing/pause", op, nil)
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	a = c.call("replay", http.MethodPost, "/api/v1/replay", op, map[string]any{"include_delivered": true,
		"filter": map[string]any{"source": "acme", "since": "1h", "where": `body.type == "invoice.paid"`}})
	require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
	var held ops.Job
	a.decode(t, &held)
	require.EventuallyWithT(t, func(col *assert.CollectT) {
		a := c.try(col, "get-job", http.MethodGet, "/api/v1/jobs/"+held.ID.String(), viewer, nil)
		var j ops.Job
		a.decode(col, &j)
		var p ops.ReplayProgress
		assert.NoError(col, json.Unmarshal(j.Progress, &p))
		assert.Positive(col, p.Enqueued)
	}, testenv.Scaled(20*time.Second), 20*time.Millisecond, "the replay enqueues its first batch")
	a = c.call("cancel-job", http.MethodPost, "/api/v1/jobs/"+held.ID.String()+"/cancel", viewer, nil)
	require.Equal(t, http.StatusForbidden, a.Status, "a viewer cancels nothing: %s", a.Body)
	a = c.call("cancel-job", http.MethodPost, "/api/v1/jobs/"+held.ID.String()+"/cancel", op, nil)
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	held, _ = c.waitJob(viewer, held.ID.String(), 10*time.Second)
	require.Equal(t, "cancelled", held.State, held.Error)
	a = c.call("resume-route", http.MethodPost, "/api/v1/routes/billing/resume", op, nil)
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	a = c.call("resume-replay", http.MethodPost, "/api/v1/jobs/"+held.ID.String()+"/resume", op, nil)
	require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
	var rest ops.Job
	a.decode(t, &rest)
	rest, _ = c.waitJob(viewer, rest.ID.String(), 30*time.Second)
	require.Equal(t, "succeeded", rest.State, rest.Error)

	// Every operation of the document was reached with a 2xx.
	var missed []string
	for _, o := range documentOperations(t) {
		if !c.reached[o.ID] {
			missed = append(missed, o.ID)
		}
	}
	require.Empty(t, missed, "operations the suite did not reach")

	// Failed authentications from one address are limited (and a right
	// token passes still: TestFailedAuthenticationsNeverLockOutAValidToken).
	var last int
	for range 30 {
		last = c.call("list-routes", http.MethodGet, "/api/v1/routes", "wrong", nil).Status
		if last == http.StatusTooManyRequests {
			break
		}
	}
	require.Equal(t, http.StatusTooManyRequests, last, "failed attempts per client address are rate-limited")
}

// The curl examples of docs/api.md run as they are, against a receiver
// with the API: each ```sh block in turn, in one shell, failing on the
// first command that fails (curl -f fails on an HTTP error).
func TestAPIDocExamples(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("jq"); err != nil {
		t.Fatalf("the examples use jq: %v (scripts/services.sh installs it)", err)
	}
	h := newAPIHarness(t, 20)
	for i := range 3 {
		h.postSigned(fmt.Sprint("evt_doc_", i), "invoice.paid")
	}
	raw, err := os.ReadFile("../../docs/api.md")
	require.NoError(t, err)
	var script []string
	in := false
	blocks := 0
	for _, line := range strings.Split(string(raw), "\n") {
		switch {
		case line == "```sh":
			in = true
			blocks++
		case in && line == "```":
			in = false
		case in:
			script = append(script, line)
		}
	}
	require.GreaterOrEqual(t, blocks, 3)
	cmd := exec.CommandContext(t.Context(), "bash", "-euo", "pipefail", "-c", strings.Join(script, "\n"))
	cmd.Env = append(os.Environ(), "API="+h.api.base+"/api/v1", "TOKEN="+h.tokens["admin"])
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "docs/api.md examples:\n%s", out)
	require.Contains(t, string(out), `{"total":1,"items":[{"route":"billing"`, "the routes listing is a listing as every other")
	require.Contains(t, string(out), `"state": "succeeded"`, "the replay job ran to its end")
	require.Contains(t, string(out), ops.TokenPrefix, "the new token's secret")
	require.Contains(t, string(out), `"action":"route.pause"`, "the audit log names the pause")
}

// GET /api/v1/activity gives the last hour as every process counted it:
// the source's accepted and rejected requests, the route's delivered and
// failed attempts in the current minute.
func TestAPIActivity(t *testing.T) {
	t.Parallel()
	h := newAPIHarness(t, 1000)
	h.billingDown.Store(true)
	id := h.postSigned("evt_activity", "invoice.paid").ID
	h.waitPair(id, "billing", webhook.StateRetrying)
	h.billingDown.Store(false)
	h.waitPair(id, "billing", webhook.StateDelivered)
	bad := h.post("acme", []byte(`{"id":"evt_forged","type":"invoice.paid"}`), http.Header{"X-Acme-Signature": {"sha256=00"}})
	require.Equal(t, http.StatusUnauthorized, bad.status)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		a := h.api.try(c, "get-activity", http.MethodGet, "/api/v1/activity", h.tokens["viewer"], nil)
		require.Equal(c, http.StatusOK, a.Status)
		var act ops.Activity
		require.NoError(c, json.Unmarshal(a.Body, &act))
		billing := act.Routes["billing"]
		require.NotNil(c, billing)
		assert.EqualValues(c, 1, billing.Delivered)
		assert.EqualValues(c, 1, billing.Failed)
		require.Len(c, billing.Minutes, 60)
		last := billing.Minutes[len(billing.Minutes)-1].Delivered + billing.Minutes[len(billing.Minutes)-2].Delivered
		assert.EqualValues(c, 1, last, "counted in the current minute (or the one before, at a minute's turn)")
		require.Len(c, act.Sources, 1)
		assert.Equal(c, "acme", act.Sources[0].Source)
		assert.EqualValues(c, 1, act.Sources[0].Accepted)
		assert.EqualValues(c, 1, act.Sources[0].RejectedTotal())
	}, testenv.Scaled(15*time.Second), 100*time.Millisecond)
}
