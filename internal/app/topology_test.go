package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"sort"
	"testing"
	"time"

	hamqp "github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/routeset"
	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The committed definitions file must be what the code declares for the
// default config; `make topology` regenerates it.
func TestDefinitionsFileIsCurrent(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load("../../config.yaml", func(k string) (string, bool) {
		switch k {
		case "HOOKRELAY_DEMO_SECRET":
			return "unused", true
		case "BILLING_SIGNING_SECRET":
			return "whsec_ZGVtby1zaWduaW5nLXNlY3JldC0xMjM0NTY3ODkw", true
		}
		return "", false
	})
	require.NoError(t, err)
	want, err := setup.Topology(cfg).Definitions()
	require.NoError(t, err)
	got, err := os.ReadFile("../../topology/definitions.json")
	require.NoError(t, err)
	require.Equal(t, string(want), string(got), "topology/definitions.json is stale: run `make topology`")
}

// Importing the definitions file and then declaring the same topology from
// code must agree: a differing argument makes the declaration fail with 406,
// and the bindings the broker reports must be exactly the code's.
func TestDefinitionsImportMatchesDeclaration(t *testing.T) {
	t.Parallel()
	conn := amqptest.Dial(t)
	amqptest.RequireManagement(t)
	prefix := amqptest.Prefix(t)
	cfg := &config.Config{
		AMQP:       config.AMQP{Prefix: prefix},
		Retry:      config.Retry{Backoff: []time.Duration{time.Second, 5 * time.Minute}},
		Dispatcher: config.Dispatcher{DeliveryLimit: 5},
		Routes: []config.Route{
			{Name: "billing", Bindings: []string{"stripe.invoice.*", "stripe.payment_intent.#"}},
			{Name: "crm", Bindings: []string{"*.customer.*"}},
		},
	}
	topo := setup.Topology(cfg)
	amqptest.DeleteTopology(t, topo)
	defs, err := topo.Definitions()
	require.NoError(t, err)

	resp, err := http.Post(testenv.ManagementURL()+"/api/definitions", "application/json", bytes.NewReader(defs))
	require.NoError(t, err)
	resp.Body.Close()
	require.Less(t, resp.StatusCode, 300, "import: %s", resp.Status)

	require.NoError(t, topo.Declare(amqptest.Channel(t, conn)), "code and definitions file disagree")

	for _, q := range topo.Queues {
		var got []string
		for _, b := range listBindings(t, q.Name) {
			got = append(got, b.Source+" "+b.RoutingKey)
		}
		var want []string
		for _, b := range topo.Bindings {
			if b.Queue == q.Name {
				want = append(want, b.Exchange+" "+b.RoutingKey)
			}
		}
		sort.Strings(got)
		sort.Strings(want)
		require.Equal(t, want, got, "bindings of %s", q.Name)
	}

	// The delivery limit policy applies to route queues, not to dead ones
	// (the management API shows it after its next stats tick).
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.Equal(c, prefix+".route-delivery-limit", queuePolicy(c, prefix+".route.billing"))
	}, testenv.Scaled(20*time.Second), 200*time.Millisecond)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.Equal(c, prefix+".parking-no-delivery-limit", queuePolicy(c, prefix+".route.billing.dead"))
		require.Equal(c, prefix+".parking-no-delivery-limit", queuePolicy(c, prefix+".unrouted"))
	}, testenv.Scaled(20*time.Second), 200*time.Millisecond, "dead and unrouted queues have no practical delivery limit")
}

