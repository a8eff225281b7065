package app_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/api"
	"github.com/hookrelay/hookrelay/internal/console"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// apiActions says which ops action each operation of the API is: the
// test's own word, so a front end that maps an operation to the wrong
// action fails here. A new operation fails the test until it has a row.
var apiActions = map[string]ops.Action{
	"list-routes": ops.ActionRead, "get-route": ops.ActionRead, "get-activity": ops.ActionRead, "get-version": ops.ActionRead,
	"list-events": ops.ActionRead, "get-event": ops.ActionRead, "list-dead-letters": ops.ActionRead, "get-job": ops.ActionRead,
	"list-jobs": ops.ActionRead, "list-audit": ops.ActionRead, "list-tokens": ops.ActionTokenList,
	"pause-route": ops.ActionRoutePause, "resume-route": ops.ActionRouteResume,
	"retry-route": ops.ActionRetry, "retry-event": ops.ActionRetry, "replay": ops.ActionReplay,
	"requeue-dead-letters": ops.ActionDeadRequeue, "drop-delivered-dead-letters": ops.ActionDeadDrop,
	"reset-version": ops.ActionVersionReset, "purge": ops.ActionPurge,
	"create-token": ops.ActionTokenCreate, "revoke-token": ops.ActionTokenRevoke,
	"create-route": ops.ActionRouteCreate, "update-route": ops.ActionRouteUpdate,
	"rotate-route-secret": ops.ActionRouteRotateSecret, "delete-route": ops.ActionRouteDelete,
	"drop-dead-letters": ops.ActionDeadDrop, "test-route": ops.ActionRead,
	"cancel-job": ops.ActionJobCancel, "resume-replay": ops.ActionReplay,
	"listen": ops.ActionRead,
}

// consoleActions is apiActions for the console's pages and actions.
var consoleActions = map[string]ops.Action{
	"GET /{$}": ops.ActionRead, "GET /events": ops.ActionRead, "GET /events/{id}": ops.ActionRead,
	"GET /routes/{route}": ops.ActionRead, "GET /routes/{route}/dead-letters": ops.ActionRead,
	"GET /replay": ops.ActionRead, "GET /jobs/{id}": ops.ActionRead, "GET /audit": ops.ActionRead,
	"POST /events/{id}/retry": ops.ActionRetry, "POST /events/{id}/replay": ops.ActionReplay, "POST /replay": ops.ActionReplay,
	"POST /routes/{route}/pause": ops.ActionRoutePause, "POST /routes/{route}/resume": ops.ActionRouteResume,
	"GET /routes/new": ops.ActionRouteCreate, "POST /routes": ops.ActionRouteCreate,
	"POST /routes/{route}/update": ops.ActionRouteUpdate, "POST /routes/{route}/rotate-secret": ops.ActionRouteRotateSecret,
	"POST /routes/{route}/delete":                      ops.ActionRouteDelete,
	"POST /routes/{route}/versions/reset":              ops.ActionVersionReset,
	"POST /routes/{route}/dead-letters/requeue":        ops.ActionDeadRequeue,
	"POST /routes/{route}/dead-letters/drop-delivered": ops.ActionDeadDrop,
	"POST /routes/{route}/dead-letters/drop":           ops.ActionDeadDrop,
	"POST /routes/{route}/test":                        ops.ActionRead,
	"POST /jobs/{id}/cancel":                           ops.ActionJobCancel,
	"POST /jobs/{id}/resume":                           ops.ActionReplay,
}

// Issue 38, security 6: ops owns each action's role, and the API and the
// console ask it. Every operation of the API documents (and, by
// TestAPIRolesPerOperation, enforces) the role ops gives its action, and
// is that action in the router; every page and action of the console,
// tried with a signed-in token of each role, is refused (403) exactly to
// the roles ops does not allow its action. So resetting a resource
// version needs the same role in both, as everything else does.
func TestConsoleAndAPIAskOpsForEachActionsRole(t *testing.T) {
	t.Parallel()
	// The API: the committed document and the router.
	router := map[string]ops.Action{}
	for _, o := range api.New(http.NewServeMux(), &ops.Service{}, api.Options{}, zerolog.Nop()).OpenAPI().Paths {
		for _, op := range []*huma.Operation{o.Get, o.Post, o.Put, o.Patch, o.Delete} {
			if op != nil {
				router[op.OperationID] = api.ActionOf(op)
			}
		}
	}
	for _, op := range documentOperations(t) {
		want, ok := apiActions[op.ID]
		require.True(t, ok, "operation %s: say which ops action it is in apiActions", op.ID)
		assert.Equal(t, ops.RoleOf(want), op.Role, "%s (%s) documents the role ops gives %s", op.ID, op.Path, want)
		assert.Equal(t, want, router[op.ID], "%s is ops action %s in the router", op.ID, want)
	}

	// The console: each page with each role's session.
	h := newAPIHarness(t, 1000)
	event := h.postSigned("evt_roles_console", "invoice.paid").ID
	base := h.api.base
	sessions := map[string]*http.Client{}
	for _, role := range ops.Roles {
		jar, err := cookiejar.New(nil)
		require.NoError(t, err)
		c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := c.PostForm(base+"/signin", url.Values{"token": {h.tokens[role]}})
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, "%s signs in", role)
		sessions[role] = c
	}
	tried := 0
	for _, p := range console.Pages {
		want, ok := consoleActions[p.Pattern]
		require.True(t, ok, "console page %s: say which ops action it is in consoleActions", p.Pattern)
		method, path, _ := strings.Cut(p.Pattern, " ")
		id := event
		if strings.HasPrefix(path, "/jobs/") {
			id = uuid.NewString() // a job's id: none, so an allowed role reads 404
		}
		path = strings.NewReplacer("{$}", "", "{route}", "billing", "{id}", id).Replace(path)
		for _, role := range ops.Roles {
			form := url.Values{"route": {"billing"}, "source": {"acme"}, "resource": {"r1"}, "reason": {"roles"}}
			req, err := http.NewRequest(method, base+path, strings.NewReader(form.Encode()))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			resp, err := sessions[role].Do(req)
			require.NoError(t, err)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if ops.RoleAllows(role, ops.RoleOf(want)) {
				assert.NotContains(t, []int{http.StatusUnauthorized, http.StatusForbidden}, resp.StatusCode,
					"%s as %s: ops allows %s to %s: %.300s", p.Pattern, role, want, role, body)
				continue
			}
			assert.Equal(t, http.StatusForbidden, resp.StatusCode, "%s as %s: ops gives %s role %s: %.300s", p.Pattern, role, want, ops.RoleOf(want), body)
			assert.Contains(t, string(body), "this needs role "+ops.RoleOf(want))
		}
		tried++
	}
	require.Equal(t, len(consoleActions), tried, "every page of the table is served")
}
