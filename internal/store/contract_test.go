package store_test

import (
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/storecontract"
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
	storecontract.Outbox(t, func(t *testing.T) (storecontract.OutboxStore[*store.OutboxBatch], func(int) []int64) {
		db, _ := storetest.Open(t)
		return db, func(n int) []int64 {
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
