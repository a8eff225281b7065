package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	hamqp "github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/hookrelay/hookrelay/internal/webhook"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// heldDestination answers 200 to everything but the first POST of the
// event whose body id is held: that one it holds until release is closed,
// after saying on arrived that it came. Closing release is registered as a
// cleanup, so a failed test does not leave a request hanging.
func heldDestination(t *testing.T, held string) (dest *destination, arrived <-chan struct{}, release func()) {
	t.Helper()
	in := make(chan struct{}, 1)
	out := make(chan struct{})
	dest = newDestination(t, func(_ http.ResponseWriter, _ *http.Request, body []byte, _ string, prior int) int {
		var ev struct{ ID string }
		_ = json.Unmarshal(body, &ev)
		if ev.ID == held && prior == 0 {
			// Never blocks but on out: a second first POST (the held one
			// aborted by a shutdown, sent again) must not wait on in,
			// which nobody reads any more, or the server's Close would
			// wait for it forever and hang the whole package.
			select {
			case in <- struct{}{}:
			default:
			}
			<-out
		}
		return http.StatusOK
	})
	closed := false
	release = func() {
		if !closed {
			closed = true
			close(out)
		}
	}
	t.Cleanup(release) // before the server's Close, which waits for handlers
	return dest, in, release
}

// queueConsumers reads how many consumers queue has, as the broker counts
// them now (a passive declare, answered by the queue itself).
func queueConsumers(ch *amqp091.Channel, queue string) (int, error) {
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		return 0, err
	}
	return q.Consumers, nil
}

// requireOnceEach checks that each of ids reached the destination with
// exactly one POST, answered 200, and that nothing else came.
func requireOnceEach(t *testing.T, dest *destination, ids []string) {
	t.Helper()
	want := map[string]int{}
	for _, id := range ids {
		want["billing "+id] = 1
	}
	require.Equal(t, want, dest.successes(), "every pair delivered exactly once")
	require.Len(t, dest.snapshot(), len(ids), "no POST beyond one per event")
}

// Issue 24: an operator deletes a route queue and declares it again at
// once, while events wait in it and one is in flight. RabbitMQ may cancel
// the dispatcher's consumer (basic.cancel, which closes only the
// deliveries), or, as 3.10 does when the declare comes first, send no
// cancel and attach the consumer to the new queue, which hands it one
// message that never arrives and keeps the rest ready. Either way the
// dispatcher finishes the delivery in hand and consumes the new queue
// afresh: after the cancel, or when its consumer has received nothing for
// two readings of a queue with ready messages. The events that went with
// the old queue are sent again by the reconciler from Postgres, and every
// event reaches the destination exactly once.
func TestDispatcherResumesWhenItsQueueIsDeletedAndDeclaredAgain(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	// As short as validation allows (reconcile.margin at least 15s): the
	// reconciler is what brings the lost events back.
	h.cfg.Reconcile = config.Reconcile{Interval: 500 * time.Millisecond, Margin: 15 * time.Second, StrandAfter: 15 * time.Second}
	dest, arrived, release := heldDestination(t, "evt_in_flight")
	route := &h.cfg.Routes[0]
	route.URL = dest.url("billing")
	route.Concurrency = 1 // the held delivery keeps the others waiting in the queue
	route.Timeout = 45 * time.Second
	logs := newLogWatch(t)
	h.dispatcherLogs = logs
	h.start(app.ReceiverOptions{})
	h.startDispatcher(app.DispatcherOptions{ConsumerIdleCheck: 2 * time.Second})
	queue := h.names.RouteQueue("billing")

	inFlight := h.postSigned("evt_in_flight", "invoice.paid")
	require.Equal(t, http.StatusOK, inFlight.status, inFlight.Error)
	<-arrived
	var waiting []string
	for i := range 3 {
		r := h.postSigned(fmt.Sprintf("evt_waiting_%d", i), "invoice.paid")
		require.Equal(t, http.StatusOK, r.status, r.Error)
		waiting = append(waiting, r.ID)
	}
	amqptest.WaitCount(t, h.ch, queue, 3, 15*time.Second)

	// The operator's delete and declare, with the arguments and bindings
	// of our topology.
	purged, err := h.ch.QueueDelete(queue, false, false, false)
	require.NoError(t, err)
	require.Equal(t, 3, purged, "the waiting events went with the queue")
	require.NoError(t, h.names.RouteTopology(hamqp.RouteConfig{Name: "billing", Bindings: route.Bindings}).Declare(h.ch))
	deletedAt := time.Now()

	release()
	after := h.postSigned("evt_after", "invoice.paid")
	require.Equal(t, http.StatusOK, after.status, after.Error)
	all := append([]string{inFlight.ID, after.ID}, waiting...)
	dest.waitFor(50*time.Second, "every event", func([]received) bool { return len(dest.successes()) == len(all) })
	t.Logf("every event delivered %s after the queue was deleted", time.Since(deletedAt).Round(100*time.Millisecond))
	cancelled, unserved := logs.count("cancelled by the broker (basic.cancel"), logs.count("the broker no longer delivers to it")
	t.Logf("the consumer started over after: a basic.cancel %d time(s), receiving nothing from a queue with ready messages %d time(s)", cancelled, unserved)
	require.Positive(t, cancelled+unserved, "the consumer started over")
	requireOnceEach(t, dest, all)
	for _, id := range all {
		var state webhook.DeliveryState
		var attempts, reconciled int
		// The dispatcher records a delivery once its POST answered.
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			require.NoError(c, h.db.Pool().QueryRow(context.Background(),
				`SELECT state, attempts, reconciled FROM deliveries WHERE event_id = $1 AND route = 'billing'`, id).Scan(&state, &attempts, &reconciled))
			assert.Equal(c, webhook.StateDelivered, state, id)
		}, testenv.Scaled(5*time.Second), 20*time.Millisecond, "recorded delivered: %s", id)
		require.Equal(t, 1, attempts, id)
		switch {
		case slices.Contains(waiting, id):
			require.Equal(t, 1, reconciled, "an event lost with the queue is sent again: %s", id)
		case id == inFlight.ID:
			require.Zero(t, reconciled, "the event in flight is not sent again")
		default:
			// evt_after may have waited in the new queue, handed to a
			// consumer that never got it, past the margin: sent again,
			// its first copy then dropped as stale.
			t.Logf("evt_after sent again by the reconciler: %d", reconciled)
		}
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		n, err := queueConsumers(h.ch, queue)
		require.NoError(c, err)
		require.Equal(c, 1, n)
	}, testenv.Scaled(10*time.Second), 20*time.Millisecond, "the dispatcher consumes the new queue")
	h.waitQueuesEmpty(10 * time.Second)
}

