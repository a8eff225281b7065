package app_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// waitJobDone reloads a job's page until the job ended, and requires it
// succeeded.
func waitJobDone(t *testing.T, ctx context.Context) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, chromedp.Do(ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`#job-state`))))
		st, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#job-state`)))
		require.NoError(c, err)
		require.Equal(c, "succeeded", strings.TrimSpace(st))
	}, testenv.Scaled(30*time.Second), 250*time.Millisecond)
}

// Issue 38, first-time user 5 and 8, in a browser: the event page's
// "Replay now" leaves delivered pairs alone unless told (unticked), each
// delivery has its own actions (retry a retrying one, replay one, requeue
// a dead one's letter) and a link to its route's dead letters; a page
// that is not there is a page of the console (its frame, 404); the replay
// form chooses the route from those the user sees and its preview lists
// the events; the new-route form lines its fields up; a deleted route's
// dead letters are read and dropped.
func TestConsoleEventActionsAndForms(t *testing.T) {
	t.Parallel()
	h := newAPIHarness(t, 1000)
	base := h.api.base
	ctx := browser(t)
	do := func(actions ...chromedp.Action[chromedp.Void]) error { return chromedp.Do(ctx, actions...) }
	signIn(t, ctx, base, h.tokens["operator"])

	// A dead pair: its delivery offers its actions and its dead letters.
	h.billingDown.Store(true)
	dead := h.postSigned("evt_actions_dead", "invoice.paid").ID
	h.waitPair(dead, "billing", webhook.StateDead)
	amqptest.WaitCount(t, h.ch, h.names.DeadQueue("billing"), 1, 10*time.Second)
	h.billingDown.Store(false)
	require.NoError(t, do(chromedp.Navigate(base+"/events/"+dead), chromedp.WaitVisible(chromedp.CSS(`section.delivery`))))
	sec := `section.delivery[data-route="billing"] `
	checked, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector('#replay-event input[name=include_delivered]').checked`))
	require.NoError(t, err)
	require.False(t, checked, `"also where delivered or stale" is unticked by default`)
	require.Equal(t, 1, count(t, ctx, sec+`a[href="/routes/billing/dead-letters"]`), "a link to the route's dead letters")
	require.Equal(t, 1, count(t, ctx, sec+`form.requeue-letter button`), "requeue its dead letter")
	require.Equal(t, 1, count(t, ctx, sec+`form.replay-delivery button`), "replay it to its route")
	require.Zero(t, count(t, ctx, sec+`form.retry-delivery button`), "a dead pair is not retrying")
	screenshot(t, ctx, "console-event-actions")

	// Requeue its letter from the event page: a job, the pair delivered
	// once, the letter gone.
	require.NoError(t, do(chromedp.Click(chromedp.CSS(sec+`form.requeue-letter button`)), chromedp.WaitVisible(chromedp.CSS(`#job-state`))))
	waitJobDone(t, ctx)
	h.dest.waitFor(20*time.Second, "the requeued letter delivered", func([]received) bool { return h.dest.successes()["billing "+dead] == 1 })
	amqptest.WaitCount(t, h.ch, h.names.DeadQueue("billing"), 0, 10*time.Second)

	// Now delivered: "Replay now" with the box left as it is skips it;
	// the delivery's own "Replay" sends it once more.
	require.NoError(t, do(chromedp.Navigate(base+"/events/"+dead), chromedp.WaitVisible(chromedp.CSS(`section.delivery`))))
	require.Equal(t, "delivered", text(t, ctx, sec+`.state`))
	require.NoError(t, do(chromedp.Click(chromedp.CSS(`#replay-event button`))))
	waitText(t, ctx, ".flash", "0 pair(s) replayed; billing skipped")
	require.NoError(t, do(chromedp.Click(chromedp.CSS(sec+`form.replay-delivery button`))))
	waitText(t, ctx, ".flash", "1 pair(s) replayed")
	h.dest.waitFor(20*time.Second, "the replayed event delivered", func([]received) bool { return h.dest.successes()["billing "+dead] == 2 })

	// A page that is not there is a page of the console: its frame, 404.
	for _, path := range []string{"/events/" + uuid.NewString(), "/no/such/page", "/routes/nosuch/dead-letters"} {
		resp, err := sessionClient(t, ctx, base).Get(base + path)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusNotFound, resp.StatusCode, path)
		require.NoError(t, do(chromedp.Navigate(base+path), chromedp.WaitVisible(chromedp.CSS(`main h1`))))
		require.Equal(t, "Not found", text(t, ctx, "main h1"), path)
		require.Equal(t, 1, count(t, ctx, `header nav a[href="/events"]`), "%s has the console's frame", path)
	}
	screenshot(t, ctx, "console-not-found")

	// The replay form: the route is chosen among those the user sees; the
	// preview lists the events it would replay.
	var ids []string
	h.billingDown.Store(true)
	for i := range 3 {
		ids = append(ids, h.postSigned(fmt.Sprint("evt_preview_", i), "invoice.paid").ID)
	}
	for _, id := range ids {
		h.waitPair(id, "billing", webhook.StateDead)
	}
	h.billingDown.Store(false)
	require.NoError(t, do(chromedp.Navigate(base+"/replay"), chromedp.WaitVisible(chromedp.CSS(`select[name=route]`))))
	options, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("select[name=route] option")).map(o => o.value)`))
	require.NoError(t, err)
	require.Equal(t, []string{"", "billing"}, options)
	require.NoError(t, do(
		chromedp.SetValue(chromedp.CSS(`select[name=route]`), "billing"),
		chromedp.SetValue(chromedp.CSS(`select[name=state]`), "dead"),
		chromedp.SendKeys(chromedp.CSS(`input[name=since]`), "1h"),
		chromedp.Click(chromedp.CSS(`button[name=preview]`)),
		chromedp.WaitVisible(chromedp.CSS(`#preview`)),
	))
	require.Equal(t, "3", text(t, ctx, "#would-replay"))
	listed, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#preview-events tbody tr")).map(r => r.dataset.event)`))
	require.NoError(t, err)
	require.ElementsMatch(t, ids, listed, "the preview names the events")
	screenshot(t, ctx, "console-replay-preview")

}

