package group

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/stretchr/testify/require"
)

// gate is a Func whose batches are recorded, and whose first batch waits
// until release is closed.
type gate struct {
	mu      sync.Mutex
	batches [][]int
	first   chan struct{} // closed when the first batch started
	release chan struct{}
	fail    error
}

func newGate() *gate {
	return &gate{first: make(chan struct{}), release: make(chan struct{})}
}

func (g *gate) run(_ context.Context, items []int) ([]int, error) {
	g.mu.Lock()
	g.batches = append(g.batches, slices.Clone(items))
	n := len(g.batches)
	g.mu.Unlock()
	if n == 1 {
		close(g.first)
		<-g.release
	}
	if g.fail != nil {
		return nil, g.fail
	}
	out := make([]int, len(items))
	for i, it := range items {
		out[i] = it * 10
	}
	return out, nil
}

func (g *gate) sizes() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	var s []int
	for _, b := range g.batches {
		s = append(s, len(b))
	}
	return s
}

// queued waits until n calls are queued behind the batch in progress.
func queued[I, O any](t *testing.T, b *Batcher[I, O], n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.queue) == n
	}, testenv.Scaled(5*time.Second), time.Millisecond)
}

func TestLoneCallGoesAloneAtOnce(t *testing.T) {
	g := newGate()
	close(g.release)
	b := New(context.Background(), Options{Size: 8}, g.run)
	out, err := b.Do(context.Background(), 7)
	require.NoError(t, err)
	require.Equal(t, 70, out)
	require.Equal(t, []int{1}, g.sizes())
	// The committer answers before it looks at the queue again.
	require.Eventually(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.active == 0
	}, testenv.Scaled(5*time.Second), time.Millisecond, "no committer left running once the queue is empty")
}

// Calls made while a batch is in progress go together in the next one, up
// to Size; each gets its own result.
func TestCallsQueuedDuringABatchGoTogether(t *testing.T) {
	g := newGate()
	b := New(context.Background(), Options{Size: 4, Committers: 1}, g.run)
	var wg sync.WaitGroup
	results := make([]int, 11)
	do := func(i int) {
		wg.Go(func() {
			out, err := b.Do(context.Background(), i)
			if err == nil {
				results[i] = out
			}
		})
	}
	do(0)
	<-g.first
	for i := 1; i <= 10; i++ {
		do(i)
	}
	queued(t, b, 10)
	close(g.release)
	wg.Wait()
	require.Equal(t, []int{1, 4, 4, 2}, g.sizes())
	for i, r := range results {
		require.Equal(t, i*10, r, "call %d got its own result", i)
	}
}

// A caller that gives up while queued gets its context's error at once and
// is left out of the batch.
func TestCallerGivingUpIsLeftOut(t *testing.T) {
	g := newGate()
	b := New(context.Background(), Options{Size: 8, Committers: 1}, g.run)
	go func() { _, _ = b.Do(context.Background(), 0) }()
	<-g.first
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := b.Do(ctx, 1)
		errc <- err
	}()
	done := make(chan int, 1)
	go func() {
		out, _ := b.Do(context.Background(), 2)
		done <- out
	}()
	queued(t, b, 2)
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	close(g.release)
	require.Equal(t, 20, <-done)
	g.mu.Lock()
	defer g.mu.Unlock()
	require.Equal(t, [][]int{{0}, {2}}, g.batches, "the cancelled call was not made")
}

// A batch's error is every one of its calls'.
func TestBatchErrorIsEveryCalls(t *testing.T) {
	g := newGate()
	g.fail = errors.New("postgres unreachable")
	b := New(context.Background(), Options{Size: 8, Committers: 1}, g.run)
	errs := make(chan error, 3)
	go func() { _, err := b.Do(context.Background(), 0); errs <- err }()
	<-g.first
	for i := 1; i <= 2; i++ {
		go func() { _, err := b.Do(context.Background(), i); errs <- err }()
	}
	queued(t, b, 2)
	close(g.release)
	for range 3 {
		require.ErrorContains(t, <-errs, "postgres unreachable")
	}
	require.Equal(t, []int{1, 2}, g.sizes())
}

func TestWrongNumberOfResultsIsAnError(t *testing.T) {
	b := New(context.Background(), Options{Size: 8}, func(context.Context, []int) ([]int, error) {
		return nil, nil
	})
	_, err := b.Do(context.Background(), 1)
	require.ErrorContains(t, err, "different number of results")
}

// With two committers, a call arriving while one batch is in progress is
// made at once by the second.
func TestSecondCommitterTakesACallAtOnce(t *testing.T) {
	g := newGate()
	b := New(context.Background(), Options{Size: 8, Committers: 2}, g.run)
	go func() { _, _ = b.Do(context.Background(), 0) }()
	<-g.first
	out, err := b.Do(context.Background(), 1)
	require.NoError(t, err)
	require.Equal(t, 10, out)
	close(g.release)
}
