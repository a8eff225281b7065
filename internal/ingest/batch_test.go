package ingest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// gateStore records the batches it is given. While gate is open (not
// closed) the first `held` calls block on it, so requests queue behind
// them. A batch holding key "bad" is refused; key "down" fails storage.
type gateStore struct {
	gate    chan struct{}
	held    int
	mu      sync.Mutex
	calls   [][]string
	started chan struct{} // one send per call, buffered
}

func newGateStore(held int) *gateStore {
	return &gateStore{gate: make(chan struct{}), held: held, started: make(chan struct{}, 1000)}
}

func (s *gateStore) EventInsertBatch(ctx context.Context, batch []webhook.Insert) ([]webhook.Stored, error) {
	keys := make([]string, len(batch))
	for i, in := range batch {
		keys[i] = in.Event.IdempotencyKey
	}
	s.mu.Lock()
	s.calls = append(s.calls, keys)
	n := len(s.calls)
	s.mu.Unlock()
	s.started <- struct{}{}
	if n <= s.held {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	out := make([]webhook.Stored, len(batch))
	for i, in := range batch {
		switch in.Event.IdempotencyKey {
		case "bad":
			return nil, errors.Join(&webhook.RefusedError{Reason: "value too long"}, errors.New("pg: 54000"))
		case "down":
			return nil, errors.New("connection reset")
		}
		out[i] = webhook.Stored{ID: in.Event.ID}
	}
	return out, nil
}

func (s *gateStore) batches() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]string(nil), s.calls...)
}

func newTestBatcher(t *testing.T, s Store, size int, wait time.Duration) (*batcher, *Metrics) {
	t.Helper()
	m := NewMetrics(prometheus.NewRegistry())
	return newBatcher(s, size, wait, m, zerolog.Nop()), m
}

func insertOf(key string) webhook.Insert {
	return webhook.Insert{Event: &webhook.Event{ID: uuid.Must(uuid.NewV7()), Source: "acme", IdempotencyKey: key, Body: []byte("{}")}}
}

// storeAll stores each key concurrently, returning the answers in order.
func storeAll(b *batcher, keys []string) func() []answer {
	out := make([]answer, len(keys))
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = b.storeOne(insertOf(k), time.Now().Add(30*time.Second))
		}()
	}
	return func() []answer { wg.Wait(); return out }
}

// waitQueued waits until n requests are queued in b.
func waitQueued(t *testing.T, b *batcher, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b.mu.Lock()
		q := len(b.queue)
		b.mu.Unlock()
		if q == n {
			return
		}
		require.False(t, time.Now().After(deadline), "timed out waiting for %d queued requests (have %d)", n, q)
		time.Sleep(time.Millisecond) // polling an observable condition
	}
}

// A lone request is stored at once, however long batch_wait is.
func TestGroupCommitBatcherLoneRequestWaitsForNothing(t *testing.T) {
	t.Parallel()
	s := newGateStore(0)
	b, _ := newTestBatcher(t, s, 64, time.Hour)
	start := time.Now()
	a := b.storeOne(insertOf("k1"), time.Now().Add(30*time.Second))
	require.NoError(t, a.err)
	require.Less(t, time.Since(start), 5*time.Second, "not held for batch_wait")
	require.Equal(t, [][]string{{"k1"}}, s.batches())
}

// Requests that arrive while both committers are busy are stored together
// by the next free committer, up to the batch size; each gets its own
// answer. With no work left, no committer remains.
func TestGroupCommitBatcherGathersWhatQueued(t *testing.T) {
	t.Parallel()
	s := newGateStore(2)
	b, _ := newTestBatcher(t, s, 4, 0)
	first := storeAll(b, []string{"a"})
	<-s.started
	second := storeAll(b, []string{"b"})
	<-s.started
	var keys []string
	for i := range 10 {
		keys = append(keys, fmt.Sprint("q", i))
	}
	rest := storeAll(b, keys)
	waitQueued(t, b, 10)
	close(s.gate)
	answers := append(append(first(), second()...), rest()...)
	for _, a := range answers {
		require.NoError(t, a.err)
		require.NotEqual(t, uuid.Nil, a.id)
	}
	calls := s.batches()
	require.Len(t, calls, 2+3, "10 queued requests in batches of at most 4")
	total := 0
	for _, c := range calls[2:] {
		require.LessOrEqual(t, len(c), 4)
		total += len(c)
	}
	require.Equal(t, 10, total)
	// A committer answers its batch first and counts itself out after,
	// when it finds the queue empty.
	require.Eventually(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.active == 0
	}, testenv.Scaled(10*time.Second), time.Millisecond, "committers end when the queue is empty")
}

