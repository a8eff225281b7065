package deliver_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/stretchr/testify/require"
)

// A retry needs no publish: its copy goes into the outbox with the record
// of the failed attempt, so a broker that blocks publishing (an alarm)
// does not hold it, and Handle returns at once (the message is acked).
func TestHandleRetryNeedsNoPublish(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Minute, status(http.StatusInternalServerError))
	b.pub.Block()
	require.NoError(t, b.handler.Handle(context.Background(), "billing", message(), make(chan struct{})))
	require.Empty(t, b.pub.attempts, "nothing published")
	retries, deads := b.published()
	require.Len(t, retries, 1, "the retry copy is recorded with the attempt")
	require.Equal(t, time.Second, retries[0].delay)
	require.Empty(t, deads)
}

// While the broker blocks publishing, a dead letter is held: Handle does
// not return (the message stays unacked, no new POST), and it publishes
// the dead letter once the block lifts.
func TestHandleHoldsDeadLetterWhilePublishingIsBlocked(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Minute, status(http.StatusGone))
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
	case <-time.After(testenv.Scaled(10 * time.Second)):
		t.Fatal("Handle did not finish after the block lifted")
	}
	_, deads := b.published()
	require.Len(t, deads, 1)
	require.Equal(t, "no_retry_status", deads[0].why.Reason)
	require.Len(t, b.posts, 0, "one POST only")
}

// A hold is bounded: after PublishHoldFor, Handle gives up (the caller
// requeues the message).
func TestHandleGivesUpAfterHoldBound(t *testing.T) {
	t.Parallel()
	b := setup(t, 200*time.Millisecond, status(http.StatusGone))
	b.pub.Block()
	err := b.handler.Handle(context.Background(), "billing", message(), make(chan struct{}))
	require.ErrorContains(t, err, "blocked publishing for longer than 200ms")
	requireNothingPublished(t, b)
}

// Shutdown (stopping) ends a hold early.
func TestHandleHoldEndsOnShutdown(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Minute, status(http.StatusGone))
	b.pub.Block()
	stopping := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- b.handler.Handle(context.Background(), "billing", message(), stopping) }()
	recv(t, b.posts, "the POST")
	close(stopping)
	select {
	case err := <-done:
		require.ErrorContains(t, err, "shutting down")
	case <-time.After(testenv.Scaled(10 * time.Second)):
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
	case <-time.After(testenv.Scaled(10 * time.Second)):
		t.Fatal("Handle did not return after ctx was cancelled")
	}
	_, released, _, recorded := b.store.snapshot()
	require.Empty(t, recorded, "an aborted attempt is not recorded")
	require.Equal(t, 1, released, "the delivery lock is released")
	requireNothingPublished(t, b)
}
