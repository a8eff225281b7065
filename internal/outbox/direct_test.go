package outbox

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// directStore records what Direct deleted and released, and signals each
// call on changed.
type directStore struct {
	mu       sync.Mutex
	deleted  [][]int64
	released [][]int64
	fail     error
	changed  chan struct{}
}

func newDirectStore() *directStore { return &directStore{changed: make(chan struct{}, 100)} }

func (s *directStore) OutboxDeletePublished(_ context.Context, ids []int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deleted = append(s.deleted, slices.Clone(ids))
	s.changed <- struct{}{}
	return s.fail
}

func (s *directStore) OutboxDueNow(_ context.Context, ids []int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.released = append(s.released, slices.Clone(ids))
	s.changed <- struct{}{}
	return s.fail
}

func (s *directStore) snapshot() (deleted, released []int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Concat(s.deleted...), slices.Concat(s.released...)
}

// scriptedPublisher acks every message except the outbox ids in refuse
// (answered "nack"), or fails whole with err; it can hold a publish until
// released.
type scriptedPublisher struct {
	mu     sync.Mutex
	refuse map[int64]bool
	err    error
	calls  [][]int64
	hold   chan struct{} // when set, each publish waits for a receive
}

func (p *scriptedPublisher) Publish(_ context.Context, msgs []webhook.Message) ([]Result, error) {
	if p.hold != nil {
		<-p.hold
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, ids(msgs))
	if p.err != nil {
		return make([]Result, len(msgs)), p.err
	}
	out := make([]Result, len(msgs))
	for i, m := range msgs {
		if p.refuse[m.OutboxID] {
			out[i].Failure = "nack"
		} else {
			out[i].Acked = true
		}
	}
	return out, nil
}

func newDirect(t *testing.T, st DirectStore, pub Publisher, wake chan struct{}, batch int, deleteAfter time.Duration) *Direct {
	t.Helper()
	d, err := NewDirect(DirectConfig{
		Store: st, Publisher: pub, Wake: wake, BatchSize: batch, MaxQueuedBytes: 1 << 20,
		DeleteAfter: deleteAfter, PublishTimeout: time.Second, Logger: zerolog.Nop(), Registerer: prometheus.NewRegistry(),
	})
	require.NoError(t, err)
	return d
}

func run(t *testing.T, d *Direct) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	return func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(testenv.Scaled(10 * time.Second)):
			t.Fatal("Run did not return after its context ended")
		}
	}
}

// waitFor waits, on each store call, until cond holds.
func waitFor(t *testing.T, st *directStore, cond func(deleted, released []int64) bool) {
	t.Helper()
	deadline := time.After(testenv.Scaled(10 * time.Second))
	for {
		if cond(st.snapshot()) {
			return
		}
		select {
		case <-st.changed:
		case <-deadline:
			d, r := st.snapshot()
			t.Fatalf("condition not met: deleted %v, released %v", d, r)
		}
	}
}

// Confirmed rows are deleted, together: a batch's worth at once, the rest
// after DeleteAfter; nothing is released.
func TestDirectDeletesConfirmedRowsTogether(t *testing.T) {
	t.Parallel()
	st, pub := newDirectStore(), &scriptedPublisher{}
	d := newDirect(t, st, pub, nil, 4, 50*time.Millisecond)
	stop := run(t, d)
	defer stop()

	d.Offer(messages(0, 0, 0, 0, 0, 0)) // ids 1..6: a full batch, then 2
	waitFor(t, st, func(deleted, _ []int64) bool { return len(deleted) == 6 })
	deleted, released := st.snapshot()
	require.ElementsMatch(t, []int64{1, 2, 3, 4, 5, 6}, deleted)
	require.Empty(t, released)
	st.mu.Lock()
	require.Len(t, st.deleted, 2, "the full batch at once, the rest after DeleteAfter: %v", st.deleted)
	st.mu.Unlock()
	require.Equal(t, 6.0, testutil.ToFloat64(d.outcomes.WithLabelValues(directPublished)))
}

