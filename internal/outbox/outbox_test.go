package outbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// fakeBatch records how it was completed.
type fakeBatch struct {
	msgs      []webhook.Message
	completed bool
	confirmed []int64
	failed    []webhook.OutboxFailure
}

func (b *fakeBatch) Messages() []webhook.Message { return b.msgs }

func (b *fakeBatch) Complete(_ context.Context, confirmed []int64, failed []webhook.OutboxFailure) error {
	b.completed, b.confirmed, b.failed = true, confirmed, failed
	return nil
}

func (b *fakeBatch) Release(context.Context) error { return nil }

type fakeStore struct{ batch *fakeBatch }

func (s fakeStore) OutboxClaim(context.Context, int) (Batch, error) { return s.batch, nil }

// fakePublisher answers every publish with results and err.
type fakePublisher struct {
	results []Result
	err     error
}

func (p fakePublisher) Publish(context.Context, []webhook.Message) ([]Result, error) {
	return p.results, p.err
}

func messages(priorAttempts ...int) []webhook.Message {
	out := make([]webhook.Message, len(priorAttempts))
	for i, a := range priorAttempts {
		out[i] = webhook.Message{OutboxID: int64(i + 1), EventID: uuid.Must(uuid.NewV7()), RoutingKey: "acme.x", OutboxAttempts: a}
	}
	return out
}

func newRelay(t *testing.T, batch *fakeBatch, pub Publisher, logs *bytes.Buffer) (*Relay, *Metrics) {
	t.Helper()
	m := NewMetrics(prometheus.NewRegistry())
	r, err := New(Config{
		Store: fakeStore{batch}, Publisher: pub, BatchSize: 10, PollInterval: time.Second,
		PublishTimeout: time.Second, Logger: zerolog.New(logs).Level(zerolog.InfoLevel), Metrics: m,
	})
	require.NoError(t, err)
	return r, m
}

// Item 9: each refused row gets its own failure with a backoff grown from
// its attempts, acked rows are deleted, and the batch is not an error: the
// next claim goes on.
func TestRunOnceRecordsRefusedRows(t *testing.T) {
	t.Parallel()
	batch := &fakeBatch{msgs: messages(0, 3, 0, 2)}
	var logs bytes.Buffer
	r, m := newRelay(t, batch, fakePublisher{results: []Result{
		{Acked: true}, {Failure: "returned"}, {Failure: "nack"}, {Failure: "unconfirmed"},
	}}, &logs)

	n, err := r.RunOnce(context.Background())
	require.NoError(t, err, "refused rows are handled per row, not as a failed batch")
	require.Equal(t, 4, n)
	require.True(t, batch.completed)
	require.Equal(t, []int64{1}, batch.confirmed)
	require.Len(t, batch.failed, 3)
	want := []struct {
		id     int64
		reason string
		step   time.Duration // the backoff step of the row's new attempt count
	}{{2, "returned", 8 * time.Second}, {3, "nack", time.Second}, {4, "unconfirmed", 4 * time.Second}}
	for i, w := range want {
		f := batch.failed[i]
		require.Equal(t, w.id, f.OutboxID)
		require.Equal(t, w.reason, f.Reason)
		require.GreaterOrEqual(t, f.RetryIn, w.step/2, "row %d", w.id)
		require.LessOrEqual(t, f.RetryIn, w.step, "row %d", w.id)
	}
	require.Equal(t, 1.0, testutil.ToFloat64(m.failures.WithLabelValues("returned")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.failures.WithLabelValues("nack")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.failures.WithLabelValues("unconfirmed")))

	// Logged at attempts 1 and 4 (powers of two), not at 3.
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	require.Len(t, lines, 2, logs.String())
	require.Contains(t, lines[0], `"outbox_id":2`)
	require.Contains(t, lines[0], `"reason":"returned"`)
	require.Contains(t, lines[0], `"attempts":4`)
	require.Contains(t, lines[1], `"outbox_id":3`)
	require.Contains(t, lines[1], `"attempts":1`)
}