// A message that keeps coming back without an outcome (a dispatcher that
// crashes on it) is parked in the dead-letter queue by the delivery limit,
// at least once, instead of looping forever.
func TestDeliveryLimitParksPoisonMessage(t *testing.T) {
	t.Parallel()
	conn := amqptest.Dial(t)
	amqptest.RequireManagement(t)
	prefix := amqptest.Prefix(t)
	cfg := &config.Config{
		AMQP:       config.AMQP{URL: testenv.AMQPURL(), Prefix: prefix, ManagementURL: testenv.ManagementURL()},
		Dispatcher: config.Dispatcher{DeliveryLimit: 2},
		Retry:      config.Retry{Backoff: []time.Duration{time.Second}},
		Routes:     []config.Route{{Name: "billing", Bindings: []string{"acme.#"}}},
	}
	topo := setup.Topology(cfg)
	amqptest.DeleteTopology(t, topo)
	ch := amqptest.Channel(t, conn)
	require.NoError(t, topo.Declare(ch))
	require.NoError(t, hamqp.ApplyPolicies(context.Background(), cfg.AMQP.Management(), cfg.AMQP.URL, topo.Policies))
	names := hamqp.Names{Prefix: prefix}
	require.NoError(t, ch.PublishWithContext(context.Background(), names.Events(), "acme.invoice.paid", false, false,
		amqp091.Publishing{MessageId: "poison", Body: []byte("x")}))
	amqptest.WaitCount(t, ch, names.RouteQueue("billing"), 1, 5*time.Second)

	// Deliveries 1..3 are returned without an outcome; the limit of 2
	// redeliveries parks the message.
	for i := 0; ; i++ {
		d, ok, err := ch.Get(names.RouteQueue("billing"), false)
		require.NoError(t, err)
		if !ok {
			break
		}
		require.Less(t, i, 5, "the delivery limit never parked the message")
		require.NoError(t, d.Nack(false, true))
	}
	amqptest.WaitCount(t, ch, names.DeadQueue("billing"), 1, 10*time.Second)
	dead := amqptest.Drain(t, ch, names.DeadQueue("billing"))
	require.Equal(t, "poison", dead[0].MessageId)
	deaths, _ := dead[0].Headers["x-death"].([]any)
	require.NotEmpty(t, deaths)
	require.Equal(t, "delivery_limit", deaths[0].(amqp091.Table)["reason"])
}

func queuePolicy(t tb, queue string) string {
	t.Helper()
	resp, err := http.Get(testenv.ManagementURL() + "/api/queues/%2F/" + url.PathEscape(queue))
	require.NoError(t, err)
	defer resp.Body.Close()
	var q struct {
		Policy string `json:"policy"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&q))
	return q.Policy
}

type mgmtBinding struct {
	Source     string `json:"source"`
	RoutingKey string `json:"routing_key"`
}

// listBindings returns the queue's bindings except the default exchange's.
func listBindings(t *testing.T, queue string) []mgmtBinding {
	t.Helper()
	resp, err := http.Get(testenv.ManagementURL() + "/api/queues/%2F/" + url.PathEscape(queue) + "/bindings")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var all []mgmtBinding
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&all))
	var out []mgmtBinding
	for _, b := range all {
		if b.Source != "" {
			out = append(out, b)
		}
	}
	return out
}

// Ingest records a pending delivery for each route whose bindings match,
// computed in Go; the broker must route exactly the same way.
func TestTopicMatchAgreesWithTheBroker(t *testing.T) {
	t.Parallel()
	conn := amqptest.Dial(t)
	prefix := amqptest.Prefix(t)
	patterns := map[string][]string{
		"a": {"stripe.invoice.*"},
		"b": {"stripe.#"},
		"c": {"*.invoice.paid", "shopify.orders/create"},
		"d": {"#.paid"},
		"e": {"x.#.y.*"},
	}
	cfg := &config.Config{AMQP: config.AMQP{Prefix: prefix}}
	for name, p := range patterns {
		cfg.Routes = append(cfg.Routes, config.Route{Name: name, Bindings: p})
	}
	topo := setup.Topology(cfg)
	amqptest.DeleteTopology(t, topo)
	ch := amqptest.Channel(t, conn)
	require.NoError(t, topo.Declare(ch))
	keys := []string{"stripe.invoice.paid", "stripe.invoice", "stripe", "stripe.charge.refunded.late",
		"acme.invoice.paid", "shopify.orders/create", "paid", "a.b.paid", "x.y.z", "x.q.r.y.z", "x.y"}
	names := hamqp.Names{Prefix: prefix}
	require.NoError(t, ch.Confirm(false))
	for _, k := range keys {
		// Confirmed: routed into every queue before anything is counted.
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), names.Events(), k, false, false,
			amqp091.Publishing{MessageId: k})
		require.NoError(t, err)
		acked, err := dc.WaitContext(context.Background())
		require.NoError(t, err)
		require.True(t, acked)
	}
	match := routeset.Of(cfg.Routes...).Match
	want := map[string][]string{}
	for _, k := range keys {
		for _, r := range match(k) {
			want[r] = append(want[r], k)
		}
	}
	for name := range patterns {
		amqptest.WaitCount(t, ch, names.RouteQueue(name), len(want[name]), 10*time.Second)
		var got []string
		for _, d := range amqptest.Drain(t, ch, names.RouteQueue(name)) {
			got = append(got, d.MessageId)
		}
		require.ElementsMatch(t, want[name], got, "route %s %v", name, patterns[name])
	}
}
