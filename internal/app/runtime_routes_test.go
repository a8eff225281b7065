package app_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	hamqp "github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/routeset"
	"github.com/hookrelay/hookrelay/internal/signature"
	"github.com/hookrelay/hookrelay/internal/testenv"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testSecretsKey seals the tests' run-time route secrets.
var testSecretsKey = base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))

// runtimeHarness is a relay with the admin API, made to have routes made
// at run time: a secrets key, one receiver.
type runtimeHarness struct {
	*harness
	api  *apiClient
	conn *amqp091.Connection
}

func newRuntimeHarness(t *testing.T) *runtimeHarness {
	h := newHarness(t)
	h.cfg.Secrets = config.Secrets{Key: testSecretsKey, Overlap: 24 * time.Hour}
	h.cfg.Admin.Token = adminToken
	t.Cleanup(func() { deleteRuntimeRouteQueues(t, h) }) // after the processes stop
	adminLn, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	h.start(app.ReceiverOptions{AdminListener: adminLn})
	return &runtimeHarness{harness: h, api: newAPIClient(t, "http://"+adminLn.Addr().String()), conn: amqptest.Dial(t)}
}

// create makes route name through the API and returns its secret; its
// queues go with the test (newRuntimeHarness).
func (h *runtimeHarness) create(name string, settings map[string]any) string {
	h.t.Helper()
	body := map[string]any{"name": name}
	for k, v := range settings {
		body[k] = v
	}
	a := h.api.call("create-route", http.MethodPost, "/api/v1/routes", adminToken, body)
	require.Equal(h.t, http.StatusCreated, a.Status, "%s", a.Body)
	var res ops.RouteCreated
	a.decode(h.t, &res)
	require.True(h.t, strings.HasPrefix(res.Secret, "whsec_"))
	require.Equal(h.t, res.Route.SecretFingerprint, fingerprintOf(h.t, res.Secret))
	return res.Secret
}

func fingerprintOf(t *testing.T, whsec string) string {
	key, err := signature.DecodeStandardSecret(whsec)
	require.NoError(t, err)
	return routeset.Fingerprint(key)
}

// consumers counts the consumers of queue, -1 when it is not declared.
func (h *runtimeHarness) consumers(t require.TestingT, queue string) int {
	n := -1 // not declared (yet, or any more)
	h.channel(t, func(ch *amqp091.Channel) {
		if q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil); err == nil {
			n = q.Consumers
		}
	})
	return n
}

// Issue 22: a route made through the API receives events within 2 s in
// two dispatchers, without a restart of either or of the receiver.
func TestRouteMadeThroughTheAPIDeliversWithinTwoSecondsInTwoDispatchers(t *testing.T) {
	t.Parallel()
	h := newRuntimeHarness(t)
	dest := newDestination(t, func(http.ResponseWriter, *http.Request, []byte, string, int) int { return http.StatusOK })
	var bases []string
	for range 2 {
		h.startDispatcher(app.DispatcherOptions{})
		bases = append(bases, h.dispatcherBase)
	}

	made := time.Now()
	secret := h.create("audit", map[string]any{"url": dest.url("audit"), "bindings": []string{"acme.invoice.*"}, "concurrency": 1,
		"headers": map[string]string{"X-Api-Key": "k-123"}})
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, 2, h.consumers(c, h.names.RouteQueue("audit"))) }, testenv.Scaled(2*time.Second)-time.Since(made), 20*time.Millisecond,
		"both dispatchers consume the new route's queue within 2s")
	t.Logf("both dispatchers consumed the new route %s after it was made", time.Since(made).Round(time.Millisecond))

	// Events sent now reach it, signed with the secret the API gave once.
	const n = 20
	var ids []string
	for i := range n {
		ids = append(ids, h.postSigned(fmt.Sprintf("rt-%d", i), "invoice.paid").ID)
	}
	dest.waitFor(30*time.Second, "every event at the new route", func(rs []received) bool { return len(rs) >= n })
	// Both dispatchers deliver. RabbitMQ spreads the queue's messages over
	// its two consumers, but beside the whole suite one took all 20 once:
	// more events go, one at a time, until each has delivered one (the
	// property is that both consume the new route, not how evenly).
	idle := func() (which []int) {
		for i, base := range bases {
			if scrape(t, base)[`hookrelay_deliveries_total{outcome="delivered",route="audit"}`] == 0 {
				which = append(which, i)
			}
		}
		return which
	}
	for i := n; len(idle()) > 0; i++ {
		require.Less(t, i, 10*n, "dispatchers %v delivered none of the new route's %d events", idle(), i)
		ids = append(ids, h.postSigned(fmt.Sprintf("rt-%d", i), "invoice.paid").ID)
		dest.waitFor(30*time.Second, "the next event at the new route", func(rs []received) bool { return len(rs) > i })
	}
	key, err := signature.DecodeStandardSecret(secret)
	require.NoError(t, err)
	for _, r := range dest.snapshot() {
		ts, err := strconv.ParseInt(r.header.Get("webhook-timestamp"), 10, 64)
		require.NoError(t, err)
		require.Equal(t, signature.SignStandard([][]byte{key}, r.eventID, time.Unix(ts, 0), r.body), r.header.Get("webhook-signature"))
		require.Equal(t, "k-123", r.header.Get("X-Api-Key"), "the route's header, sealed at rest, is sent")
	}
	require.ElementsMatch(t, ids, eventsOf(dest.snapshot()))
}

