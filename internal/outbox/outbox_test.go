package outbox

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
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
	failed    []Failure
}

func (b *fakeBatch) Messages() []webhook.Message { return b.msgs }

func (b *fakeBatch) Complete(_ context.Context, confirmed []int64, failed []Failure) error {
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
