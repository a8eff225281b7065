// Package storecontract holds the behaviour every implementation of a store
// interface a feature package declares must have, as tests run against
// each: the feature packages' fakes and the Postgres store alike, so a fake
// cannot drift from what Postgres does (River's riverdrivertest is the
// model). It imports only webhook: a feature package's own tests call it
// with their fake without an import cycle, the store's tests with *store.DB.
// Where a feature package's interface names a type of its own (a batch, a
// lease), the contract is generic over the implementation's type: Go has
// no covariant results. Each case runs in parallel on a store of its own.
//
// Ingest is ingest.Store's, Outbox outbox.Store's and outbox.DirectStore's,
// Delivery deliver.Store's; subpackage opscontract holds the events part of
// ops.Store's, whose types are the store's rows.
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
		t.Parallel()
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
		t.Parallel()
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
		t.Parallel()
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
		t.Parallel()
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
		t.Parallel()
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
		t.Parallel()
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

// OutboxBatch is outbox.Batch, spelled out here.
type OutboxBatch interface {
	Messages() []webhook.Message
	Complete(ctx context.Context, confirmed []int64, failed []webhook.OutboxFailure) error
	Release(ctx context.Context) error
}

// OutboxStore is outbox.Store and outbox.DirectStore, over the
// implementation's own batch type (outbox.Batch for a fake of the outbox
// package, *store.OutboxBatch for Postgres).
type OutboxStore[B OutboxBatch] interface {
	OutboxClaim(ctx context.Context, limit int) (B, error)
	OutboxDeletePublished(ctx context.Context, ids []int64) error
	OutboxDueNow(ctx context.Context, ids []int64) error
}

// Outbox runs outbox.Store's and outbox.DirectStore's contract against the
// store open returns, a fresh one for each case. add stores n events, each
// with its outbox row due after hold (0: at once; a receiver that
// publishes directly holds its rows back, store.HoldOutbox), and returns
// the rows' ids in the order stored.
func Outbox[B OutboxBatch](t *testing.T, open func(t *testing.T) (s OutboxStore[B], add func(n int, hold time.Duration) []int64)) {
	claim := func(t *testing.T, s OutboxStore[B], limit int) (B, []int64) {
		t.Helper()
		b, err := s.OutboxClaim(t.Context(), limit)
		require.NoError(t, err)
		var ids []int64
		for _, m := range b.Messages() {
			ids = append(ids, m.OutboxID)
		}
		return b, ids
	}
	t.Run("a claim takes the due rows oldest first, up to its limit", func(t *testing.T) {
		t.Parallel()
		s, add := open(t)
		ids := add(3, 0)
		b, got := claim(t, s, 2)
		require.Equal(t, ids[:2], got)
		for _, m := range b.Messages() {
			require.NotEqual(t, uuid.Nil, m.EventID, "with its event")
			require.NotEmpty(t, m.Body)
			require.Zero(t, m.OutboxAttempts)
		}
		require.NoError(t, b.Release(t.Context()))
	})
	t.Run("an empty claim is a batch of nothing that completes and releases", func(t *testing.T) {
		t.Parallel()
		s, _ := open(t)
		b, got := claim(t, s, 10)
		require.Empty(t, got)
		require.NoError(t, b.Complete(t.Context(), nil, nil))
		require.NoError(t, b.Release(t.Context()))
	})
	t.Run("rows a batch holds are skipped by another claim", func(t *testing.T) {
		t.Parallel()
		s, add := open(t)
		ids := add(2, 0)
		first, got := claim(t, s, 1)
		require.Equal(t, ids[:1], got)
		second, got := claim(t, s, 10)
		require.Equal(t, ids[1:], got, "only the row the first batch does not hold")
		require.NoError(t, first.Release(t.Context()))
		require.NoError(t, second.Release(t.Context()))
	})
	t.Run("confirmed rows are gone after Complete, the others released", func(t *testing.T) {
		t.Parallel()
		s, add := open(t)
		ids := add(2, 0)
		b, _ := claim(t, s, 10)
		require.NoError(t, b.Complete(t.Context(), ids[:1], nil))
		next, got := claim(t, s, 10)
		require.Equal(t, ids[1:], got)
		require.NoError(t, next.Release(t.Context()))
	})
	t.Run("a refused row waits out its RetryIn and counts the refusal", func(t *testing.T) {
		t.Parallel()
		s, add := open(t)
		ids := add(2, 0)
		b, _ := claim(t, s, 10)
		require.NoError(t, b.Complete(t.Context(), nil, []webhook.OutboxFailure{
			{OutboxID: ids[0], Reason: "nacked", RetryIn: time.Hour},
			{OutboxID: ids[1], Reason: "unroutable"},
		}))
		next, got := claim(t, s, 10)
		require.Equal(t, ids[1:], got, "the row to retry in an hour is not due")
		require.Equal(t, 1, next.Messages()[0].OutboxAttempts)
		require.NoError(t, next.Release(t.Context()))
	})
	t.Run("Release gives every row back, uncounted", func(t *testing.T) {
		t.Parallel()
		s, add := open(t)
		ids := add(2, 0)
		b, _ := claim(t, s, 10)
		require.NoError(t, b.Release(t.Context()))
		next, got := claim(t, s, 10)
		require.Equal(t, ids, got)
		for _, m := range next.Messages() {
			require.Zero(t, m.OutboxAttempts)
		}
		require.NoError(t, next.Release(t.Context()))
	})
	t.Run("a direct publish's delete skips rows a claim holds", func(t *testing.T) {
		t.Parallel()
		s, add := open(t)
		ids := add(3, 0)
		require.NoError(t, s.OutboxDeletePublished(t.Context(), ids[:1]))
		held, got := claim(t, s, 1)
		require.Equal(t, ids[1:2], got, "the deleted row is gone")
		require.NoError(t, s.OutboxDeletePublished(t.Context(), ids[1:]))
		require.NoError(t, held.Release(t.Context()))
		next, got := claim(t, s, 10)
		require.Equal(t, ids[1:2], got, "the held row was left to its batch; the free one deleted")
		require.NoError(t, next.Release(t.Context()))
	})
	t.Run("a cancelled context claims nothing and says so", func(t *testing.T) {
		t.Parallel()
		s, add := open(t)
		ids := add(1, 0)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := s.OutboxClaim(ctx, 10)
		require.ErrorIs(t, err, context.Canceled)
		b, got := claim(t, s, 10)
		require.Equal(t, ids, got, "the row is still there, unheld")
		require.NoError(t, b.Release(t.Context()))
	})
	t.Run("a held row waits until made due now; a refused one keeps its backoff", func(t *testing.T) {
		t.Parallel()
		s, add := open(t)
		ids := add(2, time.Hour)
		b, got := claim(t, s, 10)
		require.Empty(t, got, "held for the direct publish: not due")
		require.NoError(t, b.Release(t.Context()))
		require.NoError(t, s.OutboxDueNow(t.Context(), ids[:1]))
		b, got = claim(t, s, 10)
		require.Equal(t, ids[:1], got, "its direct publish failed: due at once")
		require.NoError(t, b.Complete(t.Context(), nil, []webhook.OutboxFailure{{OutboxID: ids[0], Reason: "nacked", RetryIn: time.Hour}}))
		require.NoError(t, s.OutboxDueNow(t.Context(), ids))
		b, got = claim(t, s, 10)
		require.Equal(t, ids[1:], got, "the refused row waits out its hour; the held one is due")
		require.NoError(t, b.Release(t.Context()))
	})
}

