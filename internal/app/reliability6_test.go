package app_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/app"
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
// leaves the same: no pair row and no event.
func TestStaleCopyOfAPurgedEventIsNoDeadLetter(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	dest := newDestination(t, func(http.ResponseWriter, *http.Request, []byte, string, int) int { return http.StatusOK })
	h.cfg.Routes[0].URL = dest.url("billing")
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
