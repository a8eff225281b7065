package app_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Keys of their own for the tests of key rotations: testSecretsKey is
// another.
var (
	rotationKey1 = base64.StdEncoding.EncodeToString([]byte(strings.Repeat("1", 32)))
	rotationKey2 = base64.StdEncoding.EncodeToString([]byte(strings.Repeat("2", 32)))
	rotationKey3 = base64.StdEncoding.EncodeToString([]byte(strings.Repeat("3", 32)))
)

// withKeys returns a copy of cfg with its own secrets keys.
func withKeys(cfg *config.Config, key string, previous ...string) *config.Config {
	c := *cfg
	c.Secrets = config.Secrets{Key: key, PreviousKeys: previous, Overlap: time.Hour}
	return &c
}

// opsCtx is an operator's context for a test's ops calls.
func opsCtx() context.Context {
	return ops.WithTeam(ops.WithActor(context.Background(), "test"), ops.PlatformTeam)
}

// metricValue reads one sample of base's /metrics, -1 when it has none;
// t may be EventuallyWithT's collector.
func metricValue(t require.TestingT, base, sample string) float64 {
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, sample+" "); ok {
			var v float64
			_, err := fmt.Sscan(rest, &v)
			require.NoError(t, err)
			return v
		}
	}
	return -1
}

