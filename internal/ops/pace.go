package ops

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrStalled is the cause of a StalledError.
var ErrStalled = errors.New("stalled")

// ErrReplayStalled is ErrStalled, by its first name.
var ErrReplayStalled = ErrStalled

// StalledError ends a paced action (a replay, a route's retry) whose last
// batch stayed waiting: no dispatcher is consuming the route, or no outbox
// publisher is publishing.
type StalledError struct {
	// Action is "replay" or "retry".
	Action string
	// Pending of the last batch of Batch pairs still waited after Waited
	// without progress; Enqueued pairs were sent on their way in all.
	Pending, Batch, Enqueued int
	Waited                   time.Duration
}

func (e *StalledError) Error() string {
	return fmt.Sprintf("%s stalled: %d of the last batch of %d pair(s) still pending after %s without progress "+
		"(is a dispatcher consuming the route, and a receiver publishing its outbox?); the %d pair(s) enqueued so far "+
		"stay enqueued and will be delivered once they are; running the same %s again skips them while they are in flight",
		e.Action, e.Pending, e.Batch, e.Waited.Round(time.Second), e.Enqueued, e.Action)
}

// Unwrap makes errors.Is(err, ErrStalled) hold.
func (e *StalledError) Unwrap() error { return ErrStalled }

// pacer paces a replay or a route's retry. They share the route queues
// with live events, and quorum queues have no priorities: whatever they
// enqueue is delivered before a live event that arrives after it. So each
// batch is waited for until at most a tenth of it (and at least one pair:
// a message RabbitMQ parked for its delivery limit stays pending for ever)
// still waits, and only then is the next enqueued: a live event never
// waits behind more than one batch.
type pacer struct {
	// action names the action in its errors.
	action string
	// stall ends a wait whose batch made no progress for that long.
	stall time.Duration
	// enqueued says how many pairs the action enqueued so far, for its
	// errors.
	enqueued func() int
}

// wait polls waiting (how many of the batch of size still wait) until at
// most the low water is left, calling observe with each reading, and
// returns how long it waited. It fails with a StalledError when nothing
// moves for the stall timeout, and when ctx ends.
func (p pacer) wait(ctx context.Context, size int, waiting func(ctx context.Context) (int, error), observe func(waiting int)) (time.Duration, error) {
	start := time.Now()
	lowWater := max(size/10, 1)
	last, lastChange := size, start
	tick := time.NewTicker(replayPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return time.Since(start), fmt.Errorf("%s interrupted after %d pair(s) enqueued (they stay enqueued): %w", p.action, p.enqueued(), ctx.Err())
		case <-tick.C:
		}
		n, err := waiting(ctx)
		if err != nil {
			return time.Since(start), err
		}
		observe(n)
		now := time.Now()
		if n <= lowWater {
			return now.Sub(start), nil
		}
		if n < last {
			last, lastChange = n, now
		} else if now.Sub(lastChange) >= p.stall {
			return now.Sub(start), &StalledError{Action: p.action, Pending: n, Batch: size, Enqueued: p.enqueued(), Waited: now.Sub(lastChange)}
		}
	}
}
