package ops_test

import (
	"context"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/stretchr/testify/require"
)

// pairs lists a result's items as "event-name route" for the events in
// names, with why for a skipped one.
func pairs(items []ops.ReplayItem, names map[string]string) []string {
	var out []string
	for _, it := range items {
		s := names[it.EventID.String()] + " " + it.Route
		if it.Skipped != "" {
			s += ": " + it.Skipped
		}
		out = append(out, s)
	}
	return out
}

// Which pairs a replay takes and which it skips, and why.
func TestReplayRules(t *testing.T) {
	t.Parallel()
	setupEvents := func(st *fakeStore) map[string]string {
		names := map[string]string{}
		add := func(name, eventType string, states map[string]string) {
			names[st.add("acme", eventType, states).id.String()] = name
		}
		add("dead", "invoice.paid", map[string]string{"billing": "dead"})
		add("delivered", "invoice.paid", map[string]string{"billing": "delivered"})
		add("retrying", "invoice.paid", map[string]string{"billing": "retrying"})
		add("pending", "invoice.paid", map[string]string{"billing": "pending"})
		add("never", "invoice.paid", nil)
		add("legacy", "invoice.paid", map[string]string{"billing": "dead", "legacy": "pending"})
		add("customer", "customer.created", map[string]string{"crm": "dead"})
		ev := st.add("acme", "invoice.paid", map[string]string{"billing": "dead"})
		ev.purged = true
		names[ev.id.String()] = "purged"
		return names
	}
	const unserved = "route legacy is not configured: no dispatcher delivers it"
	for _, tc := range []struct {
		name     string
		req      ops.ReplayRequest
		replayed []string
		skipped  []string
	}{
		{
			name:     "dead and never attempted pairs are replayed; delivered, in flight, purged and unserved are not",
			req:      ops.ReplayRequest{Filter: store.EventFilter{Source: "acme"}},
			replayed: []string{"dead billing", "never billing", "legacy billing", "customer crm"},
			skipped: []string{
				"delivered billing: delivered (use --include-delivered)", "retrying billing: in flight (retrying)",
				"pending billing: in flight (pending)", "legacy legacy: " + unserved, "purged billing: purged: the body is no longer stored",
			},
		},
		{
			name:     "delivered pairs when asked",
			req:      ops.ReplayRequest{Filter: store.EventFilter{Source: "acme", EventType: "invoice.paid", State: "delivered"}, IncludeDelivered: true},
			replayed: []string{"delivered billing"},
		},
		{
			name:     "one route only: no unserved pairs listed",
			req:      ops.ReplayRequest{Filter: store.EventFilter{Route: "billing", State: "dead"}},
			replayed: []string{"dead billing", "legacy billing"},
			skipped:  []string{"purged billing: purged: the body is no longer stored"},
		},
		{
			name:    "a state selects pairs in it",
			req:     ops.ReplayRequest{Filter: store.EventFilter{State: "pending"}},
			skipped: []string{"pending billing: in flight (pending)", "legacy legacy: " + unserved},
		},
	} {
		for _, dry := range []bool{true, false} {
			name := tc.name
			if dry {
				name += " (dry run)"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				svc, st, _ := newService(t)
				st.drain = true
				names := setupEvents(st)
				req := tc.req
				req.DryRun = dry
				res, err := svc.Replay(actorCtx(), req)
				require.NoError(t, err)
				require.ElementsMatch(t, tc.replayed, pairs(res.Replayed, names))
				require.ElementsMatch(t, tc.skipped, pairs(res.Skipped, names))
				require.Equal(t, len(tc.replayed), res.ReplayedCount)
				require.Equal(t, len(tc.skipped), res.SkippedCount)
				require.Equal(t, dry, res.DryRun)
				if dry {
					require.Empty(t, st.calls(), "a dry run changes nothing")
					require.Zero(t, res.Delivered)
					return
				}
				for _, it := range res.Replayed {
					require.Equal(t, "delivered", st.state(it.EventID, it.Route), "enqueued, then delivered")
				}
				require.Equal(t, len(tc.replayed), res.Delivered)
			})
		}
	}
}

// Routes that are not configured are refused by name, before anything is
// read.
func TestReplayUnknownRoute(t *testing.T) {
	t.Parallel()
	svc, _, _ := newService(t)
	_, err := svc.Replay(actorCtx(), ops.ReplayRequest{Filter: store.EventFilter{Route: "legacy"}})
	require.ErrorIs(t, err, ops.ErrUnknownRoute)
	require.ErrorContains(t, err, `route "legacy" is neither in the config nor made at run time`)
}

// One event: its pairs at once, without pacing. A missing event is
// store.ErrNotFound and no result.
func TestReplayOneEvent(t *testing.T) {
	t.Parallel()
	svc, st, _ := newService(t)
	ev := st.add("acme", "invoice.paid", map[string]string{"billing": "dead"})
	st.add("acme", "invoice.paid", map[string]string{"billing": "dead"})
	res, err := svc.Replay(actorCtx(), ops.ReplayRequest{EventID: ev.id})
	require.NoError(t, err)
	require.Equal(t, 1, res.ReplayedCount)
	require.EqualValues(t, 1, res.Events)
	require.Equal(t, "pending", st.state(ev.id, "billing"), "enqueued, not waited for")

	res, err = svc.Replay(actorCtx(), ops.ReplayRequest{EventID: ev.id, Filter: store.EventFilter{Route: "crm"}})
	require.NoError(t, err)
	require.Zero(t, res.ReplayedCount, "crm does not bind the event")

	missing := ev.id
	missing[15]++
	res, err = svc.Replay(actorCtx(), ops.ReplayRequest{EventID: missing})
	require.ErrorIs(t, err, store.ErrNotFound)
	require.Nil(t, res)
}

