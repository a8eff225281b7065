package app_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Issue 38, first-time user 6: the API lists the events of a sender's id
// (their idempotency key), of any source or of one, as the CLI's events
// list --key and the console's find box do.
func TestAPIEventsBySendersID(t *testing.T) {
	t.Parallel()
	h := newAPIHarness(t, 20)
	viewer := h.tokens["viewer"]
	id := h.postSigned("evt_key_1", "invoice.paid").ID
	h.postSigned("evt_key_2", "invoice.paid")
	var page struct {
		Total int64              `json:"total"`
		Items []ops.EventSummary `json:"items"`
	}
	for path, want := range map[string]int64{
		"/api/v1/events?key=evt_key_1":             1,
		"/api/v1/events?key=evt_key_1&source=acme": 1,
		"/api/v1/events?key=evt_key_1&source=demo": 0,
		"/api/v1/events?key=evt_nothing":           0,
		"/api/v1/events":                           2,
	} {
		a := h.api.call("list-events", http.MethodGet, path, viewer, nil)
		require.Equal(t, http.StatusOK, a.Status, "%s: %s", path, a.Body)
		page.Items = nil
		a.decode(t, &page)
		require.Equal(t, want, page.Total, path)
		require.Len(t, page.Items, int(want), path)
		if path == "/api/v1/events?key=evt_key_1" {
			require.Equal(t, id, page.Items[0].ID.String())
			require.Equal(t, "evt_key_1", page.Items[0].IdempotencyKey)
		}
	}
}

// consoleSession is a console client signed in with token (no browser:
// forms are posted as a browser posts them, same origin).
func consoleSession(t *testing.T, base, token string) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.PostForm(base+"/signin", url.Values{"token": {token}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "signed in")
	return c
}

// page GETs (or POSTs, with form) a console path and returns its status
// and body.
func page(t *testing.T, c *http.Client, method, u string, form url.Values) (int, string) {
	t.Helper()
	var resp *http.Response
	var err error
	if method == http.MethodPost {
		resp, err = c.PostForm(u, form)
	} else {
		resp, err = c.Get(u)
	}
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// Issue 38, first-time user 7: a route deleted with --dead-letter retires;
// its dead-letter queue stays for the operator, and the API and the
// console read it, refuse to requeue it (there is no queue to go back
// to, 409 saying what to do) and drop it, audited.
func TestRetiredRouteDeadLettersThroughTheAPIAndConsole(t *testing.T) {
	t.Parallel()
	h := newRuntimeHarness(t)
	dest := newDestination(t, func(http.ResponseWriter, *http.Request, []byte, string, int) int {
		return http.StatusServiceUnavailable
	})
	h.startDispatcher(app.DispatcherOptions{})
	h.create("flaky", map[string]any{"url": dest.url("flaky"), "bindings": []string{"acme.invoice.*"}, "max_attempts": 1000, "circuit_failures": 0})
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Positive(c, h.consumers(c, h.names.RouteQueue("flaky"))) }, testenv.Scaled(5*time.Second), 20*time.Millisecond)
	for i := range 3 {
		h.postSigned(fmt.Sprintf("retired-%d", i), "invoice.paid")
	}
	dest.waitFor(30*time.Second, "every event tried", func(rs []received) bool { return len(rs) >= 3 })
	a := h.api.call("delete-route", http.MethodDelete, "/api/v1/routes/flaky?disposal=dead_letter", adminToken, nil)
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var retired bool
		require.NoError(c, h.db.Pool().QueryRow(context.Background(), `SELECT retired_at IS NOT NULL FROM routes WHERE name = 'flaky'`).Scan(&retired))
		assert.True(c, retired, "retired")
		assert.Equal(c, -1, h.consumers(c, h.names.RouteQueue("flaky")), "its queue deleted")
	}, testenv.Scaled(30*time.Second), 50*time.Millisecond, "the route retired")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 3, h.countReady(c, h.names.DeadQueue("flaky")))
	}, testenv.Scaled(5*time.Second), 20*time.Millisecond, "its backlog dead-lettered")

	// The API reads them, refuses the requeue, drops them.
	a = h.api.call("list-dead-letters", http.MethodGet, "/api/v1/routes/flaky/dead-letters", adminToken, nil)
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	var letters struct {
		Total int64            `json:"total"`
		Items []ops.DeadLetter `json:"items"`
	}
	a.decode(t, &letters)
	require.EqualValues(t, 3, letters.Total)
	require.Len(t, letters.Items, 3)
	for _, l := range letters.Items {
		require.Equal(t, "dead", l.State)
		require.Equal(t, "route_deleted", l.Reason)
	}
	a = h.api.call("requeue-dead-letters", http.MethodPost, "/api/v1/routes/flaky/dead-letters/requeue", adminToken, map[string]any{})
	require.Equal(t, http.StatusConflict, a.Status, "%s", a.Body)
	require.Contains(t, string(a.Body), "route flaky was deleted: its dead letters have no queue to go back to")
	a = h.api.call("drop-dead-letters", http.MethodPost, "/api/v1/routes/billing/dead-letters/drop", adminToken, map[string]any{})
	require.Equal(t, http.StatusConflict, a.Status, "a route there is keeps its letters: %s", a.Body)
	a = h.api.call("drop-dead-letters", http.MethodPost, "/api/v1/routes/flaky/dead-letters/drop", adminToken, map[string]any{"dry_run": true})
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	var drop ops.DeadDropResult
	a.decode(t, &drop)
	require.Equal(t, ops.DeadDropResult{Queue: h.names.DeadQueue("flaky"), Total: 3, Read: 3, Dropped: 3, DryRun: true}, drop)
	// The dry run read the letters and returned them: a quorum queue
	// counts a returned letter ready once its log has applied the return.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 3, h.countReady(c, h.names.DeadQueue("flaky")))
	}, testenv.Scaled(5*time.Second), 20*time.Millisecond, "the dry run dropped nothing")

	// The console shows them on the route's dead letters page, without
	// requeue buttons, and drops them.
	console := consoleSession(t, h.api.base, adminToken)
	status, body := page(t, console, http.MethodGet, h.api.base+"/", nil)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `flaky <small>(deleted)</small>`)
	require.Contains(t, body, `href="/routes/flaky/dead-letters"`)
	status, body = page(t, console, http.MethodGet, h.api.base+"/routes/flaky/dead-letters", nil)
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, "Route flaky was deleted: its queue is gone, so these letters cannot be requeued.")
	require.Contains(t, body, "Drop all 3")
	require.NotContains(t, body, "Requeue")
	status, body = page(t, console, http.MethodPost, h.api.base+"/routes/flaky/dead-letters/requeue", url.Values{"all": {"1"}})
	require.Equal(t, http.StatusConflict, status, body)
	status, _ = page(t, console, http.MethodPost, h.api.base+"/routes/flaky/dead-letters/drop", url.Values{})
	require.Equal(t, http.StatusSeeOther, status)
	require.Equal(t, 0, h.countReady(t, h.names.DeadQueue("flaky")))
	status, body = page(t, console, http.MethodGet, h.api.base+"/routes/flaky/dead-letters", nil)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "3 letter(s) dropped of 3 read")

	a = h.api.call("list-audit", http.MethodGet, "/api/v1/audit?action=dead.drop&target=flaky", adminToken, nil)
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	require.Contains(t, string(a.Body), `"all":true`)
	require.Contains(t, string(a.Body), `"dropped":3`)
}
