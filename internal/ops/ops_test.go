package ops_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/routeset"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/stretchr/testify/require"
)

// A listing says how many match when it stops at its limit (and only then
// asks for the count); a route not in the config is marked unserved.
func TestEventList(t *testing.T) {
	t.Parallel()
	svc, st, _ := newService(t)
	for range 3 {
		st.add("acme", "invoice.paid", map[string]string{"billing": "delivered", "legacy": "pending"})
	}
	list, err := svc.EventList(actorCtx(), store.EventFilter{})
	require.NoError(t, err)
	require.Equal(t, ops.DefaultListLimit+1, st.listLimit, "the default limit, and one more to know whether a next page exists")
	require.EqualValues(t, 3, list.Total)
	require.Equal(t, 3, list.Shown)
	require.Zero(t, st.counts, "a page that is not full needs no count")
	require.False(t, list.Items[0].Deliveries[0].Unserved, "billing is served")
	require.True(t, list.Items[0].Deliveries[1].Unserved, "legacy is not")

	list, err = svc.EventList(actorCtx(), store.EventFilter{Limit: 2})
	require.NoError(t, err)
	require.EqualValues(t, 3, list.Total, "how many match in all")
	require.Equal(t, 2, list.Shown)
	require.Len(t, list.Items, 2)
	require.NotEmpty(t, list.NextCursor, "more follow")

	counts := st.counts
	list, err = svc.EventList(actorCtx(), store.EventFilter{Limit: 3})
	require.NoError(t, err)
	require.EqualValues(t, 3, list.Total)
	require.Empty(t, list.NextCursor, "a full page with nothing after it is the last")
	require.Equal(t, counts, st.counts, "and needs no count")
}

// An event as the admin API and `events show --json` print it: store rows
// turned into ops' JSON shape, unserved routes marked.
func TestEventShow(t *testing.T) {
	t.Parallel()
	svc, st, _ := newService(t)
	ev := st.add("acme", "invoice.paid", map[string]string{"billing": "dead", "legacy": "pending"})
	got, err := svc.EventShow(actorCtx(), ev.id)
	require.NoError(t, err)
	raw, err := json.Marshal(got)
	require.NoError(t, err)
	require.JSONEq(t, `{"id":"`+ev.id.String()+`","source":"acme","event_type":"invoice.paid","idempotency_key":"","content_type":"",
		"received_at":"2026-11-27T14:00:00Z","headers":null,"body":"","deliveries":[
		{"route":"billing","state":"dead","attempts":0,"series":1,"attempts_detail":[]},
		{"route":"legacy","state":"pending","attempts":0,"unserved":true,"series":1,"attempts_detail":[]}]}`, string(raw))

	missing := ev.id
	missing[15]++
	_, err = svc.EventShow(actorCtx(), missing)
	require.ErrorIs(t, err, store.ErrNotFound)
}

// Dead letters need one configured route; the rest is RabbitMQ's.
func TestDeadLettersNeedAConfiguredRoute(t *testing.T) {
	t.Parallel()
	svc, _, dl := newService(t)
	ctx := actorCtx()
	_, err := svc.DeadList(ctx, ops.DeadListRequest{Limit: 10})
	require.ErrorContains(t, err, "a route is required (--route)")
	_, err = svc.DeadRequeue(ctx, "legacy", 0, nil)
	require.ErrorIs(t, err, ops.ErrUnknownRoute)
	_, err = svc.DeadDropDelivered(ctx, "legacy", false)
	require.ErrorIs(t, err, ops.ErrUnknownRoute)
	_, err = svc.DeadList(ctx, ops.DeadListRequest{Route: "billing", State: "gone"})
	require.ErrorIs(t, err, ops.ErrInvalidRequest)
	require.Empty(t, dl.asked, "nothing asked of RabbitMQ")

	list, err := svc.DeadList(ctx, ops.DeadListRequest{Route: "billing", Limit: 10})
	require.NoError(t, err)
	require.Equal(t, "q.billing", list.Queue)
	n, err := svc.DeadRequeue(ctx, "crm", 0, nil)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Equal(t, []string{"scan billing", "requeue crm"}, dl.asked)
}