// A pair whose state changed between selection and enqueue is left alone
// and listed as such.
func TestReplayLeavesPairsThatChanged(t *testing.T) {
	t.Parallel()
	svc, st, _ := newService(t)
	st.drain = true
	a := st.add("acme", "invoice.paid", map[string]string{"billing": "dead"})
	b := st.add("acme", "invoice.paid", map[string]string{"billing": "dead"})
	st.changed = map[store.ReplayPair]bool{{EventID: b.id, Route: "billing"}: true}
	res, err := svc.Replay(actorCtx(), ops.ReplayRequest{Filter: store.EventFilter{State: "dead"}})
	require.NoError(t, err)
	require.Len(t, res.Replayed, 1)
	require.Equal(t, a.id, res.Replayed[0].EventID)
	require.Len(t, res.Skipped, 1)
	require.Equal(t, "changed meanwhile (delivered, in flight or purged); left alone", res.Skipped[0].Skipped)
}

// A selection stopped by its limit says where to go on; going on from
// there takes the rest; a cursor that is not one is the caller's error.
func TestReplayPagesByCursor(t *testing.T) {
	t.Parallel()
	svc, st, _ := newService(t)
	st.drain = true
	for range 5 {
		st.add("acme", "invoice.paid", map[string]string{"billing": "dead"})
	}
	f := store.EventFilter{State: "dead", Limit: 3}
	first, err := svc.Replay(actorCtx(), ops.ReplayRequest{Filter: f, DryRun: true})
	require.NoError(t, err)
	require.Equal(t, 3, first.Scanned)
	require.EqualValues(t, 3, first.Events)
	require.NotEmpty(t, first.NextAfter)

	rest, err := svc.Replay(actorCtx(), ops.ReplayRequest{Filter: f, After: first.NextAfter, DryRun: true})
	require.NoError(t, err)
	require.Equal(t, 2, rest.Scanned)
	require.Empty(t, rest.NextAfter, "nothing left")
	seen := map[string]bool{}
	for _, it := range append(first.Replayed, rest.Replayed...) {
		seen[it.EventID.String()] = true
	}
	require.Len(t, seen, 5, "each event once")

	_, err = svc.Replay(actorCtx(), ops.ReplayRequest{Filter: f, After: "yesterday"})
	require.ErrorIs(t, err, ops.ErrInvalidRequest)
}

// A selection is enqueued in batches of at most MaxBatch, each waited for
// until it drained; what is listed is capped at ListLimit, the counts are
// not.
func TestReplayBatchesAndLists(t *testing.T) {
	t.Parallel()
	svc, st, _ := newService(t)
	st.drain = true
	for range 7 {
		st.add("acme", "invoice.paid", map[string]string{"billing": "dead"})
	}
	var progress []ops.ReplayProgress
	res, err := svc.Replay(actorCtx(), ops.ReplayRequest{
		Filter: store.EventFilter{State: "dead"}, MaxBatch: 3, ListLimit: 2,
		ProgressFunc: func(p ops.ReplayProgress) { progress = append(progress, p) },
	})
	require.NoError(t, err)
	require.Equal(t, 7, res.ReplayedCount)
	require.Len(t, res.Replayed, 2, "listed up to ListLimit")
	require.Equal(t, 7, res.Delivered)
	var sizes []int
	for _, b := range st.calls() {
		sizes = append(sizes, len(b))
	}
	require.Equal(t, []int{3, 3, 1}, sizes)
	require.NotEmpty(t, progress)
	require.Equal(t, 7, progress[len(progress)-1].Enqueued)
}

// A batch that makes no progress (no dispatcher) ends the replay with a
// StalledError; what was enqueued stays enqueued and is counted.
func TestReplayStalls(t *testing.T) {
	t.Parallel()
	svc, st, _ := newService(t)
	for range 3 {
		st.add("acme", "invoice.paid", map[string]string{"billing": "dead"})
	}
	res, err := svc.Replay(actorCtx(), ops.ReplayRequest{Filter: store.EventFilter{State: "dead"}, StallTimeout: 250 * time.Millisecond})
	var stalled *ops.StalledError
	require.ErrorAs(t, err, &stalled)
	require.ErrorIs(t, err, ops.ErrReplayStalled)
	require.Equal(t, 3, stalled.Pending)
	require.Equal(t, 3, res.ReplayedCount, "enqueued, and counted")
}

// A replay whose context ends while it waits says how far it got.
func TestReplayInterrupted(t *testing.T) {
	t.Parallel()
	svc, st, _ := newService(t)
	st.add("acme", "invoice.paid", map[string]string{"billing": "dead"})
	ctx, cancel := context.WithCancel(actorCtx())
	res, err := svc.Replay(ctx, ops.ReplayRequest{Filter: store.EventFilter{State: "dead"}, ProgressFunc: func(p ops.ReplayProgress) {
		if p.Enqueued > 0 {
			cancel()
		}
	}})
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "replay interrupted after 1 pair(s) enqueued")
	require.Equal(t, 1, res.ReplayedCount)
}
