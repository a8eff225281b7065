package app_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/console"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// waitPair waits until the pair (event id, route) is in state.
func (h *harness) waitPair(id, route string, state webhook.DeliveryState) {
	h.t.Helper()
	require.EventuallyWithT(h.t, func(c *assert.CollectT) {
		st, _, err := h.db.DeliveryGet(context.Background(), uuid.MustParse(id), route)
		require.NoError(c, err)
		require.Equal(c, state, st, "%s on %s", id, route)
	}, testenv.Scaled(20*time.Second), 20*time.Millisecond)
}

// browser starts Debian's chromium headless for the test (scripts/test.sh
// installs it: scripts/services.sh --browser) and returns a tab.
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("chromium is required in CI (scripts/services.sh --browser installs it): %v", err)
		}
		t.Skip("no chromium: scripts/services.sh --browser installs it")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(cancel)
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(cancelTimeout)
	require.NoError(t, chromedp.Do(ctx)) // starts the browser
	return ctx
}

// screenshot saves the page as name.png in the screenshots folder
// ($HOOKRELAY_SCREENSHOTS, else hookrelay-screenshots in the temp dir) and
// logs its path.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("HOOKRELAY_SCREENSHOTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "hookrelay-screenshots")
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	require.NoError(t, err)
	path := filepath.Join(dir, name+".png")
	require.NoError(t, os.WriteFile(path, png, 0o644))
	t.Logf("screenshot: %s", path)
}

// signIn signs in with token in the browser.
func signIn(t *testing.T, ctx context.Context, base, token string) {
	t.Helper()
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/signin"),
		chromedp.WaitVisible(chromedp.CSS(`#token`)),
		chromedp.SendKeys(chromedp.CSS(`#token`), token),
		chromedp.Submit(chromedp.CSS(`#token`)),
	))
	// The answer: signed in (the header names who), or refused. The page
	// the token was typed in shows neither.
	require.Eventually(t, func() bool {
		done, err := chromedp.Run(ctx, chromedp.Evaluate[bool](
			`document.readyState === "complete" && !!(document.querySelector("header form.who") || document.querySelector("p.error"))`))
		return err == nil && done
	}, testenv.Scaled(10*time.Second), 20*time.Millisecond, "the sign-in answered")
}

// browserCookies are the browser's cookies for base.
func browserCookies(t *testing.T, ctx context.Context, base string) []*network.Cookie {
	t.Helper()
	res, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{base}})
	require.NoError(t, err)
	return res.Cookies
}

// text reads the text of the first node sel selects.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	require.NoError(t, err, sel)
	return strings.TrimSpace(s)
}

// waitURL waits until the tab shows a loaded page whose URL contains
// part: a submitted form's answer, not the page it was sent from.
func waitURL(t *testing.T, ctx context.Context, part string) {
	t.Helper()
	require.Eventually(t, func() bool {
		loc, err := chromedp.Run(ctx, chromedp.Location())
		if err != nil || !strings.Contains(loc, part) {
			return false
		}
		st, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.readyState`))
		return err == nil && st == "complete"
	}, testenv.Scaled(10*time.Second), 20*time.Millisecond, "a page at %s", part)
}

// waitText waits until the first node sel selects says want.
func waitText(t *testing.T, ctx context.Context, sel, want string) {
	t.Helper()
	require.Eventually(t, func() bool {
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		return err == nil && strings.Contains(s, want)
	}, testenv.Scaled(10*time.Second), 20*time.Millisecond, "%s says %q", sel, want)
}

// count counts the nodes sel selects.
func count(t *testing.T, ctx context.Context, sel string) int {
	t.Helper()
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll(`+strconv.Quote(sel)+`).length`))
	require.NoError(t, err, sel)
	return n
}

