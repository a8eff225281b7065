package deliver_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/deliver"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// fakeReconcileStore answers DeliveryReconcile with up to limit of its
// overdue pairs (by how overdue they are), and records each call. As the
// store's transaction, it keeps the pairs when commit refuses; running, when
// set, runs between the statement and the commit (a statement that takes
// long).
type fakeReconcileStore struct {
	overdue []time.Duration
	calls   []time.Duration // the overdue threshold of each call
	running func()
}

func (s *fakeReconcileStore) DeliveryReconcile(_ context.Context, route string, margin time.Duration, limit int, commit func() error) ([]deliver.Reconciled, error) {
	s.calls = append(s.calls, margin)
	var out []deliver.Reconciled
	var left []time.Duration
	for _, o := range s.overdue {
		if o > margin && len(out) < limit {
			out = append(out, deliver.Reconciled{EventID: uuid.New(), Route: route, Gen: 1, Overdue: o})
			continue
		}
		left = append(left, o)
	}
	if s.running != nil {
		s.running()
	}
	if commit != nil && len(out) > 0 {
		if err := commit(); err != nil {
			return nil, err
		}
	}
	s.overdue = left
	return out, nil
}

// Issue 25: the reconciler re-sends a pair only when nothing in the broker
// can hold its copy: never while the route queue has ready messages; after
// the margin when no retry tier holds messages to dead-letter (lost);
// while one does, nothing until it has held them at every reading for
// strand_after, then only pairs overdue by strand_after (stranded), as
// when the tiers cannot be read. One batch a round.
func TestReconcilerResendsOnlyWhatNoCopyCanHold(t *testing.T) {
	t.Parallel()
	const margin, strand = 15 * time.Second, 5 * time.Minute
	for _, tc := range []struct {
		name      string
		ready     int
		consumers *int // 1 unless set
		tiers     map[string]int
		tiersErr  error
		held      time.Duration // how long the tiers counted at every reading
		overdue   []time.Duration
		wantCalls []time.Duration
		want      map[string]int // re-sent, by reason
	}{
		{
			name: "a backlog in the route queue: nothing, not even the store is asked", ready: 20000,
			overdue: []time.Duration{2 * time.Minute, 10 * time.Minute},
		},
		{
			// Fault suite, 2026-12-01: a quorum queue whose leader does
			// not answer within 250 ms reads 0 ready and 0 consumers, and
			// 500 pairs whose copies were in it were re-sent.
			name: "0 ready and 0 consumers: no answer, nothing", consumers: new(int), tiers: map[string]int{"hr.retry.10s": 0},
			overdue: []time.Duration{2 * time.Minute},
		},
		{
			name: "drained, tiers quiet: lost after the margin", tiers: map[string]int{"hr.retry.10s": 0},
			overdue:   []time.Duration{20 * time.Second, 10 * time.Second},
			wantCalls: []time.Duration{margin}, want: map[string]int{deliver.ReconciledLost: 1},
		},
		{
			name: "a tier dead-lettering, not for long: nothing, copies come back late", tiers: map[string]int{"hr.retry.10s": 0, "hr.retry.1m": 1885},
			held:    strand - time.Second,
			overdue: []time.Duration{20 * time.Second, 4 * time.Minute, 6 * time.Minute},
		},
		{
			name: "a tier dead-lettering at every reading for strand_after: overdue by strand_after", tiers: map[string]int{"hr.retry.10s": 0, "hr.retry.1m": 1885},
			held:      strand,
			overdue:   []time.Duration{20 * time.Second, 4 * time.Minute, 6 * time.Minute},
			wantCalls: []time.Duration{strand}, want: map[string]int{deliver.ReconciledStranded: 1},
		},
		{
			name: "tiers unreadable: only strand_after", tiersErr: errors.New("no node answered"),
			overdue:   []time.Duration{20 * time.Second, 6 * time.Minute},
			wantCalls: []time.Duration{strand}, want: map[string]int{deliver.ReconciledStranded: 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			store := &fakeReconcileStore{overdue: tc.overdue}
			consumers := 1
			if tc.consumers != nil {
				consumers = *tc.consumers
			}
			reg := prometheus.NewRegistry()
			now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
			r, err := deliver.NewReconciler(deliver.ReconcilerConfig{
				Routes: []string{"billing"}, Store: store,
				QueueReady: func(context.Context, string) (deliver.QueueReading, error) {
					return deliver.QueueReading{Ready: tc.ready, Consumers: consumers}, nil
				},
				Tiers:    func(context.Context) (map[string]int, error) { return tc.tiers, tc.tiersErr },
				Interval: time.Second, Margin: margin, StrandAfter: strand,
				Registerer: reg, Logger: zerolog.New(zerolog.NewTestWriter(t)),
				NowFunc: func() time.Time { return now },
			})
			require.NoError(t, err)
			if tc.held > 0 {
				// A first reading starts the tiers' run, held ago.
				_, err := r.ReadTiers(context.Background())
				require.NoError(t, err)
				now = now.Add(tc.held)
			}
			n, err := r.ReconcileRoute(context.Background(), "billing")
			require.NoError(t, err)
			require.Equal(t, tc.wantCalls, store.calls)
			total := 0
			for _, reason := range []string{deliver.ReconciledLost, deliver.ReconciledStranded} {
				c, err := reconciledCounter(reg, reason)
				require.NoError(t, err)
				require.Equal(t, float64(tc.want[reason]), c, reason)
				total += tc.want[reason]
			}
			require.Equal(t, total, n)
		})
	}
}

