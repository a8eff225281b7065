package app_test

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// Issue 8, item 13: dispatcher.shutdown_timeout bounds in-flight
// deliveries. A delivery still running when it expires is aborted: the POST
// is cancelled, nothing is recorded, the message is not acked, and a
// restarted dispatcher delivers it.
func TestDispatcherShutdownTimeoutBoundsInFlightDelivery(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const shutdownTimeout = time.Second
	h.cfg.Dispatcher.ShutdownTimeout = shutdownTimeout
	h.cfg.Routes[0].Timeout = 20 * time.Second // far slower than the shutdown timeout
	h.cfg.Routes[0].Concurrency = 1
	arrived, aborted := make(chan struct{}, 1), make(chan struct{}, 1)
	dest := newDestination(t, func(_ http.ResponseWriter, r *http.Request, _ []byte, _ string, prior int) int {
		if prior == 0 {
			// The first attempt hangs until the dispatcher gives up on it.
			arrived <- struct{}{}
			<-r.Context().Done()
			aborted <- struct{}{}
			return http.StatusServiceUnavailable // never read by anyone
		}
		return http.StatusOK
	})
	h.cfg.Routes[0].URL = dest.url("billing")
	h.start(app.ReceiverOptions{})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- app.RunDispatcher(ctx, h.cfg, app.DispatcherOptions{
			Listener: ln, Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
		})
	}()
	waitReady(t, "http://"+ln.Addr().String())

	r := h.postSigned("evt_slow_at_shutdown", "invoice.paid")
	require.Equal(t, http.StatusOK, r.status)
	// The POST is in flight: the destination has the request and holds it.
	select {
	case <-arrived:
	case <-time.After(testenv.Scaled(15 * time.Second)):
		t.Fatal("the delivery never reached the destination")
	}

	cancel()
	start := time.Now()
	const slack = 3 * time.Second
	select {
	case err := <-done:
		require.NoError(t, err)
		t.Logf("dispatcher returned %s after shutdown began (timeout %s)", time.Since(start).Round(time.Millisecond), shutdownTimeout)
	case <-time.After(testenv.Scaled(shutdownTimeout + slack)):
		t.Fatalf("dispatcher still running %s after shutdown began (timeout %s)", shutdownTimeout+slack, shutdownTimeout)
	}
	select {
	case <-aborted:
	case <-time.After(testenv.Scaled(5 * time.Second)):
		t.Fatal("the in-flight POST was not cancelled")
	}

	// Not acked: the message is back in the route queue, and no attempt
	// was recorded for the aborted POST.
	amqptest.WaitCount(t, h.ch, h.names.RouteQueue("billing"), 1, 10*time.Second)
	require.Empty(t, h.attemptRows("billing"), "an aborted delivery records nothing")

	h.startDispatcher(app.DispatcherOptions{})
	require.Eventually(t, func() bool {
		state, _, err := h.db.DeliveryGet(context.Background(), uuid.MustParse(r.ID), "billing")
		return err == nil && state == webhook.StateDelivered
	}, testenv.Scaled(30*time.Second), 20*time.Millisecond)
	require.Equal(t, map[string]int{"billing " + r.ID: 1}, dest.successes(), "delivered once after the restart")
	require.Equal(t, map[string]int{r.ID: 1}, h.attemptRows("billing"), "one attempt recorded: the one that succeeded")
	h.waitQueuesEmpty(10 * time.Second)
}
