package app_test

import (
	"context"
	"fmt"
	"net/http"
	neturl "net/url"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/rabbitmq/amqp091-go"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// amqpRoute is a route of kind amqp publishing to exchange on url.
func amqpRoute(name, url, exchange, key string, bindings ...string) config.Route {
	r := testRoute(name, url, bindings...)
	r.Kind, r.Exchange, r.RoutingKey = config.KindAMQP, exchange, key
	return r
}

// declareTarget declares a topic exchange on the test broker, and, when
// queue is not "", a queue bound to it with pattern "#"; both are deleted
// when the test ends.
func declareTarget(t *testing.T, h *harness, exchange, queue string) {
	t.Helper()
	require.NoError(t, h.ch.ExchangeDeclare(exchange, "topic", false, false, false, false, nil))
	t.Cleanup(func() { _ = h.ch.ExchangeDelete(exchange, false, false) })
	if queue == "" {
		return
	}
	_, err := h.ch.QueueDeclare(queue, false, false, false, false, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = h.ch.QueueDelete(queue, false, false, false) })
	require.NoError(t, h.ch.QueueBind(queue, "#", exchange, false, nil))
}

// attemptErrors returns the errors of route's attempts on event id, in
// order.
func (h *harness) attemptErrors(id, route string) []string {
	h.t.Helper()
	return h.strings(`
		SELECT coalesce(a.error, '') FROM delivery_attempts a JOIN deliveries d ON d.id = a.delivery_id
		WHERE d.event_id = $1 AND d.route = $2 ORDER BY a.id`, id, route)
}

