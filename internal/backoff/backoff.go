// Package backoff computes reconnect and retry delays: exponential growth
// with full jitter, so that many processes that lost the same broker or
// database do not come back in lockstep.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff hands out growing delays between Min and Max. The zero value is not
// usable; set Min and Max. It is not safe for concurrent use.
type Backoff struct {
	Min, Max time.Duration
	attempt  int
}

// Next returns the delay before the next try: a random duration in
// [Min, min(Max, Min*2^attempt)].
func (b *Backoff) Next() time.Duration {
	ceil := b.Min << min(b.attempt, 30)
	if ceil > b.Max || ceil <= 0 {
		ceil = b.Max
	}
	b.attempt++
	if ceil <= b.Min {
		return b.Min
	}
	return b.Min + rand.N(ceil-b.Min+1)
}

// Reset starts over after a success.
func (b *Backoff) Reset() { b.attempt = 0 }

// Wait sleeps for Next() or until ctx is done; it reports whether the full
// delay passed.
func (b *Backoff) Wait(ctx context.Context) bool {
	return Sleep(ctx, b.Next())
}

// Sleep waits d or until ctx is done; it reports whether d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