// brokerEnv reads the broker's application setting rabbit.key with
// rabbitmqctl eval: the Erlang term of {ok, Value}, or "" when it is
// undefined.
func brokerEnv(t *testing.T, key string) string {
	t.Helper()
	out, err := rabbitmqEval(fmt.Sprintf("application:get_env(rabbit, %s).", key))
	require.NoError(t, err)
	if v, ok := strings.CutPrefix(out, "{ok,"); ok {
		return strings.TrimSuffix(v, "}")
	}
	require.Equal(t, "undefined", out, "rabbit.%s", key)
	return ""
}

// setBrokerEnv sets rabbit.key to the Erlang term value, or unsets it when
// value is "".
func setBrokerEnv(t *testing.T, key, value string) {
	t.Helper()
	expr := fmt.Sprintf("application:set_env(rabbit, %s, %s).", key, value)
	if value == "" {
		expr = fmt.Sprintf("application:unset_env(rabbit, %s).", key)
	}
	out, err := rabbitmqEval(expr)
	require.NoError(t, err)
	require.Equal(t, "ok", out, expr)
}

// overrideBrokerEnv sets rabbit.key to value and returns the function
// that puts back the value it had, also registered as a cleanup (either
// may run first; the second does nothing).
func overrideBrokerEnv(t *testing.T, key, value string) (restore func()) {
	t.Helper()
	orig := brokerEnv(t, key)
	done := false
	restore = func() {
		if !done {
			done = true
			setBrokerEnv(t, key, orig)
		}
	}
	t.Cleanup(restore)
	setBrokerEnv(t, key, value)
	return restore
}

