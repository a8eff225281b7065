// Package opscontract holds the contract of the event selection and replay
// part of ops.Store (the listing, the counts, the replay's candidates, its
// enqueue and the pairs' states), run against ops' fake and the Postgres
// store alike, as package storecontract does for the other feature
// packages. It is a package of its own because its types are the store's
// rows (store.EventFilter, store.ReplayPair, ...), which storecontract
// does not import.
package opscontract

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/stretchr/testify/require"
)

// EventsStore is the part of ops.Store this contract covers, spelled out
// here: ops imports this package's users, not the other way round.
type EventsStore interface {
	EventShow(ctx context.Context, id uuid.UUID) (*store.EventDetail, error)
	EventList(ctx context.Context, f store.EventFilter) ([]store.EventSummary, error)
	EventCountByFilter(ctx context.Context, f store.EventFilter, upTo int64) (int64, error)
	ReplayCandidateCount(ctx context.Context, f store.EventFilter, after store.ReplayCursor) (int64, error)
	ReplayCandidatesPage(ctx context.Context, f store.EventFilter, after store.ReplayCursor, limit int) ([]store.ReplayCandidate, error)
	ReplayEnqueueBy(ctx context.Context, by uuid.UUID, pairs []store.ReplayPair, includeDelivered, includeStale bool) ([]store.ReplayPair, error)
	PairStates(ctx context.Context, pairs []store.ReplayPair) (map[store.ReplayPair]webhook.DeliveryState, error)
}

// Add stores an event of source and type, received at at, with a pair in
// the given state for each route of states.
type Add func(at time.Time, source, eventType string, states map[string]webhook.DeliveryState) uuid.UUID

// base is the contract's clock: every event is received after it, a
// second apart, so the order is the contract's, not the machine's.
var base = time.Now().UTC().Truncate(time.Second).Add(-time.Hour)

func at(i int) time.Time { return base.Add(time.Duration(i) * time.Second) }

