package app_test

import (
	"context"
	"fmt"
	"net/http"
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
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The seeds' case: a subscription.updated that the provider retried late
// arrives after the subscription.canceled it preceded. On a route with
// ordering drop_stale it is recorded stale and never reaches the
// destination, while another subscription's update is delivered and a
// route without drop_stale gets everything. Two dispatchers share the
// routes. Only an operator's replay --include-stale sends it, and that
// does not lower the version the route holds.
func TestStaleSubscriptionUpdateIsDroppedAfterCancel(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.cfg.Sources[0].Ordering = config.Ordering{
		Resource: config.OrderingField{JSONPath: "data.object.id"},
		Version:  config.OrderingField{JSONPath: "created"},
	}
	dest := newDestination(t, func(http.ResponseWriter, *http.Request, []byte, string, int) int { return http.StatusOK })
	billing := testRoute("billing", dest.url("billing"), "acme.subscription.*")
	billing.Ordering = config.OrderingDropStale
	audit := testRoute("audit", dest.url("audit"), "acme.subscription.*") // ordering none
	h.cfg.Routes = []config.Route{billing, audit}
	amqptestCleanup(t, h)
	h.start(app.ReceiverOptions{})
	h.startDispatcher(app.DispatcherOptions{})
	first := h.dispatcherBase
	h.startDispatcher(app.DispatcherOptions{})
	second := h.dispatcherBase
	ctx := ops.WithTeam(ops.WithActor(context.Background(), "test"), ops.PlatformTeam)

	post := func(id, eventType, sub string, created int) string {
		t.Helper()
		body := []byte(fmt.Sprintf(`{"id":%q,"type":%q,"created":%d,"data":{"object":{"id":%q,"status":"x"}}}`, id, eventType, created, sub))
		r := h.post("acme", body, http.Header{"X-Acme-Signature": {sign(acmeSecret, body)}})
		require.Equal(t, http.StatusOK, r.status, r.Error)
		return r.ID
	}
	waitState := func(id, route string, want webhook.DeliveryState) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			state, _, err := h.db.DeliveryGet(ctx, uuid.MustParse(id), route)
			require.NoError(c, err)
			require.Equal(c, want, state, "%s on %s", id, route)
		}, testenv.Scaled(20*time.Second), 20*time.Millisecond)
	}
	received := func(route, id string) int {
		n := 0
		for _, q := range dest.snapshot() {
			if q.route == route && q.eventID == id {
				n++
			}
		}
		return n
	}

	canceled := post("evt_cancel_a", "subscription.canceled", "sub_A", 200)
	waitState(canceled, "billing", webhook.StateDelivered)

	lateUpdate := post("evt_update_a", "subscription.updated", "sub_A", 100)
	otherUpdate := post("evt_update_b", "subscription.updated", "sub_B", 100)
	waitState(lateUpdate, "billing", webhook.StateStale)
	waitState(otherUpdate, "billing", webhook.StateDelivered)
	for _, id := range []string{canceled, lateUpdate, otherUpdate} {
		waitState(id, "audit", webhook.StateDelivered) // no drop_stale: everything
	}
	h.waitQueuesEmpty(10 * time.Second)

	require.Zero(t, received("billing", lateUpdate), "the stale update never reaches billing")
	require.Equal(t, 1, received("billing", canceled))
	require.Equal(t, 1, received("billing", otherUpdate), "another subscription is unaffected")
	require.Equal(t, 1, received("audit", lateUpdate), "a route without drop_stale gets it")

	staleMetric := func(base string) float64 {
		return scrape(t, base)[`hookrelay_deliveries_stale_total{route="billing"}`]
	}
	require.Equal(t, 1.0, staleMetric(first)+staleMetric(second), "counted once, by whichever dispatcher took it")
	require.Zero(t, scrape(t, first)[`hookrelay_deliveries_stale_total{route="audit"}`]+scrape(t, second)[`hookrelay_deliveries_stale_total{route="audit"}`])
	deadMetric := `hookrelay_deliveries_total{outcome="dead",route="billing"}`
	require.Contains(t, scrape(t, first), deadMetric)
	require.Zero(t, scrape(t, first)[deadMetric]+scrape(t, second)[deadMetric], "never dead-lettered")

	// What an operator sees: events show says why; events list --state
	// stale finds it.
	svc := testOps(t, h, amqptest.Dialer(t))
	detail, err := svc.EventShow(ctx, uuid.MustParse(lateUpdate))
	require.NoError(t, err)
	require.Equal(t, "sub_A", detail.OrderingResource)
	require.Equal(t, "100", detail.OrderingVersion)
	var billingDetail *ops.DeliveryDetail
	for i := range detail.Deliveries {
		if detail.Deliveries[i].Route == "billing" {
			billingDetail = &detail.Deliveries[i]
		}
	}
	require.NotNil(t, billingDetail)
	require.Equal(t, "stale", billingDetail.State)
	require.NotNil(t, billingDetail.LastError)
	require.Contains(t, *billingDetail.LastError, `version "100" of resource "sub_A" is older than version "200"`)
	list, err := svc.EventList(ctx, store.EventFilter{State: "stale"})
	require.NoError(t, err)
	require.Len(t, list.Items, 1)
	require.Equal(t, lateUpdate, list.Items[0].ID.String())

	// A replay without --include-stale skips it, saying why.
	res, err := svc.Replay(ctx, ops.ReplayRequest{EventID: uuid.MustParse(lateUpdate), Filter: store.EventFilter{Route: "billing"}})
	require.NoError(t, err)
	require.Zero(t, res.ReplayedCount)
	require.Len(t, res.Skipped, 1)
	require.Contains(t, res.Skipped[0].Skipped, "--include-stale")

	// With it, the update is sent, and delivered.
	res, err = svc.Replay(ctx, ops.ReplayRequest{EventID: uuid.MustParse(lateUpdate), Filter: store.EventFilter{Route: "billing"}, IncludeStale: true})
	require.NoError(t, err)
	require.Equal(t, 1, res.ReplayedCount)
	waitState(lateUpdate, "billing", webhook.StateDelivered)
	require.Equal(t, 1, received("billing", lateUpdate))

	// The route still holds version 200 for sub_A: another late update
	// is stale too.
	older := post("evt_update_a_2", "subscription.updated", "sub_A", 150)
	waitState(older, "billing", webhook.StateStale)
	newer := post("evt_update_a_3", "subscription.updated", "sub_A", 200) // equal: not stale
	waitState(newer, "billing", webhook.StateDelivered)
	require.Zero(t, received("billing", older))
	require.Equal(t, 2.0, staleMetric(first)+staleMetric(second))
}

