// Package storecontract holds the behaviour every implementation of a store
// interface a feature package declares must have, as tests run against
// each: the feature packages' fakes and the Postgres store alike, so a fake
// cannot drift from what Postgres does (River's riverdrivertest is the
// model). It imports only webhook: a feature package's own tests call it
// with their fake without an import cycle, the store's tests with *store.DB.
package storecontract

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/stretchr/testify/require"
)

// IngestStore is ingest.Store, spelled out here (see the package comment).
type IngestStore interface {
	EventInsertBatch(ctx context.Context, batch []webhook.Insert) ([]webhook.Stored, error)
}

// Ingest runs ingest.Store's contract against the store open returns, a
// fresh one for each case.
func Ingest(t *testing.T, open func(t *testing.T) IngestStore) {
	t.Run("a new event is stored under its own id", func(t *testing.T) {
		s := open(t)
		ev := Event("acme", "evt_new")
		got, err := s.EventInsertBatch(t.Context(), []webhook.Insert{{Event: ev, Routes: []string{"billing"}}})
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.NoError(t, got[0].Err)
		require.Equal(t, ev.ID, got[0].ID)
		require.False(t, got[0].Duplicate)
	})
	t.Run("the same source and key again is a duplicate of the first", func(t *testing.T) {
		s := open(t)
		first := Event("acme", "evt_again")
		_, err := s.EventInsertBatch(t.Context(), []webhook.Insert{{Event: first, Routes: []string{"billing"}}})
		require.NoError(t, err)
		got, err := s.EventInsertBatch(t.Context(), []webhook.Insert{{Event: Event("acme", "evt_again"), Routes: []string{"billing"}}})
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.True(t, got[0].Duplicate)
		require.Equal(t, first.ID, got[0].ID, "the first's id")
	})
	t.Run("a duplicate within one batch gets the earlier item's id", func(t *testing.T) {
		s := open(t)
		a, b, c := Event("acme", "evt_twice"), Event("acme", "evt_twice"), Event("acme", "evt_other")
		got, err := s.EventInsertBatch(t.Context(), []webhook.Insert{{Event: a}, {Event: b}, {Event: c}})
		require.NoError(t, err)
		require.Len(t, got, 3, "one answer per item, in order")
		require.Equal(t, a.ID, got[0].ID)
		require.False(t, got[0].Duplicate)
		require.Equal(t, a.ID, got[1].ID)
		require.True(t, got[1].Duplicate)
		require.Equal(t, c.ID, got[2].ID)
		require.False(t, got[2].Duplicate)
	})
	t.Run("the same key from another source is another event", func(t *testing.T) {
		s := open(t)
		a, b := Event("acme", "evt_shared"), Event("globex", "evt_shared")
		got, err := s.EventInsertBatch(t.Context(), []webhook.Insert{{Event: a}, {Event: b}})
		require.NoError(t, err)
		require.Len(t, got, 2)
		require.False(t, got[0].Duplicate)
		require.False(t, got[1].Duplicate)
		require.Equal(t, b.ID, got[1].ID)
	})
	t.Run("a row Postgres refuses fails the batch with the reason, storing nothing", func(t *testing.T) {
		s := open(t)
		ok, bad := Event("acme", "evt_fine"), Event("acme", "evt_nul")
		bad.EventType = "invoice\x00paid" // text may hold no NUL
		_, err := s.EventInsertBatch(t.Context(), []webhook.Insert{{Event: ok}, {Event: bad}})
		var refused *webhook.RefusedError
		require.ErrorAs(t, err, &refused)
		require.ErrorIs(t, err, webhook.ErrRowRefused)
		require.NotEmpty(t, refused.Reason)
		got, err := s.EventInsertBatch(t.Context(), []webhook.Insert{{Event: Event("acme", "evt_fine")}})
		require.NoError(t, err)
		require.False(t, got[0].Duplicate, "nothing of the refused batch was stored")
	})
	t.Run("a cancelled context stores nothing and says so", func(t *testing.T) {
		s := open(t)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := s.EventInsertBatch(ctx, []webhook.Insert{{Event: Event("acme", "evt_cancelled")}})
		require.ErrorIs(t, err, context.Canceled)
		fresh := Event("acme", "evt_cancelled")
		got, err := s.EventInsertBatch(t.Context(), []webhook.Insert{{Event: fresh}})
		require.NoError(t, err)
		require.False(t, got[0].Duplicate, "nothing of the cancelled batch was stored")
	})
}

// Event is an event of source with idempotency key, received now, its id
// a UUIDv7 (as a receiver makes it: the store files it by its day).
func Event(source, key string) *webhook.Event {
	return &webhook.Event{
		ID: uuid.Must(uuid.NewV7()), Source: source, IdempotencyKey: key, EventType: "invoice.paid",
		ContentType: "application/json", Headers: http.Header{"X-Test": {"1"}},
		Body: []byte(`{"id":"` + key + `"}`), ReceivedAt: time.Now(),
	}
}
