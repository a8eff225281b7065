package app_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const adminToken = "test-admin-token-0123456789"

// A destination down for a window dead-letters its events; replaying the
// window to that route delivers each exactly once more and nothing outside
// it; dead requeue empties a dead-letter queue into delivered events; the
// admin API's replay agrees with the service the CLI uses.
func TestOperatorReplayWindowAndRequeueDeadLetters(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.cfg.Retry.Backoff = []time.Duration{100 * time.Millisecond}
	var billingDown, crmDown atomic.Bool
	dest := newDestination(t, func(_ http.ResponseWriter, _ *http.Request, _ []byte, route string, _ int) int {
		if (route == "billing" && billingDown.Load()) || (route == "crm" && crmDown.Load()) {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	billing := testRoute("billing", dest.url("billing"), "acme.invoice.*")
	billing.MaxAttempts = 2
	crm := testRoute("crm", dest.url("crm"), "acme.customer.*")
	crm.MaxAttempts = 2
	h.cfg.Routes = []config.Route{billing, crm}
	h.cfg.Admin.Token = adminToken
	amqptestCleanup(t, h)
	adminLn, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	h.start(app.ReceiverOptions{AdminListener: adminLn})
	h.startDispatcher(app.DispatcherOptions{})
	svc := testOps(t, h, amqptest.Dialer(t))
	ctx := ops.WithTeam(ops.WithActor(context.Background(), "test"), ops.PlatformTeam)

	waitState := func(id, route string, want webhook.DeliveryState) {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			state, _, err := h.db.DeliveryGet(ctx, uuid.MustParse(id), route)
			require.NoError(c, err)
			require.Equal(c, want, state, "%s on %s", id, route)
		}, testenv.Scaled(20*time.Second), 20*time.Millisecond)
	}

	before := h.postSigned("evt_before", "invoice.paid").ID
	waitState(before, "billing", webhook.StateDelivered)

	billingDown.Store(true)
	since := time.Now()
	var window []string
	for i := range 4 {
		id := h.postSigned(fmt.Sprint("evt_window_", i), "invoice.paid").ID
		window = append(window, id)
		waitState(id, "billing", webhook.StateDead)
	}
	until := time.Now()
	billingDown.Store(false)
	after := h.postSigned("evt_after", "invoice.paid").ID
	waitState(after, "billing", webhook.StateDelivered)
	amqptest.WaitCount(t, h.ch, h.names.DeadQueue("billing"), 4, 10*time.Second)

	// Replay the window to billing, as `hookrelay replay --since --until
	// --route billing` does. First the admin API and the service agree on
	// what a dry run would do.
	filter := store.EventFilter{Since: since, Until: until, Route: "billing"}
	dry, err := svc.Replay(ctx, ops.ReplayRequest{Filter: filter, DryRun: true})
	require.NoError(t, err)
	require.Len(t, dry.Replayed, 4)

	res, err := svc.Replay(ctx, ops.ReplayRequest{Filter: filter})
	require.NoError(t, err)
	var replayed []string
	for _, it := range res.Replayed {
		replayed = append(replayed, it.EventID.String())
		require.Equal(t, "dead", it.State)
	}
	require.ElementsMatch(t, window, replayed, "exactly the window")
	for _, id := range window {
		waitState(id, "billing", webhook.StateDelivered)
	}
	succ := dest.successes()
	for _, id := range window {
		require.Equal(t, 1, succ["billing "+id], "each window event delivered exactly once more")
	}
	require.Equal(t, 1, succ["billing "+before], "nothing before the window again")
	require.Equal(t, 1, succ["billing "+after], "nothing after the window again")

	// Replaying again skips them: delivered.
	again, err := svc.Replay(ctx, ops.ReplayRequest{Filter: filter, DryRun: true})
	require.NoError(t, err)
	require.Empty(t, again.Replayed)
	require.Len(t, again.Skipped, 4)

	// Dead letters of crm, requeued once crm is back.
	crmDown.Store(true)
	var crmEvents []string
	for i := range 3 {
		id := h.postSigned(fmt.Sprint("evt_crm_", i), "customer.created").ID
		crmEvents = append(crmEvents, id)
		waitState(id, "crm", webhook.StateDead)
	}
	amqptest.WaitCount(t, h.ch, h.names.DeadQueue("crm"), 3, 10*time.Second)
	listed, err := svc.DeadList(ctx, ops.DeadListRequest{Route: "crm", Limit: 10})
	require.NoError(t, err)
	require.Len(t, listed.Items, 3)
	require.Equal(t, 3, listed.Total)
	require.Equal(t, "HTTP 503", listed.Items[0].LastError)
	require.EqualValues(t, 2, listed.Items[0].Attempts)
	require.Equal(t, "max_attempts", listed.Items[0].Reason)
	require.Equal(t, "dead", listed.Items[0].State, "its pair's state in Postgres")
	// Listing consumed nothing: the messages go back to the queue.
	amqptest.WaitCount(t, h.ch, h.names.DeadQueue("crm"), 3, 5*time.Second)

	crmDown.Store(false)
	moved, err := svc.DeadRequeue(ctx, "crm", 0, nil)
	require.NoError(t, err)
	require.Equal(t, 3, moved)
	for _, id := range crmEvents {
		waitState(id, "crm", webhook.StateDelivered)
	}
	amqptest.WaitCount(t, h.ch, h.names.DeadQueue("crm"), 0, 5*time.Second)
	for _, id := range crmEvents {
		require.Equal(t, 1, dest.successes()["crm "+id])
	}

	// billing's dead letters were already replayed: requeueing them empties
	// the queue and the dispatcher skips the delivered pairs.
	moved, err = svc.DeadRequeue(ctx, "billing", 0, nil)
	require.NoError(t, err)
	require.Equal(t, 4, moved)
	h.waitQueuesEmpty(15 * time.Second)
	for _, id := range window {
		require.Equal(t, 1, dest.successes()["billing "+id], "no second delivery")
	}
}

// A message moved back from the dead-letter queue by the management UI's
// "Move messages" (which keeps every header) starts a fresh attempt series
// instead of going straight back to dead.
func TestMovedDeadLetterStartsFreshSeries(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.cfg.Retry.Backoff = []time.Duration{100 * time.Millisecond}
	var down atomic.Bool
	down.Store(true)
	dest := newDestination(t, func(_ http.ResponseWriter, _ *http.Request, _ []byte, _ string, prior int) int {
		if down.Load() {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	h.cfg.Routes[0].URL = dest.url("billing")
	h.cfg.Routes[0].MaxAttempts = 2
	h.start(app.ReceiverOptions{})
	h.startDispatcher(app.DispatcherOptions{})
	r := h.postSigned("evt_move", "invoice.paid")
	amqptest.WaitCount(t, h.ch, h.names.DeadQueue("billing"), 1, 20*time.Second)

	// What a shovel does: the same message, every header kept.
	d, ok, err := h.ch.Get(h.names.DeadQueue("billing"), false)
	require.NoError(t, err)
	require.True(t, ok)
	require.EqualValues(t, 2, d.Headers["x-hookrelay-attempts"])
	down.Store(false)
	require.NoError(t, h.ch.PublishWithContext(context.Background(), "", h.names.RouteQueue("billing"), false, false, amqpCopy(d)))
	require.NoError(t, d.Ack(false))

	dest.waitFor(20*time.Second, "the moved message delivered", func(rs []received) bool { return len(dest.successes()) == 1 })
	last := dest.snapshot()[len(dest.snapshot())-1]
	require.Equal(t, "1", last.attempt, "a fresh series starts at attempt 1")
	require.Equal(t, r.ID, last.eventID)

	// events show numbers the attempts within their series (issue 12,
	// item 7): 1 and 2 of series 1, then 1 of series 2.
	var ev *store.EventDetail
	require.Eventually(t, func() bool {
		ev, err = h.db.EventShow(context.Background(), uuid.MustParse(r.ID))
		return err == nil && ev.Deliveries[0].State == "delivered"
	}, testenv.Scaled(10*time.Second), 20*time.Millisecond)
	var series []string
	for _, a := range ev.Deliveries[0].AttemptRows {
		series = append(series, fmt.Sprintf("%d.%d", a.Series, a.Attempt))
	}
	require.Equal(t, []string{"1.1", "1.2", "2.1"}, series)
	require.Equal(t, 2, ev.Deliveries[0].Series)
}

// The first admin API is gone (issue 44): every path it served answers
// 404 with the API's error shape naming /api/v1, with its token or
// without, and changes nothing; /api/v1 answers beside it.
func TestFirstAdminAPIIsGone(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.cfg.Admin.Token = adminToken
	adminLn, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	h.start(app.ReceiverOptions{AdminListener: adminLn, DisablePublisher: true})
	id := h.postSigned("evt_gone", "invoice.paid").ID
	base := "http://" + adminLn.Addr().String()
	call := func(method, path, token string) (int, string) {
		req, err := http.NewRequest(method, base+path, nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, "/api/events"}, {http.MethodGet, "/api/events/" + id},
		{http.MethodPost, "/api/events/" + id + "/replay"}, {http.MethodPost, "/api/replay"},
		{http.MethodPost, "/api/events/" + id + "/retry"}, {http.MethodPost, "/api/retry?route=billing"},
		{http.MethodPost, "/api/routes/billing/pause"}, {http.MethodGet, "/api/routes/billing/versions?source=acme&resource=x"},
	} {
		for _, token := range []string{adminToken, ""} {
			status, body := call(c.method, c.path, token)
			require.Equal(t, http.StatusNotFound, status, "%s %s: %s", c.method, c.path, body)
			require.Contains(t, body, `"code":"not_found"`)
			require.Contains(t, body, "/api/v1", "names where the API is")
		}
	}
	var paused bool
	require.NoError(t, h.db.Pool().QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM route_state WHERE route = 'billing' AND paused)`).Scan(&paused))
	require.False(t, paused, "the old pause path changed nothing")
	status, body := call(http.MethodGet, "/api/v1/events/"+id, adminToken)
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `"idempotency_key":"evt_gone"`)
}

// amqpCopy is d republished as a shovel would: body, properties and every
// header kept.
func amqpCopy(d amqp091.Delivery) amqp091.Publishing {
	return amqp091.Publishing{
		Headers: d.Headers, ContentType: d.ContentType, DeliveryMode: d.DeliveryMode,
		MessageId: d.MessageId, Type: d.Type, AppId: d.AppId, Timestamp: d.Timestamp, Body: d.Body,
	}
}

// After a scripted run, both binaries' /metrics tell what happened, and the
// dispatcher reports the age of the oldest undelivered pair per route.
func TestMetricsOfBothBinaries(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.cfg.Retry.Backoff = []time.Duration{time.Hour} // a failed attempt waits, undelivered
	dest := newDestination(t, func(_ http.ResponseWriter, _ *http.Request, _ []byte, route string, _ int) int {
		if route == "billing" {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	h.cfg.Routes = []config.Route{
		testRoute("billing", dest.url("billing"), "acme.invoice.*"),
		testRoute("crm", dest.url("crm"), "acme.customer.*"),
	}
	amqptestCleanup(t, h)
	h.start(app.ReceiverOptions{})
	h.startDispatcher(app.DispatcherOptions{})

	for i := range 3 {
		require.Equal(t, http.StatusOK, h.postSigned(fmt.Sprint("evt_inv_", i), "invoice.paid").status)
	}
	for i := range 2 {
		require.Equal(t, http.StatusOK, h.postSigned(fmt.Sprint("evt_cus_", i), "customer.created").status)
	}
	require.Equal(t, http.StatusUnauthorized, h.post("acme", []byte(`{}`), nil).status)
	dest.waitFor(20*time.Second, "3 failed and 2 delivered attempts", func(rs []received) bool { return len(rs) == 5 })
	h.waitOutboxEmpty(10 * time.Second)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		m := scrape(c, h.dispatcherBase)
		require.Equal(c, 3.0, m[`hookrelay_deliveries_total{outcome="retry_scheduled",route="billing"}`])
		require.Equal(c, 2.0, m[`hookrelay_deliveries_total{outcome="delivered",route="crm"}`])
	}, testenv.Scaled(10*time.Second), 20*time.Millisecond)
	h.waitOutboxEmpty(10 * time.Second) // the retry copies, recorded with their attempts
	_, err := h.db.Pool().Exec(context.Background(),
		`UPDATE deliveries SET created_at = now() - interval '300 seconds' WHERE route = 'billing'`)
	require.NoError(t, err)

	rm := scrape(t, h.metricsBase)
	require.Equal(t, 5.0, rm[`hookrelay_ingest_requests_total{outcome="accepted",reason="",source="acme"}`])
	require.Equal(t, 1.0, rm[`hookrelay_ingest_requests_total{outcome="rejected",reason="signature_missing",source="acme"}`])
	require.Equal(t, 8.0, rm[`hookrelay_publish_confirms_total{outcome="ack"}`], "5 events and the 3 retry copies")
	require.Equal(t, 0.0, rm[`hookrelay_outbox_backlog`])

	dm := scrape(t, h.dispatcherBase)
	require.Equal(t, 3.0, dm[`hookrelay_deliveries_total{outcome="retry_scheduled",route="billing"}`])
	require.Equal(t, 3.0, dm[`hookrelay_retries_total{route="billing",tier="1h"}`])
	require.Equal(t, 2.0, dm[`hookrelay_deliveries_total{outcome="delivered",route="crm"}`])
	require.Equal(t, 5.0, dm[`hookrelay_delivery_duration_seconds_count{route="billing"}`]+dm[`hookrelay_delivery_duration_seconds_count{route="crm"}`])
	require.Equal(t, 3.0, dm[`hookrelay_route_undelivered{route="billing"}`])
	require.GreaterOrEqual(t, dm[`hookrelay_route_oldest_undelivered_age_seconds{route="billing"}`], 300.0)
	require.Less(t, dm[`hookrelay_route_oldest_undelivered_age_seconds{route="billing"}`], 400.0)
	require.Equal(t, 0.0, dm[`hookrelay_route_undelivered{route="crm"}`])
	require.Equal(t, 0.0, dm[`hookrelay_route_oldest_undelivered_age_seconds{route="crm"}`])
	require.Equal(t, 0.0, dm[`hookrelay_route_dead{route="billing"}`])
}

// A listen stream never goes idle: the receiver's stop ends it (telling
// the listener why) instead of waiting for it to its shutdown timeout,
// and stops cleanly (the harness requires it, within 20s; the timeout
// here is 15s, so a stream that held the shutdown fails the test).
func TestListenStreamsEndWhenTheReceiverStops(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.cfg.Admin.Token = adminToken
	h.cfg.Receiver.ShutdownTimeout = 15 * time.Second
	frames := make(chan string, 64)
	// Registered before the receiver's own cleanup, so it runs after
	// the receiver stopped (cleanups run last in, first out).
	t.Cleanup(func() {
		var got []string
		timeout := time.After(testenv.Scaled(10 * time.Second))
		for {
			select {
			case line, open := <-frames:
				if open {
					got = append(got, line)
					continue
				}
			case <-timeout:
				t.Errorf("the stream was still open 10s after the receiver stopped: %q", got)
				return
			}
			break
		}
		require.Contains(t, got, "event: error", "the listener is told why: %q", got)
		require.Contains(t, strings.Join(got, "\n"), "the relay is stopping")
	})
	adminLn, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	h.start(app.ReceiverOptions{AdminListener: adminLn, DisablePublisher: true})
	req, err := http.NewRequest(http.MethodGet, "http://"+adminLn.Addr().String()+"/api/v1/listen?route=billing", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	go func() {
		defer resp.Body.Close()
		defer close(frames)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			frames <- sc.Text()
		}
	}()
	select {
	case line := <-frames:
		require.Equal(t, "event: ready", line)
	case <-time.After(testenv.Scaled(10 * time.Second)):
		require.Fail(t, "no ready frame")
	}
}
