package ops_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

const token = "admin-token-0123456789"

type api struct {
	h  http.Handler
	st *fakeStore
}

func newAPI(t *testing.T) *api {
	t.Helper()
	svc, st, _ := newService(t)
	st.drain = true
	return &api{h: ops.Handler(svc, token, zerolog.New(zerolog.NewTestWriter(t))), st: st}
}

// do sends a request with the token and returns the status and body.
func (a *api) do(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+token)
	w := httptest.NewRecorder()
	a.h.ServeHTTP(w, r)
	require.Equal(t, "application/json", w.Header().Get("Content-Type"))
	return w.Code, w.Body.String()
}

func TestAdminAPIWantsTheToken(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	for _, auth := range []string{"", "Bearer wrong", token, "Basic " + token} {
		r := httptest.NewRequest(http.MethodGet, "/api/events", nil)
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		a.h.ServeHTTP(w, r)
		require.Equal(t, http.StatusUnauthorized, w.Code, auth)
		require.Equal(t, `Bearer realm="hookrelay"`, w.Header().Get("WWW-Authenticate"))
		require.JSONEq(t, `{"error":"missing or invalid bearer token"}`, w.Body.String())
	}
}

func TestAdminAPIAnswers(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	dead := a.st.add("acme", "invoice.paid", map[string]string{"billing": "dead"})
	a.st.add("acme", "invoice.paid", map[string]string{"billing": "delivered"})
	many := `{"filter":{"state":"dead"}}`
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		has                      string
	}{
		{"a listing", "GET", "/api/events?source=acme&limit=1", "", 200, `"total":2,"shown":1`},
		{"a bad filter", "GET", "/api/events?state=lost", "", 400, "state: must be pending, retrying, delivered, dead or stale"},
		{"a bad time", "GET", "/api/events?since=yesterday", "", 400, "since: want RFC 3339"},
		{"a bad limit", "GET", "/api/events?limit=0", "", 400, "limit: must be a positive number"},
		{"an event", "GET", "/api/events/" + dead.id.String(), "", 200, `"state":"dead"`},
		{"not an id", "GET", "/api/events/nope", "", 400, "invalid event id"},
		{"no such event", "GET", "/api/events/" + strings.Replace(dead.id.String(), dead.id.String()[:8], "00000000", 1), "", 404, "no such event"},
		{"one event's dry run", "POST", "/api/events/" + dead.id.String() + "/replay?dry_run=true", "", 200, `"replayed_count":1`},
		{"one event, an unknown route", "POST", "/api/events/" + dead.id.String() + "/replay?route=legacy", "", 400, `route \"legacy\" is neither in the config nor made at run time`},
		{"a replay body with an unknown field", "POST", "/api/replay", `{"filter":{},"max_batch":5}`, 400, `invalid JSON body: json: unknown field \"max_batch\"`},
		{"a replay of everything", "POST", "/api/replay", `{"filter":{}}`, 400, "refusing to replay everything: give a filter"},
		{"a limit over the cap", "POST", "/api/replay", fmt.Sprintf(`{"filter":{"state":"dead","limit":%d}}`, ops.MaxAPIReplayEvents+1), 400, "filter.limit: the admin API replays at most"},
		{"a time that is neither", "POST", "/api/replay", `{"filter":{"state":"dead","since":"yesterday"}}`, 400, "since: want RFC 3339"},
		{"a bad cursor", "POST", "/api/replay", `{"filter":{"state":"dead"},"after":"x"}`, 400, "after: invalid cursor"},
		{"a filtered dry run", "POST", "/api/replay", `{"filter":{"state":"dead"},"dry_run":true}`, 200, `"dry_run":true`},
		{"a filtered replay", "POST", "/api/replay", many, 200, `"delivered":1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := a.do(t, tc.method, tc.path, tc.body)
			require.Equal(t, tc.status, status, body)
			require.Contains(t, body, tc.has)
		})
	}
}

// A selection bigger than one request may replay is refused with 422,
// naming the way on; a dry run of it is fine.
func TestAdminAPIReplayCap(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	for range ops.MaxAPIReplayEvents + 1 {
		a.st.add("acme", "invoice.paid", map[string]string{"billing": "dead"})
	}
	status, body := a.do(t, "POST", "/api/replay", `{"filter":{"state":"dead"}}`)
	require.Equal(t, http.StatusUnprocessableEntity, status)
	require.Contains(t, body, fmt.Sprintf("the filter selects %d events", ops.MaxAPIReplayEvents+1))
	require.Empty(t, a.st.calls(), "nothing enqueued")
	status, _ = a.do(t, "POST", "/api/replay", `{"filter":{"state":"dead"},"dry_run":true}`)
	require.Equal(t, http.StatusOK, status)
}

// A storage error is 503 without its cause (it goes to the log).
func TestAdminAPIStorageFailure(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	a.st.err = errors.New("dial tcp 10.0.0.7:5432: connection refused")
	for _, req := range [][3]string{
		{"GET", "/api/events", ""},
		{"GET", "/api/events/0193a3c0-0000-7000-8000-000000000001", ""},
		{"POST", "/api/replay", `{"filter":{"state":"dead"}}`},
	} {
		status, body := a.do(t, req[0], req[1], req[2])
		require.Equal(t, http.StatusServiceUnavailable, status, req[1])
		require.JSONEq(t, `{"error":"storage unavailable"}`, body)
	}
}

// Issue 18, item 7: an operator reads a resource's delivered version on a
// route and resets it (a forged or wrong version silenced the resource);
// a route not in the config, or no version kept, is 404.
func TestAdminAPIResourceVersions(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	a.st.versions = map[string]string{"billing shop gid://shopify/Order/1": "9999-12-31T23:59:59Z"}
	q := "/api/routes/billing/versions?source=shop&resource=gid://shopify/Order/1"
	status, body := a.do(t, http.MethodGet, q, "")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `"version":"9999-12-31T23:59:59Z"`)
	require.Contains(t, body, `"resource":"gid://shopify/Order/1"`)

	status, body = a.do(t, http.MethodDelete, q, "")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `"version":"9999-12-31T23:59:59Z"`, "what was forgotten")
	status, body = a.do(t, http.MethodGet, q, "")
	require.Equal(t, http.StatusNotFound, status, body)
	require.Contains(t, body, "no version of shop gid://shopify/Order/1 is kept on route billing")

	status, _ = a.do(t, http.MethodGet, "/api/routes/nowhere/versions?source=shop&resource=x", "")
	require.Equal(t, http.StatusNotFound, status)
	status, body = a.do(t, http.MethodGet, "/api/routes/billing/versions?source=shop", "")
	require.Equal(t, http.StatusBadRequest, status, body)
}