// A publish that failed as a whole (no answer about the rows) deletes the
// rows acked before it failed, counts nothing against the others, and is
// an error so the relay backs off.
func TestRunOnceConnectionFailureCountsNothing(t *testing.T) {
	t.Parallel()
	batch := &fakeBatch{msgs: messages(0, 0, 0)}
	var logs bytes.Buffer
	lost := errors.New("rabbitmq connection lost")
	r, m := newRelay(t, batch, fakePublisher{results: []Result{{Acked: true}, {}, {}}, err: lost}, &logs)

	_, err := r.RunOnce(context.Background())
	require.ErrorIs(t, err, lost)
	require.True(t, batch.completed)
	require.Equal(t, []int64{1}, batch.confirmed)
	require.Empty(t, batch.failed)
	require.Equal(t, 0.0, testutil.ToFloat64(m.failures.WithLabelValues("unconfirmed")))
	require.Empty(t, logs.String())
}

func TestRetryDelayGrowsWithinBounds(t *testing.T) {
	t.Parallel()
	for n := 1; n <= 64; n++ {
		step := min(rowRetryMin<<min(n-1, 20), rowRetryMax)
		for range 50 {
			d := retryDelay(n)
			require.GreaterOrEqual(t, d, step/2, "refusal %d", n)
			require.LessOrEqual(t, d, step, "refusal %d", n)
		}
	}
	require.LessOrEqual(t, retryDelay(1), rowRetryMin)
	require.GreaterOrEqual(t, retryDelay(1000), rowRetryMax/2)
}

// A publisher that answers fewer messages than it was given, without an
// error, must not look like a success.
func TestRunOnceMissingOutcomesAreAnError(t *testing.T) {
	t.Parallel()
	batch := &fakeBatch{msgs: messages(0, 0)}
	var logs bytes.Buffer
	r, _ := newRelay(t, batch, fakePublisher{results: []Result{{Acked: true}}}, &logs)
	_, err := r.RunOnce(context.Background())
	require.ErrorContains(t, err, "no outcome for 1 of 2 messages")
	require.Equal(t, []int64{1}, batch.confirmed)
	require.Empty(t, batch.failed)
}

// fakeStoreErr fails every claim.
type fakeStoreErr struct{ err error }

func (s fakeStoreErr) OutboxClaim(context.Context, int) (Batch, error) { return nil, s.err }

// countingBatch counts releases and can fail Complete.
type countingBatch struct {
	fakeBatch
	released    int
	completeErr error
}

func (b *countingBatch) Complete(ctx context.Context, confirmed []int64, failed []webhook.OutboxFailure) error {
	if b.completeErr != nil {
		return b.completeErr
	}
	return b.fakeBatch.Complete(ctx, confirmed, failed)
}

func (b *countingBatch) Release(context.Context) error { b.released++; return nil }

// ctxPublisher records whether its context was live when called.
type ctxPublisher struct {
	results []Result
	ctxErr  error
}

func (p *ctxPublisher) Publish(ctx context.Context, msgs []webhook.Message) ([]Result, error) {
	p.ctxErr = ctx.Err()
	return p.results, nil
}

// Every row confirmed: all deleted, nothing counted, no error.
func TestRunOnceDeletesConfirmedRows(t *testing.T) {
	t.Parallel()
	batch := &fakeBatch{msgs: messages(0, 2, 0)}
	var logs bytes.Buffer
	r, m := newRelay(t, batch, fakePublisher{results: []Result{{Acked: true}, {Acked: true}, {Acked: true}}}, &logs)
	n, err := r.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Equal(t, []int64{1, 2, 3}, batch.confirmed)
	require.Empty(t, batch.failed)
	for _, reason := range []string{"nack", "returned", "unconfirmed"} {
		require.Zero(t, testutil.ToFloat64(m.failures.WithLabelValues(reason)), reason)
	}
	require.Empty(t, logs.String())
}