// Issue 38, first-time user 8 and 7, in a browser: the new-route form
// lines its fields up (one column of labels, one of fields, one field a
// row); a deleted route's dead letters are read from the overview, not
// offered for requeue, and dropped.
func TestConsoleNewRouteFormAndDeletedRouteLetters(t *testing.T) {
	t.Parallel()
	h := newAPIHarness(t, 1000)
	base := h.api.base
	ctx := browser(t)
	do := func(actions ...chromedp.Action[chromedp.Void]) error { return chromedp.Do(ctx, actions...) }
	signIn(t, ctx, base, h.tokens["admin"])

	// The new-route form: one column of labels, one of fields.
	require.NoError(t, do(chromedp.Navigate(base+"/routes/new"), chromedp.WaitVisible(chromedp.CSS(`#new-route`))))
	lefts, err := chromedp.Run(ctx, chromedp.Evaluate[[]int](`Array.from(document.querySelectorAll("#new-route input")).map(i => Math.round(i.getBoundingClientRect().left))`))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(lefts), 7)
	for _, l := range lefts {
		require.Equal(t, lefts[0], l, "the fields start at one left edge: %v", lefts)
	}
	tops, err := chromedp.Run(ctx, chromedp.Evaluate[[]int](`Array.from(document.querySelectorAll("#new-route input")).map(i => Math.round(i.getBoundingClientRect().top))`))
	require.NoError(t, err)
	for i := 1; i < len(tops); i++ {
		require.Greater(t, tops[i], tops[i-1], "one field a row: %v", tops)
	}
	screenshot(t, ctx, "console-new-route")
	// On a phone, one column: nothing wider than the screen.
	require.NoError(t, do(chromedp.EmulateViewport(390, 844), chromedp.Navigate(base+"/routes/new"), chromedp.WaitVisible(chromedp.CSS(`#new-route`))))
	width, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth`))
	require.NoError(t, err)
	require.LessOrEqual(t, width, 390, "/routes/new is %d px wide at 390", width)
	screenshot(t, ctx, "console-new-route-390px")
	require.NoError(t, do(chromedp.EmulateViewport(1280, 900)))

	// A deleted route's dead letters: read, not requeued, dropped.
	a := h.api.call("create-route", http.MethodPost, "/api/v1/routes", adminToken,
		map[string]any{"name": "retiring", "url": "http://127.0.0.1:9/", "bindings": []string{"acme.order.*"}, "max_attempts": 1000, "circuit_failures": 0})
	require.Equal(t, http.StatusCreated, a.Status, "%s", a.Body)
	conn := amqptest.Dial(t)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ch, err := conn.Channel() // a passive declare of a queue not there yet closes its channel
		require.NoError(c, err)
		defer func() { _ = ch.Close() }() // closed already when the queue is not there
		q, err := ch.QueueDeclarePassive(h.names.RouteQueue("retiring"), true, false, false, false, nil)
		require.NoError(c, err)
		assert.Positive(c, q.Consumers)
	}, testenv.Scaled(10*time.Second), 50*time.Millisecond, "the dispatcher consumes the new route")
	gone := h.postSigned("evt_retiring", "order.paid").ID
	h.waitPair(gone, "retiring", webhook.StateRetrying)
	a = h.api.call("delete-route", http.MethodDelete, "/api/v1/routes/retiring?disposal=dead_letter", adminToken, nil)
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	h.waitPair(gone, "retiring", webhook.StateDead)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, do(chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(`#routes`))))
		th, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#routes tr[data-route="retiring"] th`)))
		require.NoError(c, err)
		require.Equal(c, "retiring (deleted)", strings.TrimSpace(th))
	}, testenv.Scaled(30*time.Second), 250*time.Millisecond, "the overview lists the deleted route once it retired")
	require.NoError(t, do(chromedp.Click(chromedp.CSS(`#routes tr[data-route="retiring"] a[href$="/dead-letters"]`)), chromedp.WaitVisible(chromedp.CSS(`#letters`))))
	require.Contains(t, text(t, ctx, "#deleted-note"), "cannot be requeued")
	require.Equal(t, 1, count(t, ctx, "#letters tbody tr"))
	require.Zero(t, count(t, ctx, `form[action$="/requeue"]`))
	screenshot(t, ctx, "console-dead-letters-deleted-route")
	require.NoError(t, do(chromedp.Click(chromedp.CSS(`#drop-all button`))))
	waitText(t, ctx, ".flash", "1 letter(s) dropped of 1 read")
	require.Zero(t, count(t, ctx, "#letters tbody tr"))
}
