package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/jackc/pgx/v5"
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

// The trigger that keeps the versions delivered runs for every pair whose
// event has a version, however the pair was made (the ingest's insert, a
// claim that makes its pair, a pair whose "versioned" is not known), and
// is skipped only for a pair known to have none (issue 40: it cost each
// delivery a PL/pgSQL call and a read of the event).
func TestDeliveredKeepsTheVersionOfEveryVersionedPair(t *testing.T) {
	t.Parallel()
	db, conn := openWithOwner(t)
	ctx := context.Background()

	insert := func(key, resource, version string, routes ...string) uuid.UUID {
		t.Helper()
		ev := newEvent("acme", key)
		ev.OrderingResource, ev.OrderingVersion, ev.OrderingVersionNum = resource, version, version
		id, dup, err := db.EventInsert(ctx, ev, routes)
		require.NoError(t, err)
		require.False(t, dup)
		return id
	}
	versioned := func(id uuid.UUID, route string) *bool {
		t.Helper()
		var v *bool
		require.NoError(t, conn.QueryRow(ctx, `SELECT versioned FROM deliveries WHERE event_id = $1 AND route = $2`, id, route).Scan(&v))
		return v
	}
	deliver := func(id uuid.UUID, route string) {
		t.Helper()
		l, err := db.DeliveryClaim(ctx, uuid.New(), id, route, 1, 0, time.Minute)
		require.NoError(t, err)
		_, _, err = l.Record(ctx, &webhook.Attempt{EventID: id, Route: route, Number: 1, StartedAt: time.Now(), Status: 200, Outcome: webhook.StateDelivered})
		require.NoError(t, err)
	}
	kept := func(resource, route string) string {
		t.Helper()
		var v string
		err := conn.QueryRow(ctx, `SELECT version FROM route_resource_versions WHERE route = $1 AND source = 'acme' AND resource = $2`, route, resource).Scan(&v)
		if errors.Is(err, pgx.ErrNoRows) {
			return ""
		}
		require.NoError(t, err)
		return v
	}
	yes, no := true, false

	// Made at ingest.
	a := insert("a", "sub_A", "3", "billing")
	require.Equal(t, &yes, versioned(a, "billing"))
	deliver(a, "billing")
	require.Equal(t, "3", kept("sub_A", "billing"))
	plain := insert("plain", "", "", "billing")
	require.Equal(t, &no, versioned(plain, "billing"))
	deliver(plain, "billing")

	// Made by the claim (no pair for the route yet).
	b := insert("b", "sub_B", "5")
	deliver(b, "crm")
	require.Equal(t, &yes, versioned(b, "crm"))
	require.Equal(t, "5", kept("sub_B", "crm"))
	plainCRM := insert("plain-crm", "", "")
	deliver(plainCRM, "crm")
	require.Equal(t, &no, versioned(plainCRM, "crm"))

	// Not known (a pair from before migration 0030): the trigger runs.
	c := insert("c", "sub_C", "7", "billing")
	_, err := conn.Exec(ctx, `UPDATE deliveries SET versioned = NULL WHERE event_id = $1`, c)
	require.NoError(t, err)
	deliver(c, "billing")
	require.Equal(t, "7", kept("sub_C", "billing"))

	// A pair wrongly marked without a version would keep nothing: the
	// column is what decides (the check above is not vacuous).
	d := insert("d", "sub_D", "9", "billing")
	_, err = conn.Exec(ctx, `UPDATE deliveries SET versioned = false WHERE event_id = $1`, d)
	require.NoError(t, err)
	deliver(d, "billing")
	require.Equal(t, "", kept("sub_D", "billing"))
}