// A confirm timeout is the broker's answer about the rows it did not
// confirm: they count a failed attempt (unconfirmed) with a backoff, the
// acked ones are deleted, and the batch is an error, so the relay backs
// off.
func TestRunOnceConfirmTimeoutCountsTheUnanswered(t *testing.T) {
	t.Parallel()
	batch := &fakeBatch{msgs: messages(0, 0)}
	var logs bytes.Buffer
	timeout := errors.New("waiting for publisher confirms: confirm timeout after 1s")
	r, m := newRelay(t, batch, fakePublisher{results: []Result{{Acked: true}, {Failure: "unconfirmed"}}, err: timeout}, &logs)
	_, err := r.RunOnce(context.Background())
	require.ErrorIs(t, err, timeout)
	require.Equal(t, []int64{1}, batch.confirmed)
	require.Len(t, batch.failed, 1)
	require.Equal(t, webhook.OutboxFailure{OutboxID: 2, Reason: "unconfirmed", RetryIn: batch.failed[0].RetryIn}, batch.failed[0])
	require.Equal(t, 1.0, testutil.ToFloat64(m.failures.WithLabelValues("unconfirmed")))
}

// Nothing to publish: the empty claim is released.
func TestRunOnceReleasesAnEmptyClaim(t *testing.T) {
	t.Parallel()
	batch := &countingBatch{}
	r, err := New(Config{Store: storeOf(batch), Publisher: fakePublisher{}, BatchSize: 10, PollInterval: time.Second, PublishTimeout: time.Second})
	require.NoError(t, err)
	n, err := r.RunOnce(context.Background())
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, 1, batch.released)
	require.False(t, batch.completed)
}

// A claim that fails is an error; nothing is published.
func TestRunOnceClaimFailure(t *testing.T) {
	t.Parallel()
	down := errors.New("postgres down")
	r, err := New(Config{Store: fakeStoreErr{down}, Publisher: fakePublisher{}, BatchSize: 10, PollInterval: time.Second, PublishTimeout: time.Second})
	require.NoError(t, err)
	_, err = r.RunOnce(context.Background())
	require.ErrorIs(t, err, down)
}

// A Complete that fails leaves every row as it was (their messages will be
// published again): an error, and no refusal is counted.
func TestRunOnceCompleteFailureCountsNothing(t *testing.T) {
	t.Parallel()
	batch := &countingBatch{fakeBatch: fakeBatch{msgs: messages(0, 0)}, completeErr: errors.New("commit failed")}
	m := NewMetrics(prometheus.NewRegistry())
	r, err := New(Config{Store: storeOf(batch), Publisher: fakePublisher{results: []Result{{Acked: true}, {Failure: "nack"}}},
		BatchSize: 10, PollInterval: time.Second, PublishTimeout: time.Second, Metrics: m})
	require.NoError(t, err)
	_, err = r.RunOnce(context.Background())
	require.ErrorContains(t, err, "commit failed")
	require.Zero(t, testutil.ToFloat64(m.failures.WithLabelValues("nack")))
}

// A batch claimed before shutdown still publishes and completes: the
// publish does not run under the cancelled context.
func TestRunOnceFinishesAClaimedBatchAfterShutdown(t *testing.T) {
	t.Parallel()
	batch := &fakeBatch{msgs: messages(0)}
	pub := &ctxPublisher{results: []Result{{Acked: true}}}
	r, err := New(Config{Store: fakeStore{batch}, Publisher: pub, BatchSize: 10, PollInterval: time.Second, PublishTimeout: time.Second})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = r.RunOnce(ctx)
	require.NoError(t, err)
	require.NoError(t, pub.ctxErr, "published under a live context")
	require.Equal(t, []int64{1}, batch.confirmed)
}

// storeOfBatch claims b.
type storeOfBatch struct{ b Batch }

func (s storeOfBatch) OutboxClaim(context.Context, int) (Batch, error) { return s.b, nil }

func storeOf(b Batch) Store { return storeOfBatch{b} }

// pipeStore hands out `full` full batches of two rows, then empty ones.
// Each batch's Complete waits (up to 5s) for the next claim, so it only
// succeeds when the relay claims and publishes the next batch while the
// previous one completes.
type pipeStore struct {
	mu      sync.Mutex
	full    int
	claims  int
	claimed chan int // claim numbers, buffered
	order   []int    // completion order
}

type pipeBatch struct {
	s   *pipeStore
	n   int
	ids []int64
	// overlapped: the next claim came before this Complete returned.
	overlapped bool
}