// One batch a round: the re-sent copies reach the route queue, and the next
// round sends more only once the queue is drained again.
func TestReconcilerSendsOneBatchARound(t *testing.T) {
	t.Parallel()
	store := &fakeReconcileStore{}
	for range 7 {
		store.overdue = append(store.overdue, time.Hour)
	}
	ready := 0
	r, err := deliver.NewReconciler(deliver.ReconcilerConfig{
		Routes: []string{"billing"}, Store: store, Batch: 3,
		QueueReady: func(context.Context, string) (deliver.QueueReading, error) {
			return deliver.QueueReading{Ready: ready, Consumers: 1}, nil
		},
		Tiers:    func(context.Context) (map[string]int, error) { return nil, nil },
		Interval: time.Second, Margin: 15 * time.Second,
		Registerer: prometheus.NewRegistry(), Logger: zerolog.New(zerolog.NewTestWriter(t)),
	})
	require.NoError(t, err)
	n, err := r.ReconcileRoute(context.Background(), "billing")
	require.NoError(t, err)
	require.Equal(t, 3, n)
	ready = 3 // the re-sent copies, not taken yet
	n, err = r.ReconcileRoute(context.Background(), "billing")
	require.NoError(t, err)
	require.Zero(t, n)
	ready = 0
	n, err = r.ReconcileRoute(context.Background(), "billing")
	require.NoError(t, err)
	require.Equal(t, 3, n)
}

func reconciledCounter(reg *prometheus.Registry, reason string) (float64, error) {
	families, err := reg.Gather()
	if err != nil {
		return 0, err
	}
	for _, f := range families {
		if f.GetName() != "hookrelay_reconciled_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue(), nil
				}
			}
		}
	}
	return 0, nil
}

// Issue 25: a delivery waiting for Postgres holds its copy unacked and
// unclaimed, out of the queue's ready count: nothing is re-sent until a
// margin after this process last failed to reach Postgres (a delivery's
// claim or record, or the reconciler's own statement).
func TestReconcilerWaitsAMarginAfterPostgresFailed(t *testing.T) {
	t.Parallel()
	const margin = 15 * time.Second
	var lastFailure time.Time
	store := &failingReconcileStore{fakeReconcileStore: fakeReconcileStore{overdue: []time.Duration{time.Hour, time.Hour}}}
	r, err := deliver.NewReconciler(deliver.ReconcilerConfig{
		Routes: []string{"billing"}, Store: store, Batch: 1,
		QueueReady: func(context.Context, string) (deliver.QueueReading, error) {
			return deliver.QueueReading{Consumers: 1}, nil
		},
		Tiers:                func(context.Context) (map[string]int, error) { return nil, nil },
		LastStoreFailureFunc: func() time.Time { return lastFailure },
		Interval:             time.Second, Margin: margin,
		Registerer: prometheus.NewRegistry(), Logger: zerolog.New(zerolog.NewTestWriter(t)),
	})
	require.NoError(t, err)

	lastFailure = time.Now().Add(-5 * time.Second) // a claim failed 5 s ago
	n, err := r.ReconcileRoute(context.Background(), "billing")
	require.NoError(t, err)
	require.Zero(t, n)
	require.Empty(t, store.calls, "the store is not even asked")

	lastFailure = time.Now().Add(-20 * time.Second)
	store.fail = errors.New("conn refused")
	_, err = r.ReconcileRoute(context.Background(), "billing")
	require.Error(t, err)
	store.fail = nil
	n, err = r.ReconcileRoute(context.Background(), "billing")
	require.NoError(t, err)
	require.Zero(t, n, "its own statement failed just now")
	require.Len(t, store.calls, 1)
}

