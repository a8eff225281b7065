package deliver_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/deliver"
	"github.com/hookrelay/hookrelay/internal/storecontract"
)

// The fake keeps the contract the Postgres store keeps
// (internal/store's TestStoreKeepsTheDeliveryContract).
func TestFakeStoreKeepsTheDeliveryContract(t *testing.T) {
	t.Parallel()
	storecontract.Delivery(t, func(*testing.T) (storecontract.DeliveryStore[deliver.Lease], func() uuid.UUID) {
		s := newFakeStore()
		s.locked = nil // no test waits on the claims here
		// Its one event: add makes it the pair's. Without one the fake
		// takes any event id as its own.
		s.event = uuid.Must(uuid.NewV7())
		return s, func() uuid.UUID {
			s.event = uuid.Must(uuid.NewV7())
			return s.event
		}
	})
}