func (s *pipeStore) OutboxClaim(context.Context, int) (Batch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.claims++
	n := s.claims
	s.claimed <- n
	if n > s.full {
		return &pipeBatch{s: s, n: n}, nil
	}
	return &pipeBatch{s: s, n: n, ids: []int64{int64(2*n - 1), int64(2 * n)}}, nil
}

func (b *pipeBatch) Messages() []webhook.Message {
	out := make([]webhook.Message, len(b.ids))
	for i, id := range b.ids {
		out[i] = webhook.Message{OutboxID: id, RoutingKey: "acme.x"}
	}
	return out
}

func (b *pipeBatch) Complete(_ context.Context, confirmed []int64, _ []webhook.OutboxFailure) error {
	deadline := time.After(testenv.Scaled(5 * time.Second))
	for {
		b.s.mu.Lock()
		next := b.s.claims > b.n
		if next {
			b.s.order = append(b.s.order, b.n)
		}
		b.s.mu.Unlock()
		if next {
			b.overlapped = true
			if !slices.Equal(confirmed, b.ids) {
				return fmt.Errorf("batch %d confirmed %v, want %v", b.n, confirmed, b.ids)
			}
			return nil
		}
		select {
		case <-b.s.claimed:
		case <-deadline:
			return fmt.Errorf("batch %d: no next claim while it completed", b.n)
		}
	}
}

func (b *pipeBatch) Release(context.Context) error { return nil }

// ackAll acks every message.
type ackAll struct{}

func (ackAll) Publish(_ context.Context, msgs []webhook.Message) ([]Result, error) {
	out := make([]Result, len(msgs))
	for i := range out {
		out[i].Acked = true
	}
	return out, nil
}

// Issue 11: Run claims and publishes the next batch while the previous
// one's rows are deleted, completes batches one at a time in claim order,
// and deletes each batch's confirmed rows in one call.
func TestRunPipelinesBatches(t *testing.T) {
	t.Parallel()
	s := &pipeStore{full: 3, claimed: make(chan int, 100)}
	var logs syncBuffer
	r, err := New(Config{Store: s, Publisher: ackAll{}, BatchSize: 2, PollInterval: time.Hour, PublishTimeout: time.Second,
		Logger: zerolog.New(&logs).Level(zerolog.WarnLevel)})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	deadline := time.After(testenv.Scaled(10 * time.Second))
	for {
		s.mu.Lock()
		n := len(s.order)
		s.mu.Unlock()
		if n == 3 {
			break
		}
		select {
		case <-deadline:
			t.Fatalf("3 batches not completed; logs: %s", logs.String())
		case <-time.After(5 * time.Millisecond): // polling an observable condition
		}
	}
	cancel()
	require.NoError(t, <-done)
	require.Equal(t, []int{1, 2, 3}, s.order, "completed one at a time, in claim order")
	require.Empty(t, logs.String(), "no batch failed")
}

// seqStore hands out its batches in turn, then empty ones.
type seqStore struct {
	mu      sync.Mutex
	batches []Batch
}

func (s *seqStore) OutboxClaim(context.Context, int) (Batch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.batches) == 0 {
		return &fakeBatch{}, nil
	}
	b := s.batches[0]
	s.batches = s.batches[1:]
	return b, nil
}

// syncBuffer is a bytes.Buffer safe for the relay's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A batch that fails to complete while the next one is claimed (pipelined)
// is still reported, and the relay backs off; Run returns nil on shutdown.
func TestRunReportsAPipelinedCompleteFailure(t *testing.T) {
	t.Parallel()
	failing := &countingBatch{fakeBatch: fakeBatch{msgs: messages(0, 0)}, completeErr: errors.New("commit failed")}
	var logs syncBuffer
	r, err := New(Config{Store: &seqStore{batches: []Batch{failing}}, Publisher: ackAll{}, BatchSize: 2,
		PollInterval: time.Hour, PublishTimeout: time.Second, Logger: zerolog.New(&logs).Level(zerolog.WarnLevel)})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "commit failed") }, testenv.Scaled(10*time.Second), 5*time.Millisecond,
		"the failed completion is logged")
	require.Contains(t, logs.String(), "outbox batch failed")
	cancel()
	require.NoError(t, <-done)
}