func eventsOf(rs []received) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.eventID)
	}
	return out
}

// Issue 22: a binding removed stops that pattern's events: the broker no
// longer routes them to the route's queue, and no receiver makes a pair.
func TestRouteBindingRemovedStopsItsEvents(t *testing.T) {
	t.Parallel()
	h := newRuntimeHarness(t)
	dest := newDestination(t, func(http.ResponseWriter, *http.Request, []byte, string, int) int { return http.StatusOK })
	h.startDispatcher(app.DispatcherOptions{})
	h.create("crm", map[string]any{"url": dest.url("crm"), "bindings": []string{"acme.customer.*", "acme.lead.*"}})
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Positive(c, h.consumers(c, h.names.RouteQueue("crm"))) }, testenv.Scaled(5*time.Second), 20*time.Millisecond)
	first := h.postSigned("lead-1", "lead.created").ID
	dest.waitFor(30*time.Second, "the lead event", func(rs []received) bool { return len(rs) == 1 })

	a := h.api.call("update-route", http.MethodPatch, "/api/v1/routes/crm", adminToken, map[string]any{"bindings": []string{"acme.customer.*"}})
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	var d ops.RouteDetail
	a.decode(t, &d)
	require.Equal(t, int64(2), d.Version)
	changed := time.Now()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NotContains(c, h.brokerBindings(c, "crm"), "acme.lead.*")
	}, testenv.Scaled(2*time.Second), 20*time.Millisecond, "the queue is unbound from the removed pattern within 2s")
	t.Logf("unbound %s after the change", time.Since(changed).Round(time.Millisecond))
	// Every receiver follows too: wait until this one's routes have the
	// change (its listing shows version 2), then send.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		a := h.api.try(c, "get-route", http.MethodGet, "/api/v1/routes/crm", adminToken, nil)
		var d ops.RouteDetail
		a.decode(c, &d)
		assert.Equal(c, int64(2), d.Version)
	}, testenv.Scaled(2*time.Second), 20*time.Millisecond)

	lead := h.postSigned("lead-2", "lead.created").ID
	customer := h.postSigned("cust-1", "customer.created").ID
	dest.waitFor(30*time.Second, "the customer event", func(rs []received) bool { return slices.Contains(eventsOf(rs), customer) })
	// The lead event went nowhere the route reads: no pair, and the
	// broker put it in the unrouted queue (no other route binds it).
	var pairs int
	require.NoError(t, h.db.Pool().QueryRow(t.Context(), `SELECT count(*) FROM deliveries WHERE event_id = $1`, lead).Scan(&pairs))
	require.Zero(t, pairs)
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, 1, h.countReady(c, h.names.Unrouted())) }, testenv.Scaled(10*time.Second), 20*time.Millisecond)
	require.ElementsMatch(t, []string{first, customer}, eventsOf(dest.snapshot()))
}