// Issue 18, item 7: a version far in the future (a sender's clock, a bug,
// or one forged where the version was not signed) must not silence a
// resource. The event that carries it is delivered, without ordering, and
// counted; the resource's genuine next event is delivered too, not
// recorded stale. An operator can read and reset a route's version.
func TestFarFutureVersionDoesNotSilenceItsResource(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.cfg.Sources[0].Ordering = config.Ordering{
		Resource: config.OrderingField{JSONPath: "admin_graphql_api_id"},
		Version:  config.OrderingField{JSONPath: "updated_at"},
	}
	dest := newDestination(t, func(http.ResponseWriter, *http.Request, []byte, string, int) int { return http.StatusOK })
	orders := testRoute("orders", dest.url("orders"), "acme.orders.*")
	orders.Ordering = config.OrderingDropStale
	h.cfg.Routes = []config.Route{orders}
	amqptestCleanup(t, h)
	h.start(app.ReceiverOptions{})
	h.startDispatcher(app.DispatcherOptions{})
	ctx := ops.WithTeam(ops.WithActor(context.Background(), "test"), ops.PlatformTeam)
	post := func(id, updatedAt string) string {
		t.Helper()
		body := []byte(fmt.Sprintf(`{"id":%q,"type":"orders.updated","admin_graphql_api_id":"gid://shopify/Order/1","updated_at":%q}`, id, updatedAt))
		r := h.post("acme", body, http.Header{"X-Acme-Signature": {sign(acmeSecret, body)}})
		require.Equal(t, http.StatusOK, r.status, r.Error)
		return r.ID
	}
	delivered := func(id string) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			state, _, err := h.db.DeliveryGet(ctx, uuid.MustParse(id), "orders")
			require.NoError(c, err)
			require.Equal(c, webhook.StateDelivered, state, id)
		}, testenv.Scaled(20*time.Second), 20*time.Millisecond)
	}

	forged := post("evt_forged", "9999-12-31T23:59:59Z")
	delivered(forged)
	require.Equal(t, 1.0, scrape(t, h.metricsBase)[`hookrelay_ingest_ordering_ignored_total{reason="future_version",source="acme"}`])
	genuine := post("evt_genuine", time.Now().UTC().Format(time.RFC3339))
	delivered(genuine)

	// The genuine one set the route's version; an operator can see it and
	// reset it.
	v, err := h.db.ResourceVersionGet(ctx, "orders", "acme", "gid://shopify/Order/1")
	require.NoError(t, err)
	require.Equal(t, uuid.MustParse(genuine), v.Event)
	svc := testOps(t, h, nil)
	reset, err := svc.ResourceVersionReset(ctx, ops.VersionRequest{Route: "orders", Source: "acme", Resource: "gid://shopify/Order/1"})
	require.NoError(t, err)
	require.Equal(t, v.Version, reset.Version)
	_, err = svc.ResourceVersion(ctx, ops.VersionRequest{Route: "orders", Source: "acme", Resource: "gid://shopify/Order/1"})
	require.ErrorIs(t, err, store.ErrNotFound)
}
