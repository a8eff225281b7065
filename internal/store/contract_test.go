package store_test

import (
	"testing"

	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/storecontract"
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