// rabbitmqEval runs rabbitmqctl eval expr on the local broker (the
// Debian wrapper switches to the rabbitmq user and its cookie) and returns
// what it printed, trimmed.
func rabbitmqEval(expr string) (string, error) {
	path, err := exec.LookPath("rabbitmqctl")
	if err != nil {
		path = "/usr/sbin/rabbitmqctl"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "-q", "eval", expr).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("rabbitmqctl eval %q: %w: %s", expr, err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// Issue 24: a delivery held past the broker's consumer timeout. RabbitMQ
// 3.x closes the consumer's channel with 406 PRECONDITION_FAILED
// ("delivery acknowledgement ... timed out") and requeues the message. The
// held delivery finishes and records, its ack fails on the dead channel,
// and the dispatcher reconnects and goes on. The copy, taken by the other
// consumer while the held delivery runs (it waits for that lease) or after
// the consumers start over, is known to be delivered and acked without a
// POST: the event reaches the destination once, and the later ones are
// delivered.
//
// The broker's consumer_timeout is lowered to 5s for the channels the
// dispatcher opens at its start (3.x reads it when a channel opens), and
// put back as soon as they are open, so that other packages' tests running
// meanwhile keep the 30 minutes; its check runs at every channel tick,
// lowered from 60s to 1s until the channel is closed. Not parallel: the
// window must stay short.
func TestDispatcherResumesAfterTheBrokersConsumerTimeout(t *testing.T) {
	testenv.Require(t, "rabbitmqctl for the local broker", func() error {
		_, err := rabbitmqEval("application:get_env(rabbit, consumer_timeout).")
		return err
	})
	h := newHarness(t)
	dest, arrived, release := heldDestination(t, "evt_held")
	route := &h.cfg.Routes[0]
	route.URL = dest.url("billing")
	route.Concurrency = 2
	route.Timeout = 45 * time.Second // far past the hold: the broker acts first
	logs := newLogWatch(t)
	h.dispatcherLogs = logs
	h.start(app.ReceiverOptions{})

	restoreTick := overrideBrokerEnv(t, "channel_tick_interval", "1000")
	restoreTimeout := overrideBrokerEnv(t, "consumer_timeout", "5000")
	h.startDispatcher(app.DispatcherOptions{}) // ready: its consumers' channels are open
	restoreTimeout()
	queue := h.names.RouteQueue("billing")

	held := h.postSigned("evt_held", "invoice.paid")
	require.Equal(t, http.StatusOK, held.status, held.Error)
	<-arrived
	heldAt := time.Now()
	// The broker closes the holding consumer's channel: fewer than two
	// consumers. The session, told of the closed channel, may stop the
	// other consumer at once (it starts both over once the held delivery
	// ends), so none left is as good as one.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		n, err := queueConsumers(h.ch, queue)
		require.NoError(c, err)
		require.Less(c, n, 2)
	}, testenv.Scaled(30*time.Second), 20*time.Millisecond, "the broker closes the channel of the consumer holding the message")
	closedAfter := time.Since(heldAt)
	restoreTick()
	t.Logf("the broker closed the holding consumer's channel %s after the POST began (consumer_timeout 5s, ticks every 1s)", closedAfter.Round(10*time.Millisecond))
	require.Greater(t, closedAfter, 4500*time.Millisecond, "not before the timeout (less the claim before the POST)")
	// The copy the broker requeued meets the held delivery one of two
	// ways, by a race this test does not control: the other consumer
	// takes it before the session, told of the closed channel, cancels
	// its consumers, and it waits for the held delivery's lease; or it
	// stays in the queue (or in a cancelled consumer's prefetch) until the
	// consumers start over, after the held delivery ends, and finds the
	// outcome recorded. Either way it is acked without a POST.
	release()
	// The consumers start over. The reconnect line usually names the
	// broker's reason (406 "delivery acknowledgement on channel ... timed
	// out"); on a slow run the copy's channel times out too (it was opened
	// with the same 5s), and a frame the client sends on it as the broker
	// closes it makes the broker close the whole connection (504
	// CHANNEL_ERROR) first. Either way every consumer starts over, which is
	// what this test is about.
	logs.waitFor("rabbitmq connection lost; reconnecting", 0, 30*time.Second)
	t.Logf("reconnects naming the consumer timeout: %d", logs.count("delivery acknowledgement on channel"))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.Equal(c, 1.0, scrape(c, h.dispatcherBase)[`hookrelay_deliveries_total{outcome="skipped_duplicate",route="billing"}`])
	}, testenv.Scaled(30*time.Second), 20*time.Millisecond, "the requeued copy is acked without a POST")
	t.Logf("the copy waited for the held delivery's lease: %v",
		scrape(t, h.dispatcherBase)[`hookrelay_delivery_leases_total{event="waited",route="billing"}`] >= 1)

	ids := []string{held.ID}
	for i := range 3 {
		r := h.postSigned(fmt.Sprintf("evt_later_%d", i), "invoice.paid")
		require.Equal(t, http.StatusOK, r.status, r.Error)
		ids = append(ids, r.ID)
	}
	dest.waitFor(30*time.Second, "the later events", func([]received) bool { return len(dest.successes()) == len(ids) })
	requireOnceEach(t, dest, ids)
	state, attempts, err := h.db.DeliveryGet(context.Background(), uuid.MustParse(held.ID), "billing")
	require.NoError(t, err)
	require.Equal(t, webhook.StateDelivered, state)
	require.Equal(t, 1, attempts, "one attempt recorded for the held event")
	h.waitQueuesEmpty(10 * time.Second)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		n, err := queueConsumers(h.ch, queue)
		require.NoError(c, err)
		require.Equal(c, 2, n)
	}, testenv.Scaled(10*time.Second), 20*time.Millisecond, "both consumers back")
}
