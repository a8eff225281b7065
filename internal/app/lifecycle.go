package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"
)

// stopGrace is how long a process waits for its goroutines, beyond its
// own shutdown timeouts, once they were told to stop. Every component
// bounds its own shutdown, so this is only reached by a bug; a process
// that then reports an error and exits beats one that hangs while its
// health endpoint still answers.
const stopGrace = 5 * time.Second

// listeners are the addresses a process serves, opened before any goroutine
// starts: an address in use then stops the process before it has anything
// to unwind.
type listeners []net.Listener

// open returns ln when the caller gave one, else listens on addr. key names
// the setting in the error.
func (ls *listeners) open(ln net.Listener, addr, key string) (net.Listener, error) {
	ln, err := listen(ln, addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	*ls = append(*ls, ln)
	return ln, nil
}

// close closes every listener. A listener that its server already closed
// returns an error here that means nothing. (A pointer receiver: `defer
// lns.close()` must see the listeners opened after the defer.)
func (ls *listeners) close() {
	for _, ln := range *ls {
		_ = ln.Close()
	}
}

// wait waits for g's goroutines, whose context is gctx. Once gctx is done
// (the process was told to stop, or one goroutine failed and errgroup
// cancelled the others), it waits at most limit more; goroutines still
// running then are reported as an error naming why they were stopped, and
// left behind for the process exit.
func wait(gctx context.Context, g *errgroup.Group, limit time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- g.Wait() }()
	select {
	case err := <-done:
		return err
	case <-gctx.Done():
	}
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		cause := context.Cause(gctx)
		if errors.Is(cause, context.Canceled) {
			return fmt.Errorf("stopping: goroutines still running %s after the stop signal", limit)
		}
		return fmt.Errorf("goroutines still running %s after a failure: %w", limit, cause)
	}
}

// closeWithin runs closeFunc and waits at most limit for it. pgxpool's
// Close, for one, waits for every acquired connection, so a goroutine that
// did not stop would otherwise hang the process on its way out.
func closeWithin(logger zerolog.Logger, what string, closeFunc func(), limit time.Duration) {
	done := make(chan struct{})
	go func() {
		closeFunc()
		close(done)
	}()
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		logger.Warn().Str("what", what).Dur("waited", limit).Msg("still closing; leaving it to the process exit")
	}
}
