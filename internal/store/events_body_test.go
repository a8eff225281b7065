package store_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/stretchr/testify/require"
)

// withBodyHash marks ev as from a source with dedupe_body: its body hash is
// stored, and an identical body of the same source is a duplicate whatever
// its key.
func withBodyHash(ev *webhook.Event, body string) *webhook.Event {
	ev.Body = []byte(body)
	sum := sha256.Sum256(ev.Body)
	ev.BodySHA256 = sum[:]
	return ev
}

func TestEventInsertDeduplicatesOnBodyHash(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	insert := func(ev *webhook.Event) (uuid.UUID, bool) {
		t.Helper()
		id, dup, err := db.EventInsert(ctx, ev, []string{"all"})
		require.NoError(t, err)
		return id, dup
	}

	first, dup := insert(withBodyHash(newEvent("github", "d-1"), `{"ref":"main"}`))
	require.False(t, dup)
	id, dup := insert(withBodyHash(newEvent("github", "d-2"), `{"ref":"main"}`))
	require.True(t, dup, "same body, new key: a duplicate")
	require.Equal(t, first, id, "answered with the first event's id")

	_, dup = insert(withBodyHash(newEvent("shopify", "d-2"), `{"ref":"main"}`))
	require.False(t, dup, "the same body from another source is its own event")
	_, dup = insert(withBodyHash(newEvent("github", "d-3"), `{"ref":"dev"}`))
	require.False(t, dup, "another body is a new event")

	// Without a hash (a source without dedupe_body) only the key counts.
	plain := newEvent("github", "d-4")
	plain.Body = []byte(`{"ref":"main"}`)
	_, dup = insert(plain)
	require.False(t, dup, "no hash stored, no body conflict")

	// A request whose key matches one event and whose body matches
	// another is a duplicate of the one with its key.
	keyed, dup := insert(withBodyHash(newEvent("github", "d-5"), `{"ref":"five"}`))
	require.False(t, dup)
	id, dup = insert(withBodyHash(newEvent("github", "d-5"), `{"ref":"main"}`))
	require.True(t, dup)
	require.Equal(t, keyed, id, "the key's event wins over the body's")

	n, err := db.EventCount(ctx, "github")
	require.NoError(t, err)
	require.EqualValues(t, 4, n)
	var deliveries int
	require.NoError(t, db.Pool().QueryRow(ctx, `SELECT count(*) FROM deliveries`).Scan(&deliveries))
	require.Equal(t, 5, deliveries, "a duplicate writes no delivery row")
}

// Concurrent inserts of one body under different keys store it once: ON
// CONFLICT DO NOTHING without a target waits on every unique index,
// including the body hash's.
func TestEventInsertConcurrentSameBody(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	const n = 20
	ids := make([]uuid.UUID, n)
	dups := make([]bool, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ev := withBodyHash(newEvent("github", fmt.Sprint("d-", i)), `{"same":"body"}`)
			ids[i], dups[i], errs[i] = db.EventInsert(ctx, ev, nil)
		}()
	}
	wg.Wait()
	firsts := 0
	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, ids[0], ids[i], "every insert answers the first event's id")
		if !dups[i] {
			firsts++
		}
	}
	require.Equal(t, 1, firsts)
	backlog, _, err := db.OutboxStats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, backlog)
}
