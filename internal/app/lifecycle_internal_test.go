package app

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"
)

// Item 12: once a goroutine failed, wait gives the others a bounded time to
// stop and then reports the failure instead of hanging on one that does
// not stop.
func TestWaitIsBoundedAfterAFailure(t *testing.T) {
	t.Parallel()
	stuck := make(chan struct{})
	defer close(stuck)
	g, gctx := errgroup.WithContext(context.Background())
	g.Go(func() error { <-stuck; return nil }) // ignores its context
	g.Go(func() error { return errors.New("serving http on 127.0.0.1:1: boom") })

	start := time.Now()
	err := wait(gctx, g, 200*time.Millisecond)
	require.Error(t, err)
	require.Contains(t, err.Error(), "boom", "the error names the cause")
	require.Less(t, time.Since(start), 5*time.Second)
}

func TestWaitReturnsTheFailureWhenEveryoneStops(t *testing.T) {
	t.Parallel()
	g, gctx := errgroup.WithContext(context.Background())
	g.Go(func() error { <-gctx.Done(); return nil })
	g.Go(func() error { return errors.New("boom") })
	require.EqualError(t, wait(gctx, g, 5*time.Second), "boom")
}

func TestWaitAfterStopSignal(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { <-gctx.Done(); return nil })
	cancel()
	require.NoError(t, wait(gctx, g, 5*time.Second))

	stuck := make(chan struct{})
	defer close(stuck)
	ctx, cancel = context.WithCancel(context.Background())
	g, gctx = errgroup.WithContext(ctx)
	g.Go(func() error { <-stuck; return nil })
	cancel()
	require.ErrorContains(t, wait(gctx, g, 100*time.Millisecond), "still running 100ms after the stop signal")
}

func TestCloseWithinDoesNotHang(t *testing.T) {
	t.Parallel()
	stuck := make(chan struct{})
	defer close(stuck)
	start := time.Now()
	closeWithin(zerolog.Nop(), "pool", func() { <-stuck }, 100*time.Millisecond)
	require.Less(t, time.Since(start), 5*time.Second)
	closed := false
	closeWithin(zerolog.Nop(), "pool", func() { closed = true }, time.Second)
	require.True(t, closed)
}