// Issue 25: a Postgres outage is every dispatcher's, and another one's
// delivery may hold its copy waiting for Postgres: the reconciler asks
// Postgres every round and re-sends nothing until a margin after it last
// did not answer.
func TestReconcilerWaitsAMarginAfterAFailedPing(t *testing.T) {
	t.Parallel()
	var pingErr error
	store := &fakeReconcileStore{overdue: []time.Duration{time.Hour}}
	r := pingedReconciler(t, store, &pingErr, nil)
	pingErr = errors.New("timeout")
	n, err := r.ReconcileRoute(context.Background(), "billing")
	require.NoError(t, err)
	require.Zero(t, n)
	pingErr = nil
	n, err = r.ReconcileRoute(context.Background(), "billing")
	require.NoError(t, err)
	require.Zero(t, n, "Postgres answers again, but did not a moment ago")
	require.Empty(t, store.calls)
}

// The busy-core fault suite: pings time out through an outage, the last
// failing a ping timeout and a round before Postgres answers again, while
// another dispatcher's delivery waits out its backoff to claim its held
// copy. The margin runs from the first answer, not from the last failure.
func TestReconcilerMarginRunsFromPostgresAnsweringAgain(t *testing.T) {
	t.Parallel()
	const margin = 15 * time.Second
	now := time.Date(2026, 12, 2, 16, 0, 0, 0, time.UTC)
	var pingErr error
	store := &fakeReconcileStore{overdue: []time.Duration{time.Hour}}
	r := pingedReconciler(t, store, &pingErr, func() time.Time { return now })
	round := rounds(t, r)
	pingErr = errors.New("timeout")
	require.Zero(t, round()) // the last failure
	now = now.Add(4 * time.Second)
	pingErr = nil
	require.Zero(t, round(), "Postgres answers again")
	now = now.Add(margin - time.Second) // a margin after the last failure, not after the answer
	require.Zero(t, round(), "a held copy may still be waiting for its claim")
	require.Empty(t, store.calls)
	now = now.Add(time.Second)
	require.Equal(t, 1, round(), "a margin after Postgres answered again")
}

// Fault suite, 2026-12-05 ("Postgres unreachable, sockets open"): a round
// pinged Postgres just before the outage, found the queue drained and sent
// its statement, which stalled on its socket; it ran when the outage
// ended, when deliveries of both dispatchers held copies they had not
// been able to claim, and re-sent 4 of them as lost. A statement that
// comes back slower than a ping may take rolls its re-sends back and
// counts as a failure to reach Postgres: nothing is re-sent until a margin
// after the next ping's answer. One as fast as usual commits.
func TestReconcilerRollsBackAStatementThatRanLate(t *testing.T) {
	t.Parallel()
	const margin = 15 * time.Second
	now := time.Date(2026, 12, 5, 10, 44, 0, 0, time.UTC)
	var pingErr error
	store := &fakeReconcileStore{overdue: []time.Duration{time.Hour}}
	store.running = func() { now = now.Add(14 * time.Second) } // stalled through the outage
	r := pingedReconciler(t, store, &pingErr, func() time.Time { return now })
	round := rounds(t, r)
	require.Zero(t, round(), "the statement ran 14 s after it was sent")
	require.Len(t, store.calls, 1)
	require.Len(t, store.overdue, 1, "its re-send rolled back")

	store.running = nil
	now = now.Add(2 * time.Second)
	require.Zero(t, round(), "Postgres answers the next ping: the margin starts")
	now = now.Add(margin - time.Second)
	require.Zero(t, round(), "less than a margin after that")
	require.Len(t, store.calls, 1, "the store is not even asked")
	now = now.Add(time.Second)
	store.running = func() { now = now.Add(100 * time.Millisecond) }
	require.Equal(t, 1, round(), "a margin later, a statement as fast as usual commits")
	require.Empty(t, store.overdue)
}

