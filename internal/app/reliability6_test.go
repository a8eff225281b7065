package app_test

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Issue 38, reliability 6(d): a copy of a delivered pair that turns up
// after its event was purged (a duplicate whose ack was lost, a retry copy
// late from its tier) is stale: purge keeps every event with a pair still
// to deliver, so a purged event's pairs were all final. It is dropped
// without a POST, counted superseded, and is no dead letter (it was one,
// event_missing: a failure that never happened). A day dropped whole
// leaves the same: no pair row and no event (store's
// TestClaimOfAPurgedEventSaysSo). A message of an event never stored is
// still parked as event_missing (TestMessageForPurgedEventIsParked).
func TestStaleCopyOfAPurgedEventIsNoDeadLetter(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	dest := newDestination(t, func(http.ResponseWriter, *http.Request, []byte, string, int) int { return http.StatusOK })
	h.cfg.Routes[0].URL = dest.url("billing")
	h.cfg.Retention.DedupeWindow = 30 * 24 * time.Hour // the default: the purged event's key is kept
	h.start(app.ReceiverOptions{})
	h.startDispatcher(app.DispatcherOptions{})
	svc := testOps(t, h, amqptest.Dialer(t))

	id := h.postSigned("evt_purged", "invoice.paid").ID
	require.Eventually(t, func() bool {
		state, _, err := h.db.DeliveryGet(context.Background(), uuid.MustParse(id), "billing")
		return err == nil && state == webhook.StateDelivered
	}, testenv.Scaled(20*time.Second), 20*time.Millisecond, "delivered")
	h.waitOutboxEmpty(10 * time.Second)
	_, err := h.db.Pool().Exec(t.Context(), `UPDATE events SET received_at = now() - interval '40 days'`)
	require.NoError(t, err)
	res, err := svc.Purge(opsCtx(), ops.PurgeRequest{OlderThan: 7 * 24 * time.Hour})
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Events, "%+v", res)

	// The event's first copy comes back.
	require.NoError(t, h.ch.PublishWithContext(t.Context(), "", h.names.RouteQueue("billing"), false, false, amqpPublishing(id)))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 1.0, metricValue(c, h.dispatcherBase, `hookrelay_deliveries_total{outcome="superseded",route="billing"}`))
	}, testenv.Scaled(20*time.Second), 20*time.Millisecond, "the stale copy is dropped as superseded")
	require.Zero(t, amqptest.Count(t, h.ch, h.names.RouteQueue("billing")))
	require.Zero(t, amqptest.Count(t, h.ch, h.names.DeadQueue("billing")), "no dead letter for a pair that was delivered")
	require.Equal(t, 1, dest.successes()["billing "+id], "and no second POST")
}

// Issue 38, reliability 6(a): a dispatcher whose routes lag (it cannot read
// them: Postgres cut off from it) keeps consuming a route deleted and
// retired meanwhile, and at its reconnect declares the route's queue
// again, bindings and all, after the dispatcher that retired the route
// deleted it. Nothing would ever remove that queue (the name is never
// reused) while events pile up in it; the sweep deletes it again, and the
// lagging dispatcher, caught up, leaves it gone.
func TestQueueOfARetiredRouteDeclaredAgainIsDeleted(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.cfg.Secrets = config.Secrets{Key: testSecretsKey, Overlap: time.Hour}
	t.Cleanup(func() { deleteRuntimeRouteQueues(t, h) })
	rt := &runtimeHarness{harness: h, conn: amqptest.Dial(t)}
	h.start(app.ReceiverOptions{})
	h.startDispatcher(app.DispatcherOptions{})
	lagging := *h.cfg
	pg := proxied(t, &lagging.Database.URL)
	broker := proxied(t, &lagging.AMQP.URL)
	h.startDispatcherWith(&lagging, app.DispatcherOptions{})

	admin := testOps(t, h, amqptest.Dialer(t))
	url := "http://127.0.0.1:9/"
	_, err := admin.RouteCreate(opsCtx(), "gone", ops.RouteInput{URL: &url, Bindings: []string{"acme.invoice.*"}})
	require.NoError(t, err)
	queue := h.names.RouteQueue("gone")
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, 2, rt.consumers(c, queue)) }, testenv.Scaled(5*time.Second), 20*time.Millisecond,
		"both dispatchers consume it")

	// The lagging dispatcher loses Postgres (its routes stop following)
	// and the broker; meanwhile the route is deleted, retires, and the
	// retiring dispatcher deletes its queue.
	pg.Cut()
	broker.Cut()
	_, err = admin.RouteDelete(opsCtx(), "gone", "")
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, -1, rt.consumers(c, queue)) }, testenv.Scaled(60*time.Second), 50*time.Millisecond,
		"retired, its queue deleted")
	// The lagging dispatcher reconnects to the broker first: it declares
	// the queue again, with the bindings it still has, and consumes it.
	broker.Restore()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, []string{"acme.invoice.*"}, rt.brokerBindings(c, "gone"))
		assert.Equal(c, 1, rt.consumers(c, queue))
	}, testenv.Scaled(60*time.Second), 100*time.Millisecond, "the lagging dispatcher declared the queue again")
	pg.Restore()

	h.postSigned("orphan-1", "invoice.paid") // routed there while it lasts
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, -1, rt.consumers(c, queue)) }, testenv.Scaled(60*time.Second), 100*time.Millisecond,
		"the queue of the retired route is deleted again")
	for range 3 { // and stays gone: the lagging dispatcher caught up
		broker.Cut()
		broker.Restore()
		waitReady(t, h.dispatcherBase)
		require.Equal(t, -1, rt.consumers(t, queue))
	}
}