// Events runs the contract against the store open returns, a fresh one for
// each case.
func Events(t *testing.T, open func(t *testing.T) (EventsStore, Add)) {
	ctx := context.Background()
	const (
		dead      = webhook.StateDead
		delivered = webhook.StateDelivered
		pending   = webhook.StatePending
		stale     = webhook.StateStale
	)
	// three events: e1 acme a.b billing:dead; e2 acme c.d billing:delivered
	// crm:dead; e3 other a.b crm:pending.
	three := func(t *testing.T) (EventsStore, [3]uuid.UUID) {
		s, add := open(t)
		return s, [3]uuid.UUID{
			add(at(1), "acme", "a.b", map[string]webhook.DeliveryState{"billing": dead}),
			add(at(2), "acme", "c.d", map[string]webhook.DeliveryState{"billing": delivered, "crm": dead}),
			add(at(3), "other", "a.b", map[string]webhook.DeliveryState{"crm": pending}),
		}
	}
	ids := func(list []store.EventSummary) []uuid.UUID {
		out := []uuid.UUID{}
		for _, e := range list {
			out = append(out, e.ID)
		}
		return out
	}

	t.Run("a listing is newest first and each field filters", func(t *testing.T) {
		t.Parallel()
		s, e := three(t)
		list := func(f store.EventFilter) []uuid.UUID {
			t.Helper()
			l, err := s.EventList(ctx, f)
			require.NoError(t, err)
			return ids(l)
		}
		require.Equal(t, []uuid.UUID{e[2], e[1], e[0]}, list(store.EventFilter{}), "no limit: the listing's default, newest first")
		require.Equal(t, []uuid.UUID{e[2], e[1]}, list(store.EventFilter{Limit: 2}))
		require.Equal(t, []uuid.UUID{e[1], e[0]}, list(store.EventFilter{Source: "acme"}))
		require.Equal(t, []uuid.UUID{e[2], e[0]}, list(store.EventFilter{EventType: "a.b"}))
		require.Equal(t, []uuid.UUID{e[1], e[0]}, list(store.EventFilter{State: string(dead)}))
		require.Equal(t, []uuid.UUID{e[2], e[1]}, list(store.EventFilter{Route: "crm"}))
		require.Equal(t, []uuid.UUID{e[0]}, list(store.EventFilter{State: string(dead), Route: "billing"}),
			"state and route are one pair's: e2 is dead on crm and delivered on billing")
		require.Equal(t, []uuid.UUID{e[1], e[0]}, list(store.EventFilter{Until: at(3)}), "until is before")
		require.Equal(t, []uuid.UUID{e[2], e[1]}, list(store.EventFilter{Since: at(2)}), "since is at or after")
		require.Equal(t, []uuid.UUID{e[1], e[0]}, list(store.EventFilter{Before: store.ReplayCursor{ReceivedAt: at(3), ID: e[2]}}),
			"a page after the cursor")
		require.Empty(t, list(store.EventFilter{Source: "nobody"}))

		l, err := s.EventList(ctx, store.EventFilter{Route: "crm", State: string(dead)})
		require.NoError(t, err)
		require.Len(t, l, 1)
		require.Equal(t, "acme", l[0].Source)
		require.Equal(t, "c.d", l[0].EventType)
		require.True(t, l[0].ReceivedAt.Equal(at(2)), "received at %s", l[0].ReceivedAt)
		require.Equal(t, []store.DeliverySummary{{Route: "billing", State: string(delivered)}, {Route: "crm", State: string(dead)}},
			states(l[0].Deliveries), "every pair of the event, by route")
	})

	t.Run("a count ignores the limit and stops at its bound", func(t *testing.T) {
		t.Parallel()
		s, _ := three(t)
		n, err := s.EventCountByFilter(ctx, store.EventFilter{EventType: "a.b", Limit: 1}, 0)
		require.NoError(t, err)
		require.EqualValues(t, 2, n)
		n, err = s.EventCountByFilter(ctx, store.EventFilter{}, 2)
		require.NoError(t, err)
		require.EqualValues(t, 2, n)
	})

	t.Run("replay candidates are oldest first, paged by their cursor", func(t *testing.T) {
		t.Parallel()
		s, e := three(t)
		page, err := s.ReplayCandidatesPage(ctx, store.EventFilter{}, store.ReplayCursor{}, 2)
		require.NoError(t, err)
		require.Len(t, page, 2)
		require.Equal(t, []uuid.UUID{e[0], e[1]}, []uuid.UUID{page[0].EventID, page[1].EventID})
		require.Equal(t, map[string]string{"billing": string(delivered), "crm": string(dead)}, page[1].States)
		next := store.ReplayCursor{ReceivedAt: page[1].ReceivedAt, ID: page[1].EventID}
		n, err := s.ReplayCandidateCount(ctx, store.EventFilter{}, next)
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		page, err = s.ReplayCandidatesPage(ctx, store.EventFilter{}, next, 2)
		require.NoError(t, err)
		require.Len(t, page, 1)
		require.Equal(t, e[2], page[0].EventID)
		n, err = s.ReplayCandidateCount(ctx, store.EventFilter{Route: "billing", Limit: 1}, store.ReplayCursor{})
		require.NoError(t, err)
		require.EqualValues(t, 2, n, "the count ignores the limit")
	})

	t.Run("a replay takes dead and new pairs, delivered and stale ones only when asked", func(t *testing.T) {
		t.Parallel()
		s, add := open(t)
		id := add(at(1), "acme", "a.b", map[string]webhook.DeliveryState{"d": dead, "ok": delivered, "old": stale, "busy": pending})
		pair := func(route string) store.ReplayPair { return store.ReplayPair{EventID: id, Route: route} }
		all := []store.ReplayPair{pair("d"), pair("ok"), pair("old"), pair("busy"), pair("new")}
		done, err := s.ReplayEnqueueBy(ctx, uuid.Nil, all, false, false)
		require.NoError(t, err)
		require.ElementsMatch(t, []store.ReplayPair{pair("d"), pair("new")}, done, "a pending pair is on its way already")
		st, err := s.PairStates(ctx, all)
		require.NoError(t, err)
		require.Equal(t, map[store.ReplayPair]webhook.DeliveryState{pair("d"): pending, pair("ok"): delivered, pair("old"): stale,
			pair("busy"): pending, pair("new"): pending}, st)

		done, err = s.ReplayEnqueueBy(ctx, uuid.Nil, []store.ReplayPair{pair("ok"), pair("old")}, true, false)
		require.NoError(t, err)
		require.Equal(t, []store.ReplayPair{pair("ok")}, done)
		done, err = s.ReplayEnqueueBy(ctx, uuid.Nil, []store.ReplayPair{pair("old")}, false, true)
		require.NoError(t, err)
		require.Equal(t, []store.ReplayPair{pair("old")}, done)
	})

	t.Run("pair states name only the pairs that exist", func(t *testing.T) {
		t.Parallel()
		s, e := three(t)
		gone := uuid.Must(uuid.NewV7())
		st, err := s.PairStates(ctx, []store.ReplayPair{{EventID: e[1], Route: "crm"}, {EventID: e[1], Route: "nowhere"}, {EventID: gone, Route: "crm"}})
		require.NoError(t, err)
		require.Equal(t, map[store.ReplayPair]webhook.DeliveryState{{EventID: e[1], Route: "crm"}: dead}, st)
	})

	t.Run("an event shows with its pairs; an unknown one is not found", func(t *testing.T) {
		t.Parallel()
		s, e := three(t)
		d, err := s.EventShow(ctx, e[1])
		require.NoError(t, err)
		require.Equal(t, e[1], d.ID)
		require.Equal(t, "acme", d.Source)
		var got []store.DeliverySummary
		for _, dd := range d.Deliveries {
			got = append(got, store.DeliverySummary{Route: dd.Route, State: dd.State})
		}
		require.Equal(t, []store.DeliverySummary{{Route: "billing", State: string(delivered)}, {Route: "crm", State: string(dead)}}, got)
		_, err = s.EventShow(ctx, uuid.Must(uuid.NewV7()))
		require.True(t, errors.Is(err, store.ErrNotFound), "got %v", err)
	})
}

// states keeps each summary's route and state.
func states(ds []store.DeliverySummary) []store.DeliverySummary {
	out := make([]store.DeliverySummary, len(ds))
	for i, d := range ds {
		out[i] = store.DeliverySummary{Route: d.Route, State: d.State}
	}
	return out
}