// Issue 22: a route with undelivered work is not deleted unless told what
// to do with it; with dead_letter (the CLI's --dead-letter) its backlog
// is found in its dead letters, recorded dead, and the route retires:
// its queue goes, its dead-letter queue stays.
func TestRouteDeletedWithABacklogGoesToDeadLetters(t *testing.T) {
	t.Parallel()
	h := newRuntimeHarness(t)
	dest := newDestination(t, func(http.ResponseWriter, *http.Request, []byte, string, int) int {
		return http.StatusServiceUnavailable
	})
	h.startDispatcher(app.DispatcherOptions{})
	// Many attempts, the circuit off: the backlog stays retrying.
	h.create("flaky", map[string]any{"url": dest.url("flaky"), "bindings": []string{"acme.invoice.*"}, "max_attempts": 1000, "circuit_failures": 0})
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Positive(c, h.consumers(c, h.names.RouteQueue("flaky"))) }, testenv.Scaled(5*time.Second), 20*time.Millisecond)
	var ids []string
	for i := range 3 {
		ids = append(ids, h.postSigned(fmt.Sprintf("flaky-%d", i), "invoice.paid").ID)
	}
	dest.waitFor(30*time.Second, "every event tried", func(rs []received) bool { return len(rs) >= 3 })

	a := h.api.call("delete-route", http.MethodDelete, "/api/v1/routes/flaky", adminToken, nil)
	require.Equal(t, http.StatusConflict, a.Status, "%s", a.Body)
	require.Contains(t, string(a.Body), "3 undelivered")
	require.Contains(t, string(a.Body), "dead_letter")

	a = h.api.call("delete-route", http.MethodDelete, "/api/v1/routes/flaky?disposal=dead_letter", adminToken, nil)
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	var del ops.RouteDeleted
	a.decode(t, &del)
	require.Equal(t, ops.RouteDeleted{Route: "flaky", Undelivered: 3, Disposal: "dead_letter"}, del)

	// Each pair is dead with the reason, its message in the dead letters.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var dead int
		require.NoError(c, h.db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM deliveries WHERE route = 'flaky' AND state = 'dead'`).Scan(&dead))
		assert.Equal(c, 3, dead)
		assert.Equal(c, 3, h.countReady(c, h.names.DeadQueue("flaky")))
	}, testenv.Scaled(30*time.Second), 50*time.Millisecond, "the backlog in the dead letters")
	var reasons int
	require.NoError(t, h.db.Pool().QueryRow(t.Context(), `SELECT count(*) FROM delivery_attempts a JOIN deliveries d ON d.id = a.delivery_id
		WHERE d.route = 'flaky' AND a.error LIKE 'route deleted%'`).Scan(&reasons))
	require.Equal(t, 3, reasons)
	dead := peekManagement(t, h.names.DeadQueue("flaky"))
	require.Len(t, dead, 3)
	var deadIDs []string
	for _, p := range dead {
		deadIDs = append(deadIDs, p.eventID())
		assert.Equal(t, "route_deleted", p.header("x-hookrelay-dead-reason"))
	}
	require.ElementsMatch(t, ids, deadIDs)

	// Then the route retires: marked, its queue deleted; its dead letters
	// stay, and it is no longer listed as a route.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var retired bool
		require.NoError(c, h.db.Pool().QueryRow(context.Background(), `SELECT retired_at IS NOT NULL FROM routes WHERE name = 'flaky'`).Scan(&retired))
		assert.True(c, retired, "retired")
		assert.Equal(c, -1, h.consumers(c, h.names.RouteQueue("flaky")), "its queue deleted")
	}, testenv.Scaled(30*time.Second), 50*time.Millisecond, "the route retired and its queue deleted")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 3, h.countReady(c, h.names.DeadQueue("flaky")))
	}, testenv.Scaled(5*time.Second), 20*time.Millisecond, "its backlog dead-lettered")
	a = h.api.call("get-route", http.MethodGet, "/api/v1/routes/flaky", adminToken, nil)
	require.Equal(t, http.StatusNotFound, a.Status)
}

// Issue 22: after a rotation both secrets sign during the overlap (the
// new one first), and only the new one after it.
func TestRotatedSecretSignsWithBothDuringTheOverlap(t *testing.T) {
	t.Parallel()
	h := newRuntimeHarness(t)
	dest := newDestination(t, func(http.ResponseWriter, *http.Request, []byte, string, int) int { return http.StatusOK })
	h.startDispatcher(app.DispatcherOptions{})
	oldSecret := h.create("signed", map[string]any{"url": dest.url("signed"), "bindings": []string{"acme.invoice.*"}})
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Positive(c, h.consumers(c, h.names.RouteQueue("signed"))) }, testenv.Scaled(5*time.Second), 20*time.Millisecond)

	overlap := testenv.Scaled(5 * time.Second)
	rotated := time.Now()
	a := h.api.call("rotate-route-secret", http.MethodPost, "/api/v1/routes/signed/rotate-secret", adminToken, map[string]any{"overlap": overlap.String()})
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	var rot ops.SecretRotated
	a.decode(t, &rot)
	require.NotNil(t, rot.PreviousUntil)
	require.NotEqual(t, oldSecret, rot.Secret)
	oldKey, err := signature.DecodeStandardSecret(oldSecret)
	require.NoError(t, err)
	newKey, err := signature.DecodeStandardSecret(rot.Secret)
	require.NoError(t, err)
	// Its listing shows the fingerprints only.
	a = h.api.call("get-route", http.MethodGet, "/api/v1/routes/signed", adminToken, nil)
	require.NotContains(t, string(a.Body), strings.TrimPrefix(rot.Secret, "whsec_"))
	var d ops.RouteDetail
	a.decode(t, &d)
	require.Equal(t, fingerprintOf(t, rot.Secret), d.SecretFingerprint)
	require.Equal(t, fingerprintOf(t, oldSecret), d.PreviousFingerprint)

	// signedWith says which keys signed a request, nil when neither set.
	signedWith := func(r received) string {
		ts, err := strconv.ParseInt(r.header.Get("webhook-timestamp"), 10, 64)
		require.NoError(t, err)
		got := r.header.Get("webhook-signature")
		at := time.Unix(ts, 0)
		switch got {
		case signature.SignStandard([][]byte{newKey, oldKey}, r.eventID, at, r.body):
			return "both"
		case signature.SignStandard([][]byte{newKey}, r.eventID, at, r.body):
			return "new"
		case signature.SignStandard([][]byte{oldKey}, r.eventID, at, r.body):
			return "old"
		}
		return "neither"
	}
	// Every dispatcher follows within 2s: events sent one after another,
	// each waited for, until one carries both signatures, which must come
	// while the overlap lasts. The overlap is sized to the machine, so
	// what is checked is that both sign, not how fast the machine is.
	send := func() string {
		id := h.postSigned("rot-"+strconv.FormatInt(time.Now().UnixNano(), 10), "invoice.paid").ID
		dest.waitFor(testenv.Scaled(10*time.Second), "the event", func(rs []received) bool { return slices.Contains(eventsOf(rs), id) })
		for _, r := range dest.snapshot() {
			if r.eventID == id {
				return signedWith(r)
			}
		}
		return "missing"
	}
	var seen []string
	for time.Now().Before(*rot.PreviousUntil) {
		how := send()
		seen = append(seen, how)
		if how == "both" {
			break
		}
	}
	require.NotEmpty(t, seen)
	require.Equal(t, "both", seen[len(seen)-1], "during the overlap (%s) both secrets sign; deliveries signed: %v", overlap, seen)
	require.True(t, time.Now().Before(*rot.PreviousUntil), "the overlap outlasted the check")
	t.Logf("both signed after %d deliveries (%s after the rotation)", len(seen), time.Since(rotated).Round(time.Millisecond))
	// After the overlap, only the new one.
	for deadline := time.Now().Add(testenv.Scaled(30 * time.Second)); ; {
		if send() == "new" {
			break
		}
		require.True(t, time.Now().Before(deadline), "after the overlap only the new secret signs")
	}
	// A delivery before the dispatcher followed the rotation (within 2s)
	// is signed with the old secret alone; none after.
	followed := false
	for _, r := range dest.snapshot() {
		how := signedWith(r)
		assert.NotEqual(t, "neither", how)
		followed = followed || how == "both"
		if followed {
			assert.NotEqual(t, "old", how, "once the dispatcher followed the rotation, the new secret signs every delivery")
		}
	}
}

// channel runs fn on a channel of its own, closed after: a passive
// declare of a queue that is not there closes the channel it runs on. t is
// the test, or EventuallyWithT's collector inside a condition.
func (h *runtimeHarness) channel(t require.TestingT, fn func(ch *amqp091.Channel)) {
	ch, err := h.conn.Channel()
	require.NoError(t, err)
	defer func() { _ = ch.Close() }() // closed already by a failed declare
	fn(ch)
}

// countReady counts queue's ready messages.
func (h *runtimeHarness) countReady(t require.TestingT, queue string) (n int) {
	h.channel(t, func(ch *amqp091.Channel) {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		require.NoError(t, err, "inspecting queue %s", queue)
		n = q.Messages
	})
	return n
}

// brokerBindings are the patterns binding the events exchange to route's
// queue, as the broker holds them.
func (h *runtimeHarness) brokerBindings(t require.TestingT, route string) []string {
	mgmt, err := hamqp.NewManagement([]string{testenv.ManagementURL()}, testenv.AMQPURL())
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list, err := mgmt.Bindings(ctx, h.names.Events(), h.names.RouteQueue(route))
	require.NoError(t, err)
	return list
}

func (p peeked) header(name string) string {
	s, _ := p.Properties.Headers[name].(string)
	return s
}

func (p peeked) eventID() string { return p.header(hamqp.HeaderEventID) }

// Issue 22: a team's token makes routes for its own team, bound to the
// events of sources whose owners admit it (acme lists team-a in
// subscribers); the route is the team's: B does not see it.
func TestTeamMakesItsOwnRouteOnASourceThatAdmitsIt(t *testing.T) {
	t.Parallel()
	h := newTeamsHarness(t)
	c, tokA, tokB := h.api, h.tokens["team-a"], h.tokens["team-b"]
	body := map[string]any{"name": "team-a:audit", "url": "http://127.0.0.1:9/", "bindings": []string{"acme.invoice.*"}}
	a := c.call("create-route", http.MethodPost, "/api/v1/routes", tokA, body)
	require.Equal(t, http.StatusCreated, a.Status, "%s", a.Body)
	var res ops.RouteCreated
	a.decode(t, &res)
	require.Equal(t, "team-a", res.Route.Team)
	require.Equal(t, http.StatusOK, c.call("get-route", http.MethodGet, "/api/v1/routes/team-a:audit", tokA, nil).Status)
	require.Equal(t, http.StatusNotFound, c.call("get-route", http.MethodGet, "/api/v1/routes/team-a:audit", tokB, nil).Status)
	// B's token may not bind acme (not a subscriber), nor every source.
	for _, pattern := range []string{"acme.invoice.*", "#", "*.invoice.paid"} {
		a = c.call("create-route", http.MethodPost, "/api/v1/routes", tokB,
			map[string]any{"name": "team-b:audit", "url": "http://127.0.0.1:9/", "bindings": []string{pattern}})
		require.Equal(t, http.StatusBadRequest, a.Status, "%s: %s", pattern, a.Body)
	}
	// Nor may A change its route's bindings to B's source.
	a = c.call("update-route", http.MethodPatch, "/api/v1/routes/team-a:audit", tokA, map[string]any{"bindings": []string{"bsrc.#"}})
	require.Equal(t, http.StatusBadRequest, a.Status, "%s", a.Body)
	// A declared route is read-only at run time.
	a = c.call("update-route", http.MethodPatch, "/api/v1/routes/a-billing", tokA, map[string]any{"concurrency": 2})
	require.Equal(t, http.StatusConflict, a.Status, "%s", a.Body)
	require.Contains(t, string(a.Body), "config.yaml")
}

// Issue 22, the console's forms: an admin makes a route in the browser
// (its secret shown once, its fingerprint afterwards), changes its
// bindings (the broker follows), rotates its secret and deletes it.
func TestConsoleMakesChangesAndDeletesARoute(t *testing.T) {
	t.Parallel()
	h := newRuntimeHarness(t)
	h.startDispatcher(app.DispatcherOptions{})
	base := h.api.base
	ctx := browser(t)
	signIn(t, ctx, base, adminToken)

	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/"),
		chromedp.Click(chromedp.CSS(`#new-route-link`)),
		chromedp.WaitVisible(chromedp.CSS(`#new-route input[name=name]`)),
		chromedp.SendKeys(chromedp.CSS(`#new-route input[name=name]`), "console-made"),
		chromedp.SendKeys(chromedp.CSS(`#new-route input[name=url]`), "http://127.0.0.1:9/hooks"),
		chromedp.SendKeys(chromedp.CSS(`#new-route input[name=bindings]`), "acme.lead.* acme.customer.*"),
		chromedp.Submit(chromedp.CSS(`#new-route input[name=name]`)),
	))
	waitText(t, ctx, "#secret", "whsec_")
	secret, fp := text(t, ctx, "#secret"), text(t, ctx, "#fingerprint")
	require.Equal(t, fingerprintOf(t, secret), fp)
	screenshot(t, ctx, "console-route-secret")

	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/routes/console-made")))
	waitText(t, ctx, "#settings .kind", "made at run time, version 1")
	require.Equal(t, fp, text(t, ctx, "#settings .fingerprint code"))
	require.NotContains(t, text(t, ctx, "main"), strings.TrimPrefix(secret, "whsec_"), "the secret is shown once only")
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, 2, len(h.brokerBindings(c, "console-made"))) }, testenv.Scaled(5*time.Second), 20*time.Millisecond)

	// Change its bindings: the broker follows.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS(`#update-route input[name=bindings]`), "acme.lead.*"),
		chromedp.Submit(chromedp.CSS(`#update-route input[name=bindings]`)),
	))
	waitText(t, ctx, "#settings .kind", "version 2")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, []string{"acme.lead.*"}, h.brokerBindings(c, "console-made"))
	}, testenv.Scaled(2*time.Second), 20*time.Millisecond, "the removed binding is unbound within 2s")
	screenshot(t, ctx, "console-route-settings")

	// Rotate its secret: the new one shown once, the old one's
	// fingerprint kept as the previous.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`#rotate-secret input[name=overlap]`), "1h"),
		chromedp.Submit(chromedp.CSS(`#rotate-secret input[name=overlap]`)),
	))
	waitText(t, ctx, "#secret", "whsec_")
	rotated := text(t, ctx, "#secret")
	require.NotEqual(t, secret, rotated)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/routes/console-made")))
	waitText(t, ctx, "#settings .fingerprint", fingerprintOf(t, rotated))
	require.Contains(t, text(t, ctx, "#settings .fingerprint"), fp)

	// Delete it (nothing undelivered): it retires and its queue goes.
	require.NoError(t, chromedp.Do(ctx, chromedp.Submit(chromedp.CSS(`#delete-route select`))))
	waitText(t, ctx, ".flash", "route console-made deleted")
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, -1, h.consumers(c, h.names.RouteQueue("console-made"))) }, testenv.Scaled(30*time.Second), 50*time.Millisecond)
}

// A binding removed while no dispatcher ran is removed from the broker by
// the next dispatcher that starts: it compares the broker's bindings with
// the route's at every connect.
func TestBindingRemovedWhileNoDispatcherRanIsUnboundAtStart(t *testing.T) {
	t.Parallel()
	h := newRuntimeHarness(t)
	stop := h.startDispatcher(app.DispatcherOptions{})
	h.create("crm", map[string]any{"url": "http://127.0.0.1:9/", "bindings": []string{"acme.customer.*", "acme.lead.*"}})
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, 2, len(h.brokerBindings(c, "crm"))) }, testenv.Scaled(5*time.Second), 20*time.Millisecond)
	stop()
	a := h.api.call("update-route", http.MethodPatch, "/api/v1/routes/crm", adminToken, map[string]any{"bindings": []string{"acme.customer.*"}})
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	require.Len(t, h.brokerBindings(t, "crm"), 2, "nobody applied the change")
	h.startDispatcher(app.DispatcherOptions{})
	require.Equal(t, []string{"acme.customer.*"}, h.brokerBindings(t, "crm"), "unbound before the dispatcher was ready")
}
