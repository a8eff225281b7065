package app_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Issue 39: the console's route forms take a filter and a
// transformation; one that does not compile is refused with its line and
// column and nothing is made; the route page shows the rules, and tries
// them (or others typed in) on a stored event, showing what a delivery
// would send, without saving anything.
func TestConsoleRouteRules(t *testing.T) {
	t.Parallel()
	h := newAPIHarness(t, 1000)
	base := h.api.base
	ctx := browser(t)
	do := func(actions ...chromedp.Action[chromedp.Void]) error { return chromedp.Do(ctx, actions...) }
	signIn(t, ctx, base, h.tokens["admin"])

	// setText sets a field's value (a textarea too, which SetValue does
	// not take).
	setText := func(sel, value string) chromedp.Action[chromedp.Void] {
		js, err := json.Marshal(value)
		require.NoError(t, err)
		return chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.querySelector(%q).value = %s; undefined`, sel, js))
	}
	fill := func(filter, transform string) {
		t.Helper()
		require.NoError(t, do(
			chromedp.Navigate(base+"/routes/new"), chromedp.WaitVisible(chromedp.CSS(`#new-route`)),
			chromedp.SendKeys(chromedp.CSS(`#nr-name`), "ledger"),
			chromedp.SendKeys(chromedp.CSS(`#nr-url`), h.dest.url("ledger")),
			chromedp.SendKeys(chromedp.CSS(`#nr-bindings`), "acme.invoice.*"),
			setText(`#nr-filter`, filter),
			setText(`#nr-transform`, transform),
			chromedp.Submit(chromedp.CSS(`#nr-name`)),
		))
	}
	fill("body.amount >\n  bdy.limit", "")
	waitText(t, ctx, "main", "filter: 2:3: undeclared reference to 'bdy'")
	screenshot(t, ctx, "console-route-rule-refused")
	a := h.api.call("get-route", http.MethodGet, "/api/v1/routes/ledger", adminToken, nil)
	require.Equal(t, http.StatusNotFound, a.Status, "nothing was made")

	fill("body.amount > 10", `{"id": body.id, "cents": body.amount}`)
	waitText(t, ctx, "#secret", "whsec_")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var d ops.RouteDetail
		h.api.try(c, "get-route", http.MethodGet, "/api/v1/routes/ledger", adminToken, nil).decode(c, &d)
		assert.Equal(c, "body.amount > 10", d.Settings.Filter)
	}, testenv.Scaled(5*time.Second), 50*time.Millisecond)
	id := h.postSigned("evt_console_rules", "invoice.paid").ID
	h.waitPair(id, "ledger", webhook.StateDelivered)

	require.NoError(t, do(chromedp.Navigate(base+"/routes/ledger"), chromedp.WaitVisible(chromedp.CSS(`#test-rules`))))
	require.Equal(t, "body.amount > 10", text(t, ctx, "#settings .filter"))
	require.NoError(t, do(chromedp.SendKeys(chromedp.CSS(`#tr-event`), id), chromedp.Submit(chromedp.CSS(`#tr-event`))))
	waitText(t, ctx, "#test-result .verdict", "Filter: true")
	require.Equal(t, `{"cents":42,"id":"evt_console_rules"}`, text(t, ctx, "#test-result pre.body"), "what the delivery sent")
	var sent string
	for _, q := range h.dest.snapshot() {
		if q.route == "ledger" {
			sent = string(q.body)
		}
	}
	require.Equal(t, `{"cents":42,"id":"evt_console_rules"}`, sent)
	screenshot(t, ctx, "console-route-try-rules")

	// Another filter, tried: the route would not take the event; the
	// route keeps its own.
	require.NoError(t, do(setText(`#tr-filter`, "body.amount > 100"), chromedp.Submit(chromedp.CSS(`#tr-event`))))
	waitText(t, ctx, "#test-result .verdict", "Filter: false")
	require.NoError(t, do(setText(`#tr-filter`, "body.amount >"), chromedp.Submit(chromedp.CSS(`#tr-event`))))
	waitText(t, ctx, "#test-result .verdict", "does not compile")
	var d ops.RouteDetail
	h.api.call("get-route", http.MethodGet, "/api/v1/routes/ledger", adminToken, nil).decode(t, &d)
	require.Equal(t, "body.amount > 10", d.Settings.Filter)
	require.Equal(t, int64(1), d.Version, "trying changes nothing")

	// An event the filter does not take is counted in the route's last
	// hour: the listing (API, CLI) and the route page say so.
	small := []byte(`{"id":"evt_small","type":"invoice.paid","amount":5}`)
	require.Equal(t, http.StatusOK, h.post("acme", small, http.Header{"X-Acme-Signature": {sign(acmeSecret, small)}}).status)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var list struct{ Items []ops.RouteSummary }
		h.api.try(c, "list-routes", http.MethodGet, "/api/v1/routes", adminToken, nil).decode(c, &list)
		for _, r := range list.Items {
			if r.Route == "ledger" {
				assert.True(c, r.Filtered)
				if assert.NotNil(c, r.FilteredLastHour) {
					assert.Equal(c, int64(1), *r.FilteredLastHour)
				}
				return
			}
		}
		assert.Fail(c, "ledger not listed")
	}, testenv.Scaled(10*time.Second), 100*time.Millisecond)
	require.NoError(t, do(chromedp.Navigate(base+"/routes/ledger"), chromedp.WaitVisible(chromedp.CSS(`#route-facts`))))
	require.Contains(t, text(t, ctx, "#route-facts .filtered"), "1 filtered out")
}