// sessionClient is an HTTP client carrying the browser's cookies: what a
// forged request from the signed-in user's machine would carry.
func sessionClient(t *testing.T, ctx context.Context, base string) *http.Client {
	t.Helper()
	cookies := browserCookies(t, ctx, base)
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	u, err := url.Parse(base)
	require.NoError(t, err)
	var hc []*http.Cookie
	for _, c := range cookies {
		hc = append(hc, &http.Cookie{Name: c.Name, Value: c.Value})
	}
	require.NotEmpty(t, hc, "a session cookie")
	jar.SetCookies(u, hc)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// The console in a real browser: sign-in (a wrong token refused), the
// overview lists the routes, an event's failed attempts with the
// destination's answer, "retry now" delivers it once after the
// destination recovered; a viewer sees no action and a forged action is
// refused, as a cross-site one is; every page carries the CSP.
func TestConsoleInABrowser(t *testing.T) {
	t.Parallel()
	h := newAPIHarness(t, 1000, func(cfg *config.Config) {
		cfg.Retry.Backoff = []time.Duration{time.Hour} // the failed pair waits, retrying, for "retry now"
		cfg.Routes[0].MaxAttempts = 4
	})
	base := h.api.base
	ctx := browser(t)

	// A wrong token is refused.
	signIn(t, ctx, base, "hrt_not-a-token")
	require.Contains(t, text(t, ctx, `.error`), "unknown, revoked or expired")

	// The operator signs in; the overview lists the configured route.
	signIn(t, ctx, base, h.tokens["operator"])
	require.Equal(t, "billing", text(t, ctx, `#routes tr[data-route="billing"] th`))
	require.Equal(t, "active", text(t, ctx, `#routes tr[data-route="billing"] .state`))
	require.Contains(t, text(t, ctx, `#health li[data-part="postgres"]`), "ok")
	require.Contains(t, text(t, ctx, `#health li[data-part="rabbitmq"]`), "ok")

	// An event whose destination fails: its page shows the failed attempt
	// with the destination's answer.
	h.billingDown.Store(true)
	id := h.postSigned("evt_console", "invoice.paid").ID
	h.waitPair(id, "billing", webhook.StateRetrying)
	// Found by the sender's id (its idempotency key), then by ours.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/events"),
		chromedp.SendKeys(chromedp.CSS(`#find input[name=find]`), "evt_console"),
		chromedp.Submit(chromedp.CSS(`#find input[name=find]`)),
	))
	waitURL(t, ctx, "find=evt_console")
	require.Equal(t, 1, count(t, ctx, "#events tbody tr"))
	require.Contains(t, text(t, ctx, "#events tbody tr"), "evt_console")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/events"),
		chromedp.SendKeys(chromedp.CSS(`#find input[name=find]`), id),
		chromedp.Submit(chromedp.CSS(`#find input[name=find]`)),
	))
	waitURL(t, ctx, "/events/"+id)
	require.Equal(t, "503", text(t, ctx, `section.delivery[data-route="billing"] .attempts tbody tr .status`))
	require.Equal(t, "retrying", text(t, ctx, `section.delivery[data-route="billing"] .state`))
	require.Contains(t, text(t, ctx, `section.delivery[data-route="billing"] ol.trace`), "attempt 1.1: HTTP 503")
	require.Contains(t, text(t, ctx, `section.delivery[data-route="billing"] ol.trace`), "waiting in a retry tier: attempt 2 due")
	screenshot(t, ctx, "console-event-failed")

	// The destination is back: "retry now" in the browser delivers the
	// event once, and the page says so.
	h.billingDown.Store(false)
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`section.delivery[data-route="billing"] form button`))))
	waitText(t, ctx, ".flash", "attempted now")
	h.dest.waitFor(20*time.Second, "the retried event delivered", func([]received) bool { return h.dest.successes()["billing "+id] == 1 })
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, chromedp.Do(ctx, chromedp.Navigate(base+"/events/"+id)))
		st, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`section.delivery[data-route="billing"] .state`)))
		require.NoError(c, err)
		require.Equal(c, "delivered", strings.TrimSpace(st))
	}, testenv.Scaled(20*time.Second), 200*time.Millisecond)
	posts := 0
	for _, q := range h.dest.snapshot() {
		if q.eventID == id {
			posts++
		}
	}
	require.Equal(t, 2, posts, "one failed POST, then one for the retry: delivered once")
	require.Contains(t, text(t, ctx, `section.delivery[data-route="billing"] ol.trace`), "attempt 1.2: HTTP 200")
	screenshot(t, ctx, "console-event-delivered")

	// Replay it to billing from its page, "also where delivered" ticked
	// (it is not by default): delivered once more, as a new series.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS(`#replay-event select[name=route]`), "billing"),
		chromedp.Click(chromedp.CSS(`#replay-event input[name=include_delivered]`)),
		chromedp.Click(chromedp.CSS(`#replay-event button`)),
	))
	waitText(t, ctx, ".flash", "1 pair(s) replayed")
	h.dest.waitFor(20*time.Second, "the replayed event delivered", func([]received) bool { return h.dest.successes()["billing "+id] == 2 })

	// The overview's last hour: the source's accepted and rejected
	// requests (a forged signature), billing's deliveries and failures.
	bad := h.post("acme", []byte(`{"id":"evt_forged","type":"invoice.paid"}`), http.Header{"X-Acme-Signature": {"sha256=00"}})
	require.Equal(t, http.StatusUnauthorized, bad.status)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, chromedp.Do(ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(`#routes`))))
		got, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]string](`({
			accepted: document.querySelector('#sources tr[data-source="acme"] .accepted')?.textContent ?? "",
			reasons: document.querySelector('#sources tr[data-source="acme"] .reasons')?.textContent ?? "",
			delivered: document.querySelector('#routes tr[data-route="billing"] .delivered-count')?.textContent ?? "",
			success: document.querySelector('#routes tr[data-route="billing"] .success')?.textContent ?? ""})`))
		require.NoError(c, err)
		assert.Equal(c, "1", got["accepted"])
		assert.Regexp(c, `signature_\w+: 1`, got["reasons"])
		assert.Equal(c, "2", got["delivered"])
		assert.Equal(c, "66.7%", got["success"], "two of three attempts succeeded")
	}, testenv.Scaled(20*time.Second), 250*time.Millisecond)
	require.Equal(t, 1, count(t, ctx, `#routes tr[data-route="billing"] svg.chart`))
	screenshot(t, ctx, "console-overview")

	// Readable on a phone: at 390 px nothing is wider than the screen
	// but the tables, which scroll in their own box.
	for _, page := range []string{"/", "/events/" + id, "/routes/billing", "/events"} {
		require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(390, 844), chromedp.Navigate(base+page), chromedp.WaitVisible(chromedp.CSS(`main`))))
		width, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth`))
		require.NoError(t, err)
		require.LessOrEqual(t, width, 390, "%s is %d px wide at 390", page, width)
	}
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/events/"+id), chromedp.WaitVisible(chromedp.CSS(`main`))))
	screenshot(t, ctx, "console-event-390px")
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900)))

	// A cross-site POST with the operator's session is refused.
	op := sessionClient(t, ctx, base)
	req, err := http.NewRequest(http.MethodPost, base+"/routes/billing/pause", nil)
	require.NoError(t, err)
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err := op.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "a cross-site POST")
	require.False(t, h.routeState(t, "billing").Paused)

	// Sign out; a viewer sees no action, and a forged one is refused.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`header form.who button`)),
		chromedp.WaitVisible(chromedp.CSS(`#token`)),
	))
	signIn(t, ctx, base, h.tokens["viewer"])
	h.billingDown.Store(true)
	other := h.postSigned("evt_console_viewer", "invoice.paid").ID
	h.waitPair(other, "billing", webhook.StateRetrying)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/events/"+other), chromedp.WaitVisible(chromedp.CSS(`section.delivery`))))
	require.Equal(t, "retrying", text(t, ctx, `section.delivery[data-route="billing"] .state`))
	require.Zero(t, count(t, ctx, "main form button"), "a viewer sees no action on an event")
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(`#routes`))))
	require.Zero(t, count(t, ctx, "main form button"), "a viewer sees no action on the routes")
	viewer := sessionClient(t, ctx, base)
	resp, err = viewer.PostForm(base+"/events/"+other+"/retry", url.Values{"route": {"billing"}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "a forged retry with a viewer's session")

	// Every page carries the CSP, and the session cookie is HttpOnly.
	resp, err = http.Get(base + "/signin")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, console.CSP, resp.Header.Get("Content-Security-Policy"))
	cookies := browserCookies(t, ctx, base)
	require.Len(t, cookies, 1)
	require.True(t, cookies[0].HTTPOnly)
	require.Equal(t, network.CookieSameSiteLax, cookies[0].SameSite)
}