// pairs counts event's deliveries to route in Postgres.
func (h *harness) pairs(t require.TestingT, event, route string) int {
	var n int
	require.NoError(t, h.db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM deliveries WHERE event_id = $1 AND route = $2`, event, route).Scan(&n))
	return n
}

// Issue 38, reliability 1: a receiver and a dispatcher that cannot open a
// run-time route (no secrets.key: it was made after they started) leave
// it whole: the dispatcher binds its queue (the bindings are not sealed)
// and keeps the bindings at a reconnect and at a change, the receiver
// makes its pairs, both say so (log, hookrelay_route_unopened, the
// listing's unopened state), and its messages wait in its queue, neither
// posted nor dead-lettered, until a dispatcher with the key delivers them
// with their headers.
func TestProcessesWithoutTheKeyKeepARouteBoundAndItsPairs(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.cfg.Secrets = config.Secrets{} // the receiver and the first dispatcher: no key
	keyed := withKeys(h.cfg, testSecretsKey)
	t.Cleanup(func() { deleteRuntimeRouteQueues(t, h) }) // after the processes stop
	rt := &runtimeHarness{harness: h, conn: amqptest.Dial(t)}
	dest := newDestination(t, func(http.ResponseWriter, *http.Request, []byte, string, int) int { return http.StatusOK })
	h.start(app.ReceiverOptions{})
	keyless := *h.cfg
	proxy := proxied(t, &keyless.AMQP.URL)
	h.startDispatcherWith(&keyless, app.DispatcherOptions{})
	keylessBase := h.dispatcherBase

	// Made, after both started, by an operator whose CLI has the key.
	admin := testOpsWith(t, h, keyed, amqptest.Dialer(t))
	url := dest.url("ledger")
	_, err := admin.RouteCreate(opsCtx(), "ledger", ops.RouteInput{URL: &url, Bindings: []string{"acme.invoice.*"},
		Headers: map[string]string{"X-Api-Key": "k-123"}})
	require.NoError(t, err)

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, []string{"acme.invoice.*"}, rt.brokerBindings(c, "ledger"))
		assert.Equal(c, 1.0, metricValue(c, keylessBase, `hookrelay_route_unopened{route="ledger"}`))
		assert.Equal(c, 1.0, metricValue(c, h.metricsBase, `hookrelay_route_unopened{route="ledger"}`))
	}, testenv.Scaled(5*time.Second), 20*time.Millisecond, "the keyless dispatcher binds the route it cannot open, and both processes count it")
	require.Equal(t, -1.0, metricValue(t, keylessBase, `hookrelay_route_unopened{route="billing"}`), "a route of the config is not counted")

	// A reconnect: the dispatcher compares the broker's bindings with
	// the route's, and keeps them.
	billing := h.names.RouteQueue("billing")
	proxy.Cut()
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, 0, rt.consumers(c, billing)) }, testenv.Scaled(10*time.Second), 20*time.Millisecond)
	proxy.Restore()
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, 4, rt.consumers(c, billing)) }, testenv.Scaled(20*time.Second), 20*time.Millisecond,
		"the keyless dispatcher reconnected")
	require.Equal(t, []string{"acme.invoice.*"}, rt.brokerBindings(t, "ledger"), "a reconnect keeps the bindings of a route the dispatcher cannot open")

	// A change: the dispatcher follows its bindings.
	_, err = admin.RouteUpdate(opsCtx(), "ledger", ops.RouteInput{Bindings: []string{"acme.invoice.*", "acme.customer.*"}})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.ElementsMatch(c, []string{"acme.invoice.*", "acme.customer.*"}, rt.brokerBindings(c, "ledger"))
	}, testenv.Scaled(5*time.Second), 20*time.Millisecond, "a change of a route the dispatcher cannot open is bound")

	// The keyless receiver makes the pair, with the event: the message
	// waits in the queue, unconsumed.
	id := h.postSigned("k-1", "invoice.paid").ID
	require.Equal(t, 1, h.pairs(t, id, "ledger"), "the receiver without the key makes the route's pair")
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, 1, rt.countReady(c, h.names.RouteQueue("ledger"))) },
		testenv.Scaled(10*time.Second), 20*time.Millisecond, "the message waits in the route's queue")
	require.Zero(t, rt.consumers(t, h.names.RouteQueue("ledger")), "the keyless dispatcher does not consume it")

	// The listing of a process without the key says why.
	list, err := testOps(t, h, amqptest.Dialer(t)).RouteList(opsCtx())
	require.NoError(t, err)
	var shown bool
	for _, r := range list.Routes {
		if r.Route == "ledger" {
			shown = true
			require.Equal(t, "unopened", r.State)
			require.Contains(t, r.StateDetail, "secrets.key is not set")
		}
	}
	require.True(t, shown)
	require.Empty(t, dest.snapshot(), "nothing posted without the route's headers and signature")

	// A dispatcher with the key delivers it, with its header.
	h.startDispatcherWith(keyed, app.DispatcherOptions{})
	dest.waitFor(testenv.Scaled(30*time.Second), "the waiting event", func(rs []received) bool { return len(rs) == 1 })
	got := dest.snapshot()
	require.Equal(t, id, got[0].eventID)
	require.Equal(t, "k-123", got[0].header.Get("X-Api-Key"))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var state string
		require.NoError(c, h.db.Pool().QueryRow(context.Background(), `SELECT state FROM deliveries WHERE event_id = $1 AND route = 'ledger'`, id).Scan(&state))
		assert.Equal(c, "delivered", state)
	}, testenv.Scaled(10*time.Second), 20*time.Millisecond, "recorded delivered")
	require.Equal(t, 0, rt.countReady(t, h.names.DeadQueue("ledger")))
}

// Issue 38, reliability 1: a dispatcher left running with the old key
// only (not restarted for a key rotation) keeps delivering what it opened,
// and when a change seals the route's headers with the new key, it can no
// longer open it but keeps (and follows) its bindings; a dispatcher with
// the new key delivers what waited.
func TestDispatcherWithTheOldKeyDoesNotUnbindAChangedRoute(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.cfg.Secrets = config.Secrets{Key: rotationKey1, Overlap: time.Hour}
	t.Cleanup(func() { deleteRuntimeRouteQueues(t, h) })
	rt := &runtimeHarness{harness: h, conn: amqptest.Dial(t)}
	dest := newDestination(t, func(http.ResponseWriter, *http.Request, []byte, string, int) int { return http.StatusOK })
	h.start(app.ReceiverOptions{})
	h.startDispatcher(app.DispatcherOptions{}) // key 1 only
	oldBase := h.dispatcherBase

	before := testOps(t, h, amqptest.Dialer(t))
	url := dest.url("ledger")
	_, err := before.RouteCreate(opsCtx(), "ledger", ops.RouteInput{URL: &url, Bindings: []string{"acme.invoice.*"},
		Headers: map[string]string{"X-Api-Key": "k-123"}})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Positive(c, rt.consumers(c, h.names.RouteQueue("ledger"))) },
		testenv.Scaled(5*time.Second), 20*time.Millisecond)
	first := h.postSigned("old-1", "invoice.paid").ID
	dest.waitFor(testenv.Scaled(30*time.Second), "the first event", func(rs []received) bool { return len(rs) == 1 })

	// The rotation, as the docs say, but this dispatcher is left behind:
	// key 2 with key 1 as previous, reseal, and a change made there.
	after := testOpsWith(t, h, withKeys(h.cfg, rotationKey2, rotationKey1), amqptest.Dialer(t))
	n, err := after.RouteReseal(opsCtx())
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, err = after.RouteUpdate(opsCtx(), "ledger", ops.RouteInput{Bindings: []string{"acme.invoice.*", "acme.customer.*"}})
	require.NoError(t, err)

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 1.0, metricValue(c, oldBase, `hookrelay_route_unopened{route="ledger"}`))
		assert.ElementsMatch(c, []string{"acme.invoice.*", "acme.customer.*"}, rt.brokerBindings(c, "ledger"))
		assert.Zero(c, rt.consumers(c, h.names.RouteQueue("ledger")))
	}, testenv.Scaled(5*time.Second), 20*time.Millisecond, "the old dispatcher stops consuming the route but keeps and follows its bindings")

	second := h.postSigned("old-2", "invoice.paid").ID
	require.Equal(t, 1, h.pairs(t, second, "ledger"))
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, 1, rt.countReady(c, h.names.RouteQueue("ledger"))) },
		testenv.Scaled(10*time.Second), 20*time.Millisecond, "the event waits in the route's queue")

	h.startDispatcherWith(withKeys(h.cfg, rotationKey2), app.DispatcherOptions{})
	dest.waitFor(testenv.Scaled(30*time.Second), "the waiting event", func(rs []received) bool { return len(rs) == 2 })
	got := dest.snapshot()
	require.Equal(t, []string{first, second}, eventsOf(got))
	require.Equal(t, "k-123", got[1].header.Get("X-Api-Key"))
}

// Issue 38, reliability 1: a receiver or a dispatcher whose keys can never
// open a run-time route (no secrets.key, or keys that did not seal it)
// refuses to start, naming the route and the fix.
func TestProcessesRefuseToStartWithoutTheKeyOfARoute(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.cfg.Secrets = config.Secrets{Key: rotationKey1, Overlap: time.Hour}
	t.Cleanup(func() { deleteRuntimeRouteQueues(t, h) })
	url := "http://127.0.0.1:9/"
	_, err := testOps(t, h, amqptest.Dialer(t)).RouteCreate(opsCtx(), "ledger", ops.RouteInput{URL: &url, Bindings: []string{"acme.invoice.*"}})
	require.NoError(t, err)

	for _, c := range []struct {
		name string
		cfg  *config.Config
		want string
	}{
		{"no key", withKeys(h.cfg, ""), "secrets.key is not set"},
		{"another key", withKeys(h.cfg, rotationKey3), "neither secrets.key nor one of secrets.previous_keys"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), testenv.Scaled(30*time.Second))
		derr := app.RunDispatcher(ctx, c.cfg, app.DispatcherOptions{Logger: zerolog.Nop()})
		rerr := app.RunReceiver(ctx, c.cfg, app.ReceiverOptions{Logger: zerolog.Nop()})
		cancel()
		for what, err := range map[string]error{"dispatcher": derr, "receiver": rerr} {
			require.Error(t, err, "%s, %s", what, c.name)
			require.ErrorContains(t, err, "route ledger", "%s, %s", what, c.name)
			require.ErrorContains(t, err, c.want, "%s, %s", what, c.name)
			require.ErrorContains(t, err, "secrets.previous_keys", "%s, %s: the error names the fix", what, c.name)
		}
	}
	// The previous key opens it: that process starts.
	h.cfg = withKeys(h.cfg, rotationKey3, rotationKey1)
	h.start(app.ReceiverOptions{})
	h.startDispatcher(app.DispatcherOptions{})
}

// Issue 38, security 3: hookrelay routes reseal seals a route's header
// values with the new key too: once every process has only the new key
// (the rotation's last step), the processes start and the route delivers
// with its headers.
func TestResealedRouteDeliversWithItsHeadersOnceTheOldKeyIsGone(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.cfg.Secrets = config.Secrets{Key: rotationKey1, Overlap: time.Hour}
	t.Cleanup(func() { deleteRuntimeRouteQueues(t, h) })
	dest := newDestination(t, func(http.ResponseWriter, *http.Request, []byte, string, int) int { return http.StatusOK })
	url := dest.url("ledger")
	_, err := testOps(t, h, amqptest.Dialer(t)).RouteCreate(opsCtx(), "ledger", ops.RouteInput{URL: &url, Bindings: []string{"acme.invoice.*"},
		Headers: map[string]string{"X-Api-Key": "k-123"}})
	require.NoError(t, err)

	// The rotation: the new key with the old one as previous, reseal, then
	// the old key removed from every process.
	n, err := testOpsWith(t, h, withKeys(h.cfg, rotationKey2, rotationKey1), amqptest.Dialer(t)).RouteReseal(opsCtx())
	require.NoError(t, err)
	require.Equal(t, 1, n)
	h.cfg = withKeys(h.cfg, rotationKey2)
	h.start(app.ReceiverOptions{})
	h.startDispatcher(app.DispatcherOptions{})

	id := h.postSigned("resealed-1", "invoice.paid").ID
	dest.waitFor(testenv.Scaled(30*time.Second), "the event", func(rs []received) bool { return len(rs) == 1 })
	got := dest.snapshot()
	require.Equal(t, id, got[0].eventID)
	require.Equal(t, "k-123", got[0].header.Get("X-Api-Key"), "the header value, resealed, is sent")
}
