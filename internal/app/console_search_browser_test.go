package app_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Issue 42: the console's events page searches by content (no window
// given: the last 24 hours, said under the results), and "Replay these"
// goes through the replay page's preview to a job that replays exactly
// what the search found.
func TestConsoleSearchesByContentAndReplaysTheResults(t *testing.T) {
	t.Parallel()
	h := newAPIHarness(t, 1000)
	base := h.api.base
	ctx := browser(t)
	signIn(t, ctx, base, h.tokens["operator"])

	h.billingDown.Store(true)
	var ids []string
	for i := range 3 {
		ids = append(ids, h.postSigned(fmt.Sprint("evt_search_", i), "invoice.paid").ID)
	}
	for _, id := range ids {
		h.waitPair(id, "billing", webhook.StateDead)
	}
	h.billingDown.Store(false)

	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/events"),
		chromedp.WaitVisible(chromedp.CSS(`input[name=where]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=where]`), `body.id == "evt_search_1"`),
		chromedp.Submit(chromedp.CSS(`input[name=where]`)),
		chromedp.WaitVisible(chromedp.CSS(`#search-window`)),
	))
	require.Equal(t, 1, count(t, ctx, "#events tbody tr"), "the one event whose body says so")
	require.Contains(t, text(t, ctx, "#events tbody tr"), "evt_search_1")
	window := text(t, ctx, "#search-window")
	require.Contains(t, window, "the last 24 hours (no Since given)")
	require.Contains(t, window, "through the index")
	screenshot(t, ctx, "console-search")

	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#replay-these`)),
		chromedp.WaitVisible(chromedp.CSS(`#preview`)),
	))
	require.Equal(t, "1", text(t, ctx, "#would-replay"), "the preview counts what the search found")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#preview form button`)),
		chromedp.WaitVisible(chromedp.CSS(`#job-state`)),
	))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, chromedp.Do(ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`#job-state`))))
		st, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#job-state`)))
		require.NoError(c, err)
		require.Equal(c, "succeeded", strings.TrimSpace(st))
	}, testenv.Scaled(60*time.Second), 250*time.Millisecond)
	h.dest.waitFor(20*time.Second, "the found event replayed", func([]received) bool { return h.dest.successes()["billing "+ids[1]] == 1 })
	for _, id := range []string{ids[0], ids[2]} {
		require.Zero(t, h.dest.successes()["billing "+id], "an event the search did not find is not replayed")
	}
}