// Replay a window from the browser: the preview's count is what the job
// then replays, each pair delivered once more; the dead letters page
// shows the letters and drops them once delivered; the audit log page
// names who did it.
func TestConsoleReplayAndDeadLetters(t *testing.T) {
	t.Parallel()
	h := newAPIHarness(t, 1000)
	base := h.api.base
	ctx := browser(t)
	signIn(t, ctx, base, h.tokens["operator"])

	h.billingDown.Store(true)
	var ids []string
	for i := range 4 {
		ids = append(ids, h.postSigned(fmt.Sprint("evt_window_", i), "invoice.paid").ID)
	}
	for _, id := range ids {
		h.waitPair(id, "billing", webhook.StateDead)
	}
	amqptest.WaitCount(t, h.ch, h.names.DeadQueue("billing"), 4, 10*time.Second)
	h.billingDown.Store(false)

	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/routes/billing/dead-letters"), chromedp.WaitVisible(chromedp.CSS(`#letters`))))
	require.Equal(t, 4, count(t, ctx, "#letters tbody tr"))
	require.Equal(t, "dead", text(t, ctx, "#letters tbody tr .state"))
	screenshot(t, ctx, "console-dead-letters")

	// Requeue one of them, chosen by its row: a job moves it alone, and it
	// is delivered once; the three others stay.
	first := ids[0]
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#letters tr[data-event="`+first+`"] button`)),
		chromedp.WaitVisible(chromedp.CSS(`#job-state`)), // the POST answered with the job's page
	))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, chromedp.Do(ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`#job-state`))))
		st, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#job-state`)))
		require.NoError(c, err)
		require.Equal(c, "succeeded", strings.TrimSpace(st))
	}, testenv.Scaled(30*time.Second), 250*time.Millisecond)
	require.Equal(t, "1", text(t, ctx, `#result dd[data-key="moved"]`))
	h.dest.waitFor(20*time.Second, "the requeued letter delivered", func([]received) bool { return h.dest.successes()["billing "+first] == 1 })
	amqptest.WaitCount(t, h.ch, h.names.DeadQueue("billing"), 3, 10*time.Second)
	ids = ids[1:]

	// The replay form: a preview, then the replay as a job, followed to
	// its end on its page.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/replay"),
		chromedp.WaitVisible(chromedp.CSS(`select[name=route]`)),
		chromedp.SetValue(chromedp.CSS(`select[name=route]`), "billing"),
		chromedp.SetValue(chromedp.CSS(`select[name=state]`), "dead"),
		chromedp.SendKeys(chromedp.CSS(`input[name=since]`), "1h"),
		chromedp.Click(chromedp.CSS(`button[name=preview]`)),
		chromedp.WaitVisible(chromedp.CSS(`#preview`)),
	))
	preview := text(t, ctx, "#would-replay")
	require.Equal(t, "3", preview)
	screenshot(t, ctx, "console-replay-preview")
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
	require.Equal(t, preview, text(t, ctx, `#result dd[data-key="replayed_count"]`), "the preview's count is what the job replayed")
	screenshot(t, ctx, "console-replay-job")
	for _, id := range ids {
		h.dest.waitFor(20*time.Second, "replayed "+id+" delivered", func([]received) bool { return h.dest.successes()["billing "+id] >= 1 })
	}
	for _, id := range ids {
		require.Equal(t, 1, h.dest.successes()["billing "+id], "replayed once")
	}

	// The letters of delivered pairs are dropped.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/routes/billing/dead-letters"),
		chromedp.WaitVisible(chromedp.CSS(`#letters`)),
	))
	require.Equal(t, "delivered", text(t, ctx, "#letters tbody tr .state"))
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`form[action$="drop-delivered"] button`))))
	waitText(t, ctx, ".flash", "3 delivered letter(s) dropped")
	require.Zero(t, count(t, ctx, "#letters tbody tr"))

	// The audit log names the operator's replay and drop.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/audit?actor=token:t-operator"), chromedp.WaitVisible(chromedp.CSS(`#audit`))))
	actions, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#audit tbody .action")).map(e => e.textContent)`))
	require.NoError(t, err)
	require.Equal(t, []string{"dead.drop", "dead.drop", "replay", "replay", "dead.requeue", "dead.requeue"}, actions, "each as it started and as it ended")
	screenshot(t, ctx, "console-audit")
}