// Issue 43: a route of kind amqp publishes each event into an exchange,
// here on the relay's own broker: a queue bound to it gets each event
// once, as message_id the event's id, with the Standard Webhooks headers
// that verify with the route's secret and the routing key its template
// makes. A missing exchange and a message no queue takes are failed
// attempts that retry and then dead-letter; an event its key cannot be
// made of goes to the dead letters at once, and a login the broker
// refuses fails each attempt without showing the password. Nothing
// loops: the relay's own queues get nothing of what the routes published.
func TestAMQPRouteDeliversIntoAnExchange(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	prefix := h.names.Prefix
	apps, appsQueue, empty := prefix+"-apps", prefix+"-apps-q", prefix+"-empty"
	declareTarget(t, h, apps, appsQueue)
	declareTarget(t, h, empty, "")
	url := testenv.AMQPURL()
	toq := amqpRoute("toq", url, apps, "{source}.{event_type}.{body.customer}", "acme.invoice.*")
	unroutable := amqpRoute("unroutable", url, empty, "", "acme.invoice.*")
	missing := amqpRoute("missing", url, prefix+"-nowhere", "", "acme.invoice.*")
	nokey := amqpRoute("nokey", url, apps, "{body.absent}", "acme.invoice.*")
	u, err := neturl.Parse(url)
	require.NoError(t, err)
	u.User = neturl.UserPassword("guest", "not-the-password")
	badLogin := amqpRoute("badlogin", u.String(), apps, "", "acme.invoice.*")
	for _, r := range []*config.Route{&unroutable, &missing, &badLogin} {
		r.MaxAttempts = 2
	}
	h.cfg.Routes = []config.Route{toq, unroutable, missing, nokey, badLogin}
	h.start(app.ReceiverOptions{})
	h.startDispatcher(app.DispatcherOptions{})

	bodies := map[string]string{}
	var ids []string
	for i := range 3 {
		body := fmt.Sprintf(`{"id":"evt_amqp_%d","type":"invoice.paid","customer":"cus_%d"}`, i, i)
		id := h.postAcme(body).ID
		bodies[id] = body
		ids = append(ids, id)
	}
	for _, id := range ids {
		h.waitPair(id, "toq", webhook.StateDelivered)
		h.waitPair(id, "unroutable", webhook.StateDead)
		h.waitPair(id, "missing", webhook.StateDead)
		h.waitPair(id, "nokey", webhook.StateDead)
		h.waitPair(id, "badlogin", webhook.StateDead)
	}
	for _, r := range h.cfg.Routes {
		amqptest.WaitCount(t, h.ch, h.names.RouteQueue(r.Name), 0, testenv.Scaled(10*time.Second))
	}

	got := amqptest.Drain(t, h.ch, appsQueue)
	require.Len(t, got, 3, "each event once in the bound queue, nothing of nokey's")
	wh, err := standardwebhooks.NewWebhook(testSigningSecret)
	require.NoError(t, err)
	var seen []string
	for _, d := range got {
		body, ok := bodies[d.MessageId]
		require.True(t, ok, "message_id %q is an event's id", d.MessageId)
		seen = append(seen, d.MessageId)
		require.Equal(t, body, string(d.Body))
		require.Equal(t, "invoice.paid", d.Type)
		require.Equal(t, "application/json", d.ContentType)
		require.Equal(t, uint8(amqp091.Persistent), d.DeliveryMode)
		i := slices.Index(ids, d.MessageId)
		require.Equal(t, fmt.Sprintf("acme.invoice.paid.cus_%d", i), d.RoutingKey)
		hdr := http.Header{}
		for _, k := range []string{"webhook-id", "webhook-timestamp", "webhook-signature"} {
			v, ok := d.Headers[k].(string)
			require.True(t, ok, "header %s", k)
			hdr.Set(k, v)
		}
		require.Equal(t, d.MessageId, hdr.Get("webhook-id"))
		require.NoError(t, wh.Verify(d.Body, hdr), "the message verifies with the route's secret")
		require.Equal(t, "1", d.Headers["x-hookrelay-attempt"])
	}
	require.ElementsMatch(t, ids, seen)

	for _, id := range ids {
		errs := h.attemptErrors(id, "unroutable")
		require.Len(t, errs, 2, "unroutable: retried, then dead")
		for _, e := range errs {
			require.Contains(t, e, "NO_ROUTE")
		}
		errs = h.attemptErrors(id, "missing")
		require.Len(t, errs, 2, "missing: retried, then dead")
		for _, e := range errs {
			require.Contains(t, e, "no exchange")
		}
		errs = h.attemptErrors(id, "badlogin")
		require.Len(t, errs, 2, "badlogin: retried, then dead")
		for _, e := range errs {
			require.Contains(t, e, "the destination broker refused the connection")
			require.NotContains(t, e, "not-the-password")
		}
		errs = h.attemptErrors(id, "nokey")
		require.Len(t, errs, 1, "nokey: dead at once, no retry")
		require.Contains(t, errs[0], "routing_key_error")
	}
	for _, r := range []string{"unroutable", "missing", "nokey", "badlogin"} {
		require.Equal(t, 3, amqptest.Count(t, h.ch, h.names.DeadQueue(r)), "%s's dead letters", r)
	}

	// Nothing looped back into the relay: three events stored, none
	// unrouted, and every route's queue is empty.
	var events int
	require.NoError(t, h.db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM events`).Scan(&events))
	require.Equal(t, 3, events)
	require.Zero(t, amqptest.Count(t, h.ch, h.names.Unrouted()))
	require.Zero(t, amqptest.Count(t, h.ch, appsQueue), "no second copy")
}

// Issue 43: the destination broker unreachable fails every publish: the
// route's circuit opens, the events wait (none dead), and once the broker
// is back each is delivered once.
func TestAMQPRouteCircuitOpensWhileItsBrokerIsDown(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	prefix := h.names.Prefix
	apps, appsQueue := prefix+"-apps", prefix+"-apps-q"
	declareTarget(t, h, apps, appsQueue)
	url := testenv.AMQPURL()
	proxy := proxied(t, &url)
	r := amqpRoute("toq", url, apps, "", "acme.invoice.*")
	r.MaxAttempts = 50
	r.Concurrency = 2
	r.Circuit = config.Circuit{Failures: 3, Cooldown: 2 * time.Second}
	h.cfg.Routes = []config.Route{r}
	h.start(app.ReceiverOptions{})
	h.startDispatcher(app.DispatcherOptions{})
	proxy.Cut()

	var ids []string
	for i := range 5 {
		ids = append(ids, h.postAcme(fmt.Sprintf(`{"id":"evt_down_%d","type":"invoice.paid"}`, i)).ID)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.Equal(c, webhook.CircuitOpen, h.routeState(c, "toq").Circuit)
	}, testenv.Scaled(20*time.Second), 20*time.Millisecond, "the circuit opens")
	for _, id := range ids {
		st, _, err := h.db.DeliveryGet(context.Background(), uuid.MustParse(id), "toq")
		require.NoError(t, err)
		require.NotEqual(t, webhook.StateDead, st, "%s waits", id)
		require.NotEqual(t, webhook.StateDelivered, st, "%s: the broker is down", id)
	}
	require.Zero(t, amqptest.Count(t, h.ch, appsQueue))

	proxy.Restore()
	for _, id := range ids {
		h.waitPair(id, "toq", webhook.StateDelivered)
	}
	h.waitQueuesEmpty(testenv.Scaled(10 * time.Second))
	got := amqptest.Drain(t, h.ch, appsQueue)
	var seen []string
	for _, d := range got {
		seen = append(seen, d.MessageId)
	}
	require.ElementsMatch(t, ids, seen, "each event once")
	require.Zero(t, amqptest.Count(t, h.ch, h.names.DeadQueue("toq")))
}
