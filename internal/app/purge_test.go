package app_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/stretchr/testify/require"
)

// Issue 8, item 16: a purge run while an event's message sits in the
// route's .dead queue keeps the event, so `dead requeue` delivers it
// instead of parking it for good as event_missing. --include-dead purges
// it, and then the requeued letter does park as event_missing.
func TestPurgeKeepsDeadEventsSoRequeueDelivers(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.cfg.Retry.Backoff = []time.Duration{100 * time.Millisecond}
	var down atomic.Bool
	down.Store(true)
	dest := newDestination(t, func(http.ResponseWriter, *http.Request, []byte, string, int) int {
		if down.Load() {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	h.cfg.Routes[0].URL = dest.url("billing")
	h.cfg.Routes[0].MaxAttempts = 1
	h.start(app.ReceiverOptions{})
	h.startDispatcher(app.DispatcherOptions{})
	svc := testOps(t, h, amqptest.Dialer(t))
	ctx := ops.WithTeam(ops.WithActor(context.Background(), "test"), ops.PlatformTeam)

	kept := uuid.MustParse(h.postSigned("evt_dead_kept", "invoice.paid").ID)
	gone := uuid.MustParse(h.postSigned("evt_dead_gone", "invoice.paid").ID)
	amqptest.WaitCount(t, h.ch, h.names.DeadQueue("billing"), 2, 20*time.Second)
	// Their outbox rows go shortly after the confirms (grouped deletes):
	// an event still in the outbox is undelivered to a purge.
	h.waitOutboxEmpty(10 * time.Second)
	// Both are 40 days old: past the purge age and the dedupe window.
	_, err := h.db.Pool().Exec(ctx, `UPDATE events SET received_at = now() - interval '40 days'`)
	require.NoError(t, err)

	res, err := svc.Purge(ctx, ops.PurgeRequest{OlderThan: 7 * 24 * time.Hour})
	require.NoError(t, err)
	require.Zero(t, res.Events+res.Deliveries, "nothing undelivered is purged: %+v", res)
	require.EqualValues(t, 2, res.KeptUndelivered)

	// The operator purges one of them on purpose.
	_, err = h.db.Pool().Exec(ctx, `UPDATE events SET received_at = now() WHERE id = $1`, kept)
	require.NoError(t, err)
	res, err = svc.Purge(ctx, ops.PurgeRequest{OlderThan: 7 * 24 * time.Hour, IncludeDead: true})
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Events, "--include-dead purges the dead one: %+v", res)

	down.Store(false)
	moved, err := svc.DeadRequeue(ctx, "billing", 0, nil)
	require.NoError(t, err)
	require.Equal(t, 2, moved)
	require.Eventually(t, func() bool {
		state, _, err := h.db.DeliveryGet(ctx, kept, "billing")
		return err == nil && state == webhook.StateDelivered
	}, testenv.Scaled(20*time.Second), 20*time.Millisecond, "the kept event is delivered after requeue")
	require.Equal(t, 1, dest.successes()["billing "+kept.String()])

	amqptest.WaitCount(t, h.ch, h.names.DeadQueue("billing"), 1, 20*time.Second)
	list, err := svc.DeadList(ctx, ops.DeadListRequest{Route: "billing", Limit: 10})
	require.NoError(t, err)
	require.Len(t, list.Items, 1)
	require.Equal(t, gone.String(), list.Items[0].EventID)
	require.Equal(t, "event_missing", list.Items[0].Reason, "what --include-dead costs")
	require.Equal(t, ops.StateMissing, list.Items[0].State, "its event is purged")
}
