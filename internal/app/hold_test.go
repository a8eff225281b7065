package app_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/stretchr/testify/require"
)

// Issue 24: a delivery waiting for a dependency stops waiting when what
// amqp.consumer_timeout leaves its route is spent, and gives its message
// back, before the broker would take it. Here the broker's timeout is set
// so that 3s are left for the waits, and Postgres is unreachable: the
// message is requeued after 3s, not held for the 10 minutes a Postgres
// outage may otherwise take, and is delivered once Postgres is back.
func TestDeliveryGivesItsMessageBackBeforeTheConsumerTimeout(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	dest := newDestination(t, func(http.ResponseWriter, *http.Request, []byte, string, int) int { return http.StatusOK })
	route := &h.cfg.Routes[0]
	route.URL = dest.url("billing")
	route.Timeout = time.Second
	h.cfg.Database.QueryTimeout = time.Second
	h.start(app.ReceiverOptions{}) // the receiver talks to Postgres directly

	dcfg := *h.cfg
	proxy := proxied(t, &dcfg.Database.URL)
	const budget = 3 * time.Second
	dcfg.AMQP.ConsumerTimeout = config.HoldMargin + dcfg.RouteHold(*route).Tail() + budget
	require.Equal(t, budget, dcfg.HoldBudget(*route))
	logs := newLogWatch(t)
	runDispatcher(t, &dcfg, logs)
	t.Cleanup(proxy.Cut) // runs first: nothing waits on a half-open connection in the cleanup

	proxy.Cut()
	r := h.postSigned("evt_held_too_long", "invoice.paid")
	require.Equal(t, http.StatusOK, r.status, r.Error)
	amqptest.WaitCount(t, h.ch, h.names.RouteQueue("billing"), 0, 15*time.Second)
	taken := time.Now()
	logs.waitFor("what amqp.consumer_timeout leaves the route's waits; given back", 0, 20*time.Second)
	held := time.Since(taken)
	t.Logf("the message was given back %s after the dispatcher took it (budget %s)", held.Round(10*time.Millisecond), budget)
	require.GreaterOrEqual(t, held, budget-100*time.Millisecond, "not before the budget")
	require.Empty(t, dest.snapshot(), "no POST while the delivery cannot be claimed")

	proxy.Restore()
	dest.waitFor(60*time.Second, "the delivery after Postgres is back", func(rs []received) bool { return len(rs) == 1 })
	h.waitPair(r.ID, "billing", webhook.StateDelivered)
	require.Len(t, dest.snapshot(), 1)
}
