package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/stretchr/testify/require"
)

// The stale check compares versions as the migration documents: numbers
// (and times, as seconds) by value, other versions as text, the two kinds
// never with each other; the route keeps the greatest version delivered,
// per source and resource.
func TestDeliveryStaleComparesVersions(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	n := 0
	insert := func(source, resource, version, num string) uuid.UUID {
		t.Helper()
		n++
		ev := newEvent(source, "k"+time.Now().Format(time.RFC3339Nano)+string(rune('a'+n)))
		ev.OrderingResource, ev.OrderingVersion, ev.OrderingVersionNum = resource, version, num
		id, dup, err := db.EventInsert(ctx, ev, []string{"billing", "crm"})
		require.NoError(t, err)
		require.False(t, dup)
		return id
	}
	deliver := func(id uuid.UUID, route string) {
		t.Helper()
		require.NoError(t, recordErr(db.AttemptRecord(ctx, &webhook.Attempt{EventID: id, Route: route, Number: 1, StartedAt: time.Now(), Status: 200, Outcome: webhook.StateDelivered})))
	}
	stale := func(id uuid.UUID, route string) *store.Stale {
		t.Helper()
		s, err := db.DeliveryStale(ctx, id, route)
		require.NoError(t, err)
		return s
	}

	v10 := insert("acme", "sub_A", "10", "10")
	v9 := insert("acme", "sub_A", "9", "9")
	require.Nil(t, stale(v9, "billing"), "nothing delivered yet")
	deliver(v10, "billing")
	s := stale(v9, "billing")
	require.NotNil(t, s, "9 < 10 as numbers (as text it would be newer)")
	require.Equal(t, store.Stale{Resource: "sub_A", Version: "9", Delivered: "10", DeliveredEvent: v10}, *s)
	require.Nil(t, stale(v9, "crm"), "per route")
	require.Nil(t, stale(v10, "billing"), "an equal version is not stale")
	require.Nil(t, stale(insert("other", "sub_A", "1", "1"), "billing"), "per source")
	require.Nil(t, stale(insert("acme", "sub_B", "1", "1"), "billing"), "per resource")
	require.Nil(t, stale(insert("acme", "sub_A", "v1", ""), "billing"), "a text and a number do not compare")
	require.Nil(t, stale(insert("acme", "", "", ""), "billing"), "no ordering: never stale")

	// The route keeps the greatest: delivering 9 (an operator's replay)
	// leaves 10.
	deliver(v9, "billing")
	require.NotNil(t, stale(insert("acme", "sub_A", "9.5", "9.5"), "billing"))

	// Text versions compare byte by byte.
	b := insert("acme", "doc", "b", "")
	deliver(b, "billing")
	require.NotNil(t, stale(insert("acme", "doc", "a", ""), "billing"))
	require.Nil(t, stale(insert("acme", "doc", "c", ""), "billing"))

	// A stale pair is replayed only when asked, and then its copy skips
	// the check; a later replay without it checks again.
	v8 := insert("acme", "sub_A", "8", "8")
	require.NotNil(t, stale(v8, "billing"))
	require.NoError(t, recordErr(db.AttemptRecord(ctx, &webhook.Attempt{EventID: v8, Route: "billing", Number: 1, StartedAt: time.Now(), Outcome: webhook.StateStale})))
	pair := []store.ReplayPair{{EventID: v8, Route: "billing"}}
	done, err := db.ReplayEnqueue(ctx, pair, true, false)
	require.NoError(t, err)
	require.Empty(t, done, "stale pairs need includeStale")
	done, err = db.ReplayEnqueue(ctx, pair, false, true)
	require.NoError(t, err)
	require.Equal(t, pair, done)
	require.Nil(t, stale(v8, "billing"), "the operator asked for it")
	deliver(v8, "billing")
	done, err = db.ReplayEnqueue(ctx, pair, true, false)
	require.NoError(t, err)
	require.Equal(t, pair, done)
	require.NotNil(t, stale(v8, "billing"), "a replay of the delivered pair is checked again")
}