// Issue 38, reliability 6(b): a pair committed after its route retired
// (an ingest that matched the route before its deletion, its statement
// stalled on its connection past the retirement grace, stands here as an
// insert of that pair) would stay pending for ever: no dispatcher follows a
// retired route. The sweep puts the route back to retiring and sends the
// pair again; the dispatchers finish it as the route's disposal says
// (here, delivered), and the route retires again.
func TestPairCommittedAfterItsRouteRetiredIsFinished(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.cfg.Secrets = config.Secrets{Key: testSecretsKey, Overlap: time.Hour}
	t.Cleanup(func() { deleteRuntimeRouteQueues(t, h) })
	rt := &runtimeHarness{harness: h, conn: amqptest.Dial(t)}
	dest := newDestination(t, func(http.ResponseWriter, *http.Request, []byte, string, int) int { return http.StatusOK })
	h.start(app.ReceiverOptions{})
	h.startDispatcher(app.DispatcherOptions{})
	admin := testOps(t, h, amqptest.Dialer(t))
	url := dest.url("late")
	_, err := admin.RouteCreate(opsCtx(), "late", ops.RouteInput{URL: &url, Bindings: []string{"acme.invoice.*"}})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Positive(c, rt.consumers(c, h.names.RouteQueue("late"))) },
		testenv.Scaled(5*time.Second), 20*time.Millisecond)
	_, err = admin.RouteDelete(opsCtx(), "late", ops.DisposeDeliver)
	require.NoError(t, err)
	retired := func(c require.TestingT) bool {
		var retired bool
		require.NoError(c, h.db.Pool().QueryRow(context.Background(), `SELECT retired_at IS NOT NULL FROM routes WHERE name = 'late'`).Scan(&retired))
		return retired
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.True(c, retired(c)) }, testenv.Scaled(30*time.Second), 50*time.Millisecond)

	id := h.postSigned("late-1", "invoice.paid").ID // no receiver pairs it with late any more
	_, err = h.db.Pool().Exec(t.Context(), `INSERT INTO deliveries (event_id, route) VALUES ($1, 'late')`, id)
	require.NoError(t, err)

	dest.waitFor(testenv.Scaled(60*time.Second), "the late pair delivered", func(rs []received) bool { return len(rs) == 1 })
	require.Equal(t, id, dest.snapshot()[0].eventID)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		state, _, err := h.db.DeliveryGet(context.Background(), uuid.MustParse(id), "late")
		require.NoError(c, err)
		assert.Equal(c, webhook.StateDelivered, state)
		assert.True(c, retired(c), "retired again")
	}, testenv.Scaled(30*time.Second), 50*time.Millisecond, "the route retires again once the late pair is done")
}

// Issue 38, reliability 6(c): an event a receiver accepts after a route
// was made but before it follows it gets no pair (it matched with the
// routes it had), while a dispatcher may already have bound the route's
// queue: its message would sit there unpaired, beyond the reconciler's
// reach, and a purge could drop its day under it. The receiver makes
// those pairs when it follows the change, and again once every request
// matched before has been stored. The lagging receiver's insert stands
// here as an insert of the event with the routes it had (billing only),
// after the receiver under test followed the new route; the pair is
// owed from then on: the reconciler sends it, and it is delivered.
func TestEventAcceptedBeforeAReceiverFollowedANewRouteGetsItsPair(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.cfg.Secrets = config.Secrets{Key: testSecretsKey, Overlap: time.Hour}
	t.Cleanup(func() { deleteRuntimeRouteQueues(t, h) })
	dest := newDestination(t, func(http.ResponseWriter, *http.Request, []byte, string, int) int { return http.StatusOK })
	h.start(app.ReceiverOptions{})
	url := dest.url("fresh")
	_, err := testOps(t, h, amqptest.Dialer(t)).RouteCreate(opsCtx(), "fresh", ops.RouteInput{URL: &url, Bindings: []string{"acme.invoice.*"}})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 0.0, metricValue(c, h.metricsBase, `hookrelay_route_unopened{route="fresh"}`))
	}, testenv.Scaled(5*time.Second), 20*time.Millisecond, "the receiver follows the new route")

	// Accepted by a receiver that had not followed fresh yet: received
	// when the route was made (its request began before the follow).
	var made time.Time
	require.NoError(t, h.db.Pool().QueryRow(t.Context(), `SELECT updated_at FROM routes WHERE name = 'fresh'`).Scan(&made))
	id, err := uuid.NewV7()
	require.NoError(t, err)
	body := []byte(`{"id":"evt_lagging","type":"invoice.paid"}`)
	res, err := h.db.EventInsertBatch(t.Context(), []webhook.Insert{{
		Event: &webhook.Event{ID: id, Source: "acme", IdempotencyKey: "evt_lagging", EventType: "invoice.paid", ContentType: "application/json",
			Headers: http.Header{}, Body: body, ReceivedAt: made},
		Routes: []string{"billing"}, // the routes a receiver had before it followed fresh
	}})
	require.NoError(t, err)
	require.False(t, res[0].Duplicate)
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, 1, h.pairs(c, id.String(), "fresh")) },
		testenv.Scaled(20*time.Second), 50*time.Millisecond, "the receiver makes the pair it could not make when it accepted the event")

	// Owed like any other: with no copy in the route's queue (nobody had
	// bound it), the reconciler sends it, and it is delivered.
	h.cfg.Reconcile.Margin = 2 * time.Second
	h.startDispatcher(app.DispatcherOptions{})
	dest.waitFor(testenv.Scaled(60*time.Second), "the event at the new route", func(rs []received) bool {
		return slices.ContainsFunc(rs, func(r received) bool { return r.route == "fresh" && r.eventID == id.String() })
	})
}
