package store_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/storecontract"
	"github.com/hookrelay/hookrelay/internal/storecontract/opscontract"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/stretchr/testify/require"
)

// The Postgres store keeps ingest.Store's contract, as ingest's fake does
// (internal/ingest's TestFakeStoreKeepsTheIngestContract).
func TestStoreKeepsTheIngestContract(t *testing.T) {
	t.Parallel()
	storecontract.Ingest(t, func(t *testing.T) storecontract.IngestStore {
		db, _ := storetest.Open(t)
		return db
	})
}

func TestStoreKeepsTheOutboxContract(t *testing.T) {
	t.Parallel()
	storecontract.Outbox(t, func(t *testing.T) (storecontract.OutboxStore[*store.OutboxBatch], func(int, time.Duration) []int64) {
		db, _ := storetest.Open(t)
		return db, func(n int, hold time.Duration) []int64 {
			db.HoldOutbox(hold)
			items := make([]webhook.Insert, n)
			for i := range items {
				items[i] = webhook.Insert{Event: storecontract.Event("acme", fmt.Sprintf("evt_%d", i)), Routes: []string{"billing"}}
			}
			got, err := db.EventInsertBatch(t.Context(), items)
			require.NoError(t, err)
			ids := make([]int64, n)
			for i, s := range got {
				require.NoError(t, s.Err)
				ids[i] = s.OutboxID
			}
			return ids
		}
	})
}

// The Postgres store keeps deliver.Store's contract, as deliver's fake
// does (internal/deliver's TestFakeStoreKeepsTheDeliveryContract).
func TestStoreKeepsTheDeliveryContract(t *testing.T) {
	t.Parallel()
	storecontract.Delivery(t, func(t *testing.T) (storecontract.DeliveryStore[*store.DeliveryLease], func() uuid.UUID) {
		db, _ := storetest.Open(t)
		return db, func() uuid.UUID {
			got, err := db.EventInsertBatch(t.Context(), []webhook.Insert{{Event: storecontract.Event("acme", "evt_pair"), Routes: []string{"billing"}}})
			require.NoError(t, err)
			require.NoError(t, got[0].Err)
			return got[0].ID
		}
	})
}

// The Postgres store keeps the events part of ops.Store's contract, as
// ops' fake does (internal/ops's TestFakeStoreKeepsTheEventsContract).
func TestStoreKeepsTheEventsContract(t *testing.T) {
	t.Parallel()
	opscontract.Events(t, func(t *testing.T) (opscontract.EventsStore, opscontract.Add) {
		db, owner := openWithOwner(t)
		n := 0
		return db, func(at time.Time, source, eventType string, states map[string]webhook.DeliveryState) uuid.UUID {
			n++
			ev := storecontract.Event(source, fmt.Sprintf("evt_%d", n))
			ev.EventType, ev.ReceivedAt = eventType, at
			routes := slices.Sorted(maps.Keys(states))
			got, err := db.EventInsertBatch(t.Context(), []webhook.Insert{{Event: ev, Routes: routes}})
			require.NoError(t, err)
			require.NoError(t, got[0].Err)
			for route, st := range states {
				_, err := owner.Exec(t.Context(), `UPDATE deliveries SET state = $3 WHERE event_id = $1 AND route = $2`, got[0].ID, route, string(st))
				require.NoError(t, err)
			}
			return got[0].ID
		}
	})
}
