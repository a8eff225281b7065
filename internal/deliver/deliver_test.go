package deliver_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/deliver"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// fakeStore hands out locks on pending deliveries and remembers what was
// recorded and released.
type fakeStore struct {
	mu       sync.Mutex
	recorded []*webhook.Attempt
	released int
}

func (s *fakeStore) DeliveryLock(context.Context, uuid.UUID, string) (deliver.Lock, error) {
	return &fakeLock{s: s}, nil
}

func (s *fakeStore) AttemptRecord(_ context.Context, a *webhook.Attempt) (int64, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recorded = append(s.recorded, a)
	if a.Outcome == webhook.StateRetrying {
		return a.Gen + 1, true, nil
	}
	return a.Gen, true, nil
}

func (s *fakeStore) counts() (recorded, released int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.recorded), s.released
}

type fakeLock struct{ s *fakeStore }

func (l *fakeLock) State() webhook.DeliveryState { return webhook.StatePending }

func (l *fakeLock) Gen() int64 { return 0 }

func (l *fakeLock) Restart(context.Context) (int64, error) { return 1, nil }

func (l *fakeLock) Record(ctx context.Context, a *webhook.Attempt) (int64, error) {
	gen, _, err := l.s.AttemptRecord(ctx, a)
	return gen, err
}

func (l *fakeLock) Release(context.Context) error {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	l.s.released++
	return nil
}

// fakePublisher confirms every publish, except while blocked: then a
// publish fails, and Blocked returns a channel that Unblock closes.
type fakePublisher struct {
	mu        sync.Mutex
	lifted    chan struct{} // nil when not blocked
	published []string      // each confirmed publish: "retry <delay>" or "dead <reason>"
	attempts  chan struct{} // signalled on every Publish call
}

func newFakePublisher() *fakePublisher {
	return &fakePublisher{attempts: make(chan struct{}, 16)}
}

func (p *fakePublisher) Retry(_ context.Context, _ string, delay time.Duration, _ webhook.RouteMessage) error {
	return p.publish("retry " + delay.String())
}

func (p *fakePublisher) DeadLetter(_ context.Context, _ webhook.RouteMessage, why webhook.DeadLetter) error {
	return p.publish("dead " + why.Reason)
}

func (p *fakePublisher) publish(what string) error {
	p.attempts <- struct{}{}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lifted != nil {
		return errors.New("blocked")
	}
	p.published = append(p.published, what)
	return nil
}

func (p *fakePublisher) Blocked() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lifted == nil {
		return nil
	}
	return p.lifted
}

func (p *fakePublisher) Block() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lifted = make(chan struct{})
}

func (p *fakePublisher) Unblock() {
	p.mu.Lock()
	defer p.mu.Unlock()
	close(p.lifted)
	p.lifted = nil
}

func (p *fakePublisher) confirmed() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.published...)
}

type bundle struct {
	handler *deliver.Handler
	store   *fakeStore
	pub     *fakePublisher
	posts   chan struct{}
}

// setup returns a handler whose route answers with respond; each POST is
// signalled on posts.
func setup(t *testing.T, holdFor time.Duration, respond func(w http.ResponseWriter, r *http.Request)) *bundle {
	t.Helper()
	b := &bundle{store: &fakeStore{}, pub: newFakePublisher(), posts: make(chan struct{}, 16)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Reading the body lets the server notice a client that hangs up.
		_, _ = io.Copy(io.Discard, r.Body)
		b.posts <- struct{}{}
		respond(w, r)
	}))
	t.Cleanup(srv.Close)
	h, err := deliver.New(deliver.Config{
		Routes: []deliver.Route{{
			Name: "billing", URL: srv.URL, Timeout: 30 * time.Second, MaxAttempts: 3,
			SigningKeys: [][]byte{[]byte("key")},
		}},
		Tiers:          []deliver.Tier{{Name: "1s", Delay: time.Second}},
		Store:          b.store,
		Publisher:      b.pub,
		Metrics:        deliver.NewMetrics(prometheus.NewRegistry(), []string{"billing"}),
		Logger:         zerolog.New(zerolog.NewTestWriter(t)),
		PublishHoldFor: holdFor,
	})
	require.NoError(t, err)
	b.handler = h
	return b
}

func message() webhook.RouteMessage {
	return webhook.RouteMessage{EventID: uuid.New(), Attempt: 1, Body: []byte(`{}`)}
}

func recv(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// While the broker blocks publishing, a failed delivery's retry is held:
// Handle does not return (the message stays unacked, no new POST), and it
// publishes the retry once the block lifts.
func TestHandleHoldsRetryWhilePublishingIsBlocked(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Minute, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	b.pub.Block()
	done := make(chan error, 1)
	go func() { done <- b.handler.Handle(context.Background(), "billing", message(), make(chan struct{})) }()

	recv(t, b.posts, "the POST")
	select {
	case err := <-done:
		t.Fatalf("Handle returned while the broker blocked publishing: %v", err)
	case <-b.pub.attempts:
		t.Fatal("published while the broker blocked publishing")
	case <-time.After(300 * time.Millisecond): // a negative: nothing may happen in this window
	}
	recorded, _ := b.store.counts()
	require.Equal(t, 1, recorded, "the attempt is recorded before the hold")

	b.pub.Unblock()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Handle did not finish after the block lifted")
	}
	require.Equal(t, []string{"retry 1s"}, b.pub.confirmed())
	require.Len(t, b.posts, 0, "one POST only")
}

// A hold is bounded: after PublishHoldFor, Handle gives up (the caller
// requeues the message).
func TestHandleGivesUpAfterHoldBound(t *testing.T) {
	t.Parallel()
	b := setup(t, 200*time.Millisecond, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	b.pub.Block()
	err := b.handler.Handle(context.Background(), "billing", message(), make(chan struct{}))
	require.ErrorContains(t, err, "blocked publishing for longer than 200ms")
	require.Empty(t, b.pub.confirmed())
}

// Shutdown (stopping) ends a hold early.
func TestHandleHoldEndsOnShutdown(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Minute, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	b.pub.Block()
	stopping := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- b.handler.Handle(context.Background(), "billing", message(), stopping) }()
	recv(t, b.posts, "the POST")
	close(stopping)
	select {
	case err := <-done:
		require.ErrorContains(t, err, "shutting down")
	case <-time.After(10 * time.Second):
		t.Fatal("Handle kept holding after shutdown began")
	}
}

// Cancelling ctx aborts a POST in flight: nothing is recorded, the lock is
// released, and Handle returns an error (the message is not acked).
func TestHandleAbortedRecordsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Minute, func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.handler.Handle(ctx, "billing", message(), make(chan struct{})) }()
	recv(t, b.posts, "the POST")
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(10 * time.Second):
		t.Fatal("Handle did not return after ctx was cancelled")
	}
	recorded, released := b.store.counts()
	require.Zero(t, recorded, "an aborted attempt is not recorded")
	require.Equal(t, 1, released, "the delivery lock is released")
	require.Empty(t, b.pub.confirmed())
}