// Pause a route in the browser: both dispatchers stop taking its
// messages within 2s; events wait in its queue; resume in the browser
// delivers them, each once.
func TestConsolePauseAndResume(t *testing.T) {
	t.Parallel()
	h := newAPIHarness(t, 1000)
	h.startDispatcher(app.DispatcherOptions{}) // a second dispatcher
	base := h.api.base
	queue := h.names.RouteQueue("billing")
	consumers := 2 * h.cfg.Routes[0].Concurrency
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, consumers, h.queueConsumers(c, queue)) }, testenv.Scaled(10*time.Second), 20*time.Millisecond)
	ctx := browser(t)
	signIn(t, ctx, base, h.tokens["operator"])

	// From the overview to the route's page, paused there with a reason.
	const reason = "destination migrating until 14:00 UTC"
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#routes tr[data-route="billing"] th a`)),
		chromedp.WaitVisible(chromedp.CSS(`#pause input[name=reason]`)),
		chromedp.SendKeys(chromedp.CSS(`#pause input[name=reason]`), reason),
		chromedp.Click(chromedp.CSS(`#pause form button`)),
	))
	waitText(t, ctx, ".flash", "route billing paused")
	paused := time.Now()
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, 0, h.queueConsumers(c, queue)) }, testenv.Scaled(2*time.Second), 10*time.Millisecond,
		"both dispatchers stop consuming within 2s of the pause")
	t.Logf("consumers gone %s after the pause answered", time.Since(paused).Round(time.Millisecond))
	require.Equal(t, reason, text(t, ctx, `#route-facts .reason`))
	require.Contains(t, text(t, ctx, `#route-facts .paused`), "by token:t-operator")
	require.Equal(t, reason, h.routeState(t, "billing").PausedReason)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(`#routes`))))
	require.Equal(t, "paused", text(t, ctx, `#routes tr[data-route="billing"] .state`))
	screenshot(t, ctx, "console-paused")

	var ids []string
	for i := range 5 {
		ids = append(ids, h.postSigned(fmt.Sprint("evt_paused_", i), "invoice.paid").ID)
	}
	waitCountCh(t, h.harness, queue, 5, 15*time.Second)
	require.Empty(t, h.dest.snapshot(), "nothing delivered while paused")

	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#routes tr[data-route="billing"] form button`))))
	waitText(t, ctx, ".flash", "route billing resumed")
	require.Empty(t, h.routeState(t, "billing").PausedReason, "a resume clears the reason")
	h.dest.waitFor(20*time.Second, "the backlog", func(rs []received) bool { return len(h.dest.successes()) == 5 })
	h.waitQueuesEmpty(10 * time.Second)
	for _, id := range ids {
		require.Equal(t, 1, h.dest.successes()["billing "+id], "%s delivered once", id)
	}
	require.Len(t, h.dest.snapshot(), 5, "no second POST")
}