// Issue 18, item 12: each dead letter shows its pair's state; a listing of
// one state reads on past the others; a drop removes only the delivered.
func TestDeadLettersByPairState(t *testing.T) {
	t.Parallel()
	svc, st, dl := newService(t)
	ctx := actorCtx()
	var letters []webhook.DeadLetterInfo
	want := map[string]string{}
	for i := range 250 {
		state := []string{"dead", "delivered", "dead", "pending", "stale"}[i%5]
		ev := st.add("acme", "invoice.paid", map[string]string{"billing": state})
		if i%50 == 7 {
			ev.purged = true
			state = ops.StateMissing
		}
		letters = append(letters, webhook.DeadLetterInfo{EventID: ev.id.String()})
		want[ev.id.String()] = state
	}
	letters = append(letters, webhook.DeadLetterInfo{EventID: "not-a-uuid"})
	want["not-a-uuid"] = ops.StateMissing
	dl.queues["billing"] = letters

	all, err := svc.DeadList(ctx, ops.DeadListRequest{Route: "billing", Limit: 1000})
	require.NoError(t, err)
	require.Equal(t, 251, all.Total)
	require.Equal(t, 251, all.Shown)
	for _, it := range all.Items {
		require.Equal(t, want[it.EventID], it.State, it.EventID)
	}

	dl.batches = nil
	first, err := svc.DeadList(ctx, ops.DeadListRequest{Route: "billing", Limit: 10})
	require.NoError(t, err)
	require.Equal(t, 10, first.Shown)
	require.Equal(t, 10, first.Read)
	require.Equal(t, []int{10}, dl.batches, "a listing of all states reads no more than it shows")

	delivered, err := svc.DeadList(ctx, ops.DeadListRequest{Route: "billing", Limit: 30, State: "delivered"})
	require.NoError(t, err)
	require.Equal(t, 30, delivered.Shown)
	require.Equal(t, 200, delivered.Read, "30 delivered are among the first 200 letters")
	for _, it := range delivered.Items {
		require.Equal(t, "delivered", it.State)
	}
	missing, err := svc.DeadList(ctx, ops.DeadListRequest{Route: "billing", Limit: 100, State: ops.StateMissing})
	require.NoError(t, err)
	require.Equal(t, 251, missing.Read)
	require.Equal(t, 6, missing.Shown, "five purged events and one letter naming none")
	require.Len(t, dl.queues["billing"], 251, "listing consumed nothing")

	dry, err := svc.DeadDropDelivered(ctx, "billing", true)
	require.NoError(t, err)
	require.Equal(t, ops.DeadDropResult{Queue: "q.billing", Total: 251, Read: 251, Dropped: 50, DryRun: true}, *dry)
	require.Len(t, dl.queues["billing"], 251, "a dry run drops nothing")

	res, err := svc.DeadDropDelivered(ctx, "billing", false)
	require.NoError(t, err)
	require.Equal(t, 50, res.Dropped)
	require.Len(t, dl.queues["billing"], 251-50)
	for _, it := range dl.queues["billing"] {
		require.NotEqual(t, "delivered", want[it.EventID])
	}

	st.err = errors.New("postgres is away")
	_, err = svc.DeadDropDelivered(ctx, "billing", false)
	require.ErrorContains(t, err, "postgres is away")
	require.Len(t, dl.queues["billing"], 251-50, "a failed lookup drops nothing")
}

// Purge takes an age, keeps dedupe keys for the window, and names the
// served routes (never nil, which would mean all).
func TestPurgeArguments(t *testing.T) {
	t.Parallel()
	svc, st, _ := newService(t)
	ctx := actorCtx()
	for _, age := range []time.Duration{0, -time.Hour} {
		_, err := svc.Purge(ctx, ops.PurgeRequest{OlderThan: age})
		require.ErrorContains(t, err, "--older-than must be positive")
	}
	require.Empty(t, st.purged)

	_, err := svc.Purge(ctx, ops.PurgeRequest{OlderThan: 7 * 24 * time.Hour, Batch: 50, IncludeDead: true})
	require.NoError(t, err)
	now := svc.NowFunc()
	require.Equal(t, []store.PurgeConfig{{
		OlderThan: now.Add(-7 * 24 * time.Hour), DedupeBefore: now.Add(-30 * 24 * time.Hour), Batch: 50, IncludeDead: true,
		ServedRoutes: []string{"billing", "crm"},
	}}, st.purged)

	svc.RoutesNow = func() *routeset.Set { return routeset.Of() }
	_, err = svc.Purge(ctx, ops.PurgeRequest{OlderThan: time.Hour})
	require.NoError(t, err)
	require.NotNil(t, st.purged[1].ServedRoutes, "no route served is not every route served")
	require.Empty(t, st.purged[1].ServedRoutes)
}
