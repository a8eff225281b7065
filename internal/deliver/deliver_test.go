package deliver_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

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
	_, _, _, recorded := b.store.snapshot()
	require.Len(t, recorded, 1, "the attempt is recorded before the hold")

	b.pub.Unblock()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Handle did not finish after the block lifted")
	}
	retries, _ := b.pub.published()
	require.Len(t, retries, 1)
	require.Equal(t, time.Second, retries[0].delay)
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
	requireNothingPublished(t, b.pub)
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
	_, released, _, recorded := b.store.snapshot()
	require.Empty(t, recorded, "an aborted attempt is not recorded")
	require.Equal(t, 1, released, "the delivery lock is released")
	requireNothingPublished(t, b.pub)
}
