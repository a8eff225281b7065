package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	hamqp "github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/config"
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
			in <- struct{}{}
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
		require.NoError(t, h.db.Pool().QueryRow(context.Background(),
			`SELECT state, attempts, reconciled FROM deliveries WHERE event_id = $1 AND route = 'billing'`, id).Scan(&state, &attempts, &reconciled))
		require.Equal(t, webhook.StateDelivered, state, id)
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
	}, 10*time.Second, 20*time.Millisecond, "the dispatcher consumes the new queue")
	h.waitQueuesEmpty(10 * time.Second)
}