// rounds returns a function that runs one round of r for billing and
// says how many pairs it re-sent.
func rounds(t *testing.T, r *deliver.Reconciler) func() int {
	return func() int {
		t.Helper()
		n, err := r.ReconcileRoute(context.Background(), "billing")
		require.NoError(t, err)
		return n
	}
}

// pingedReconciler reconciles billing (15s margin, a queue with a
// consumer and nothing ready, quiet tiers) asking Postgres with a ping that
// fails with *pingErr; now is its clock (time.Now when nil).
func pingedReconciler(t *testing.T, store deliver.ReconcileStore, pingErr *error, now func() time.Time) *deliver.Reconciler {
	t.Helper()
	r, err := deliver.NewReconciler(deliver.ReconcilerConfig{
		Routes: []string{"billing"}, Store: store,
		QueueReady: func(context.Context, string) (deliver.QueueReading, error) {
			return deliver.QueueReading{Consumers: 1}, nil
		},
		Tiers:    func(context.Context) (map[string]int, error) { return nil, nil },
		PingFunc: func(context.Context) error { return *pingErr },
		Interval: time.Second, Margin: 15 * time.Second,
		Registerer: prometheus.NewRegistry(), Logger: zerolog.New(zerolog.NewTestWriter(t)),
		NowFunc: now,
	})
	require.NoError(t, err)
	return r
}

type failingReconcileStore struct {
	fakeReconcileStore
	fail error
}

func (s *failingReconcileStore) DeliveryReconcile(ctx context.Context, route string, margin time.Duration, limit int, commit func() error) ([]deliver.Reconciled, error) {
	if s.fail != nil {
		s.calls = append(s.calls, margin)
		return nil, s.fail
	}
	return s.fakeReconcileStore.DeliveryReconcile(ctx, route, margin, limit, commit)
}

// Review of issue 18, item 6: a tier is stranding only when every reading
// over strand_after counted messages waiting to be dead-lettered; a
// reading that could not be made (the management API or Postgres away)
// starts the run again, so two readings around an outage do not make one.
func TestReconcilerStrandedRunNeedsEveryReading(t *testing.T) {
	t.Parallel()
	var reads atomic.Int32
	var gaps atomic.Bool
	gaps.Store(true)
	cleared := make(chan string, 10)
	r, err := deliver.NewReconciler(deliver.ReconcilerConfig{
		Store: &fakeReconcileStore{},
		QueueReady: func(context.Context, string) (deliver.QueueReading, error) {
			return deliver.QueueReading{Consumers: 1}, nil
		},
		Tiers: func(context.Context) (map[string]int, error) {
			if n := reads.Add(1); gaps.Load() && n%2 == 0 {
				return nil, errors.New("management API away")
			}
			return map[string]int{"hr.retry.10s": 5}, nil
		},
		ClearTierFunc: func(_ context.Context, tier string) error { cleared <- tier; return nil },
		Interval:      5 * time.Millisecond, Margin: 20 * time.Millisecond, StrandAfter: 20 * time.Millisecond,
		Registerer: prometheus.NewRegistry(), Logger: zerolog.New(zerolog.NewTestWriter(t)),
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()

	require.Eventually(t, func() bool { return reads.Load() >= 40 }, testenv.Scaled(10*time.Second), time.Millisecond)
	require.Empty(t, cleared, "every other reading failed: no run lasted")
	gaps.Store(false)
	select {
	case tier := <-cleared:
		require.Equal(t, "hr.retry.10s", tier)
	case <-time.After(testenv.Scaled(10 * time.Second)):
		t.Fatal("a tier counted at every reading for strand_after was not cleared")
	}
}