// DeliveryLease is deliver.Lease, spelled out here (without Restart, which
// the operator's requeue alone calls).
type DeliveryLease interface {
	State() webhook.DeliveryState
	Gen() int64
	Record(ctx context.Context, a *webhook.Attempt) (gen int64, current bool, err error)
	Release(ctx context.Context) error
}

// DeliveryStore is deliver.Store over the implementation's own lease type
// (deliver.Lease for a fake of the deliver package, *store.DeliveryLease
// for Postgres).
type DeliveryStore[L DeliveryLease] interface {
	DeliveryClaim(ctx context.Context, owner, eventID uuid.UUID, route string, attempt int, gen int64, ttl time.Duration) (L, error)
}

// Delivery runs deliver.Store's contract against the store open returns,
// a fresh one for each case. add stores an event for route "billing" and
// returns its id; its pair is pending at generation 0.
func Delivery[L DeliveryLease](t *testing.T, open func(t *testing.T) (s DeliveryStore[L], add func() uuid.UUID)) {
	const route, ttl = "billing", time.Minute
	attempt := func(eventID uuid.UUID, outcome webhook.DeliveryState, status int) *webhook.Attempt {
		now := time.Now()
		return &webhook.Attempt{EventID: eventID, Route: route, Number: 1, StartedAt: now, FirstAttemptAt: now,
			Duration: time.Millisecond, Status: status, Outcome: outcome, RetryIn: time.Second}
	}
	t.Run("a free pair is claimed, pending at its generation", func(t *testing.T) {
		t.Parallel()
		s, add := open(t)
		ev := add()
		l, err := s.DeliveryClaim(t.Context(), uuid.New(), ev, route, 1, 0, ttl)
		require.NoError(t, err)
		require.Equal(t, webhook.StatePending, l.State())
		require.Zero(t, l.Gen())
		require.NoError(t, l.Release(t.Context()))
	})
	t.Run("a live lease keeps other owners out and lets its own owner in again", func(t *testing.T) {
		t.Parallel()
		s, add := open(t)
		ev := add()
		owner := uuid.New()
		l, err := s.DeliveryClaim(t.Context(), owner, ev, route, 1, 0, ttl)
		require.NoError(t, err)
		_, err = s.DeliveryClaim(t.Context(), uuid.New(), ev, route, 1, 0, ttl)
		var busy *webhook.LeaseBusyError
		require.ErrorAs(t, err, &busy)
		require.Positive(t, busy.Remaining)
		require.LessOrEqual(t, busy.Remaining, ttl)
		again, err := s.DeliveryClaim(t.Context(), owner, ev, route, 1, 0, ttl)
		require.NoError(t, err, "a claim whose answer was lost, tried again, is not kept waiting for itself")
		require.Equal(t, webhook.StatePending, again.State())
		require.NoError(t, again.Release(t.Context()))
		require.NoError(t, l.Release(t.Context()), "releasing twice changes nothing")
	})
	t.Run("a released lease is free for another owner", func(t *testing.T) {
		t.Parallel()
		s, add := open(t)
		ev := add()
		l, err := s.DeliveryClaim(t.Context(), uuid.New(), ev, route, 1, 0, ttl)
		require.NoError(t, err)
		require.NoError(t, l.Release(t.Context()))
		next, err := s.DeliveryClaim(t.Context(), uuid.New(), ev, route, 1, 0, ttl)
		require.NoError(t, err)
		require.NoError(t, next.Release(t.Context()))
	})
	t.Run("a delivered pair is read, not claimed, whoever asks", func(t *testing.T) {
		t.Parallel()
		s, add := open(t)
		ev := add()
		l, err := s.DeliveryClaim(t.Context(), uuid.New(), ev, route, 1, 0, ttl)
		require.NoError(t, err)
		gen, current, err := l.Record(t.Context(), attempt(ev, webhook.StateDelivered, 200))
		require.NoError(t, err)
		require.True(t, current)
		require.Zero(t, gen)
		read, err := s.DeliveryClaim(t.Context(), uuid.New(), ev, route, 1, 0, ttl)
		require.NoError(t, err, "no lease to wait for")
		require.Equal(t, webhook.StateDelivered, read.State())
		require.NoError(t, read.Release(t.Context()))
	})
	t.Run("a retrying record moves the pair to the next generation and frees it", func(t *testing.T) {
		t.Parallel()
		s, add := open(t)
		ev := add()
		l, err := s.DeliveryClaim(t.Context(), uuid.New(), ev, route, 1, 0, ttl)
		require.NoError(t, err)
		gen, current, err := l.Record(t.Context(), attempt(ev, webhook.StateRetrying, 503))
		require.NoError(t, err)
		require.True(t, current)
		require.Equal(t, int64(1), gen)
		next, err := s.DeliveryClaim(t.Context(), uuid.New(), ev, route, 2, gen, ttl)
		require.NoError(t, err)
		require.Equal(t, webhook.StateRetrying, next.State())
		require.Equal(t, gen, next.Gen())
		require.NoError(t, next.Release(t.Context()))
	})
	t.Run("a copy of another generation reads the pair and holds nothing", func(t *testing.T) {
		t.Parallel()
		s, add := open(t)
		ev := add()
		stale, err := s.DeliveryClaim(t.Context(), uuid.New(), ev, route, 1, 7, ttl)
		require.NoError(t, err)
		require.Zero(t, stale.Gen(), "the pair's own generation")
		l, err := s.DeliveryClaim(t.Context(), uuid.New(), ev, route, 1, 0, ttl)
		require.NoError(t, err, "the stale copy took no lease")
		require.NoError(t, l.Release(t.Context()))
	})
	t.Run("an expired lease is taken over and its old holder's record refused", func(t *testing.T) {
		t.Parallel()
		s, add := open(t)
		ev := add()
		old, err := s.DeliveryClaim(t.Context(), uuid.New(), ev, route, 1, 0, time.Millisecond)
		require.NoError(t, err)
		// Polled here, not in an Eventually: its condition runs on a
		// goroutine of its own, and taken is read afterwards.
		var taken L
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for deadline := time.Now().Add(10 * time.Second); ; <-tick.C {
			taken, err = s.DeliveryClaim(t.Context(), uuid.New(), ev, route, 1, 0, ttl)
			if err == nil {
				break
			}
			var busy *webhook.LeaseBusyError
			require.ErrorAs(t, err, &busy)
			require.True(t, time.Now().Before(deadline), "a lease of a millisecond still live after 10s")
		}
		_, _, err = old.Record(t.Context(), attempt(ev, webhook.StateDelivered, 200))
		require.ErrorIs(t, err, webhook.ErrLeaseLost)
		gen, current, err := taken.Record(t.Context(), attempt(ev, webhook.StateDelivered, 200))
		require.NoError(t, err, "the new holder records")
		require.True(t, current)
		require.Zero(t, gen)
	})
	t.Run("an event that is not there fails the claim as missing", func(t *testing.T) {
		t.Parallel()
		s, _ := open(t)
		_, err := s.DeliveryClaim(t.Context(), uuid.New(), uuid.Must(uuid.NewV7()), route, 1, 0, ttl)
		require.ErrorIs(t, err, webhook.ErrEventMissing)
	})
}