// A refused row makes its batch be stored one by one: it gets its reason
// (400), the others are stored. A storage failure fails the whole batch
// and is not retried.
func TestGroupCommitBatcherFallback(t *testing.T) {
	t.Parallel()
	s := newGateStore(2)
	b, _ := newTestBatcher(t, s, 64, 0)
	first := storeAll(b, []string{"f1"})
	<-s.started
	second := storeAll(b, []string{"f2"})
	<-s.started
	rest := storeAll(b, []string{"g1", "bad", "g2"})
	waitQueued(t, b, 3)
	close(s.gate)
	first()
	second()
	answers := rest()
	require.NoError(t, answers[0].err)
	require.Equal(t, "value too long", answers[1].refused)
	require.NoError(t, answers[2].err)
	calls := s.batches()[2:]
	require.Len(t, calls, 4, "the batch, then each of its requests alone")
	require.ElementsMatch(t, []string{"g1", "bad", "g2"}, calls[0])
	require.ElementsMatch(t, [][]string{{"g1"}, {"bad"}, {"g2"}}, calls[1:])

	s2 := newGateStore(2)
	b2, _ := newTestBatcher(t, s2, 64, 0)
	first = storeAll(b2, []string{"f1"})
	<-s2.started
	second = storeAll(b2, []string{"f2"})
	<-s2.started
	rest = storeAll(b2, []string{"g1", "down", "g2"})
	waitQueued(t, b2, 3)
	close(s2.gate)
	first()
	second()
	for _, a := range rest() {
		require.Error(t, a.err)
		require.Empty(t, a.refused)
	}
	require.Len(t, s2.batches(), 3, "no one-by-one retry after a storage failure")
}

// A request whose store timeout passed while it was queued is answered 503
// without being stored.
func TestGroupCommitBatcherExpiredWhileQueued(t *testing.T) {
	t.Parallel()
	s := newGateStore(2)
	b, _ := newTestBatcher(t, s, 64, 0)
	first := storeAll(b, []string{"f1"})
	<-s.started
	second := storeAll(b, []string{"f2"})
	<-s.started
	done := make(chan answer, 1)
	go func() { done <- b.storeOne(insertOf("late"), time.Now().Add(50*time.Millisecond)) }()
	waitQueued(t, b, 1)
	a := <-done // answered by its own timer once the deadline and grace passed
	require.Error(t, a.err)
	close(s.gate)
	first()
	second()
	for _, c := range s.batches() {
		require.NotContains(t, c, "late", "never stored")
	}
}

// deadlineStore records the deadline each batch is given.
type deadlineStore struct {
	*gateStore
	deadlines chan time.Time
}

func (s *deadlineStore) EventInsertBatch(ctx context.Context, batch []webhook.Insert) ([]webhook.Stored, error) {
	if d, ok := ctx.Deadline(); ok && len(batch) > 1 {
		s.deadlines <- d
	}
	return s.gateStore.EventInsertBatch(ctx, batch)
}

// A batch is bounded by the latest deadline of its requests, not the
// earliest: a request that queued long must not leave the fresh requests
// of its batch a sliver of time.
func TestGroupCommitBatchIsBoundedByItsLatestDeadline(t *testing.T) {
	t.Parallel()
	s := &deadlineStore{gateStore: newGateStore(2), deadlines: make(chan time.Time, 10)}
	b, _ := newTestBatcher(t, s, 64, 0)
	first := storeAll(b, []string{"h1"})
	<-s.started
	second := storeAll(b, []string{"h2"})
	<-s.started
	soon, later := time.Now().Add(20*time.Second), time.Now().Add(time.Minute)
	answers := make(chan answer, 2)
	go func() { answers <- b.storeOne(insertOf("old"), soon) }()
	waitQueued(t, b, 1)
	go func() { answers <- b.storeOne(insertOf("fresh"), later) }()
	waitQueued(t, b, 2)
	close(s.gate)
	first()
	second()
	for range 2 {
		require.NoError(t, (<-answers).err)
	}
	require.WithinDuration(t, later, <-s.deadlines, time.Millisecond, "the batch of both has the later deadline")
}