// A refused message and a failed publish make their rows due for the Relay
// at once, and wake it; confirmed ones are still deleted.
func TestDirectReleasesWhatWasNotConfirmed(t *testing.T) {
	t.Parallel()
	st := newDirectStore()
	pub := &scriptedPublisher{refuse: map[int64]bool{2: true}}
	wake := make(chan struct{}, 1)
	d := newDirect(t, st, pub, wake, 10, 10*time.Millisecond)
	stop := run(t, d)
	defer stop()

	d.Offer(messages(0, 0, 0))
	waitFor(t, st, func(deleted, released []int64) bool { return len(deleted) == 2 && len(released) == 1 })
	deleted, released := st.snapshot()
	require.ElementsMatch(t, []int64{1, 3}, deleted)
	require.Equal(t, []int64{2}, released)
	select {
	case <-wake:
	default:
		t.Fatal("the relay was not woken for the released row")
	}

	pub.mu.Lock()
	pub.err = errors.New("connection lost")
	pub.mu.Unlock()
	msgs := messages(0, 0)
	for i := range msgs {
		msgs[i].OutboxID += 10
	}
	d.Offer(msgs)
	waitFor(t, st, func(_, released []int64) bool { return len(released) == 3 })
	_, released = st.snapshot()
	require.Equal(t, []int64{2, 11, 12}, released)
	require.Equal(t, 3.0, testutil.ToFloat64(d.outcomes.WithLabelValues(directReleased)))
}

// Offers past the queue's bound are not queued: their rows go to the
// Relay. The queue takes at least one offer whatever its size.
func TestDirectOverflowGoesToTheRelay(t *testing.T) {
	t.Parallel()
	st := newDirectStore()
	pub := &scriptedPublisher{hold: make(chan struct{})}
	d, err := NewDirect(DirectConfig{
		Store: st, Publisher: pub, BatchSize: 1, MaxQueuedBytes: 10,
		DeleteAfter: time.Millisecond, PublishTimeout: time.Second, Logger: zerolog.Nop(),
	})
	require.NoError(t, err)
	big := func(id int64) []webhook.Message {
		return []webhook.Message{{OutboxID: id, Body: []byte("0123456789")}}
	}
	// Queued while Run is not running yet: the first fits (an empty queue
	// takes anything), the second does not.
	d.Offer(big(1))
	d.Offer(big(2))
	stop := run(t, d)
	defer stop()
	waitFor(t, st, func(_, released []int64) bool { return len(released) == 1 })
	pub.hold <- struct{}{} // publish 1
	waitFor(t, st, func(deleted, _ []int64) bool { return len(deleted) == 1 })
	deleted, released := st.snapshot()
	require.Equal(t, []int64{1}, deleted)
	require.Equal(t, []int64{2}, released)
	require.Equal(t, 1.0, testutil.ToFloat64(d.outcomes.WithLabelValues(directOverflow)))
}

// At shutdown Direct publishes what is queued and deletes what was
// confirmed before it returns; an offer after that is left to the Relay.
func TestDirectDrainsAtShutdown(t *testing.T) {
	t.Parallel()
	st, pub := newDirectStore(), &scriptedPublisher{}
	d := newDirect(t, st, pub, nil, 100, time.Hour) // no delete before shutdown
	ctx, cancel := context.WithCancel(context.Background())
	d.Offer(messages(0, 0, 0))
	cancel()
	require.NoError(t, d.Run(ctx))
	deleted, released := st.snapshot()
	require.ElementsMatch(t, []int64{1, 2, 3}, deleted)
	require.Empty(t, released)

	d.Offer(messages(0))
	d.mu.Lock()
	require.Empty(t, d.queue, "an offer after Run ended is not queued")
	d.mu.Unlock()
}

// After a publish that failed as a whole, Direct does not try the broker
// again for each new batch: until its backoff has passed, new rows go to
// the Relay (released) without a publish; then it publishes again.
func TestDirectBacksOffAfterAFailedPublish(t *testing.T) {
	t.Parallel()
	st := newDirectStore()
	pub := &scriptedPublisher{err: errors.New("connection refused")}
	d := newDirect(t, st, pub, nil, 10, 10*time.Millisecond)
	var mu sync.Mutex
	now := time.Unix(1_000_000, 0)
	d.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	stop := run(t, d)
	defer stop()

	offer := func(id int64) {
		d.Offer([]webhook.Message{{OutboxID: id}})
	}
	offer(1)
	waitFor(t, st, func(_, released []int64) bool { return len(released) == 1 })
	offer(2) // paused: released without a publish
	waitFor(t, st, func(_, released []int64) bool { return len(released) == 2 })
	pub.mu.Lock()
	require.Len(t, pub.calls, 1, "one publish tried, not one per batch")
	pub.err = nil
	pub.mu.Unlock()

	mu.Lock()
	now = now.Add(time.Minute) // the backoff has passed
	mu.Unlock()
	offer(3)
	waitFor(t, st, func(deleted, _ []int64) bool { return len(deleted) == 1 })
	deleted, released := st.snapshot()
	require.Equal(t, []int64{3}, deleted)
	require.Equal(t, []int64{1, 2}, released)
}
