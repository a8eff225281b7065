package deliver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/backoff"
	"github.com/hookrelay/hookrelay/internal/webhook"
)

// Delivery leases. A delivery claims its (event, route) pair with a lease
// in one statement, POSTs holding no database connection, and records the
// attempt, the pair's new state and the lease's release in one statement
// fenced by the lease. So a dispatcher needs a pooled connection only for
// those two statements, not for the length of the POST, and however many
// deliveries are in flight, a few connections serve them.
//
// The lease lasts the route's timeout plus Config.LeaseMargin, by
// Postgres' clock: longer than any POST. While it is live, a duplicate
// copy of the message (RabbitMQ redelivers at least once) waits for it,
// without a POST and without consuming an attempt, and then reads the
// outcome: a delivered pair is acked without a POST. A dispatcher killed
// mid-POST leaves its lease behind; RabbitMQ requeues the unacked message,
// the next claim waits for the lease to expire, takes it over (recording
// the dead holder's attempt as lease_expired, outcome unknown) and
// delivers.

// leaseWaitMin and leaseWaitMax bound the pause between claims while
// another claim holds a live lease: short at first (a duplicate usually
// meets a delivery about to record), then up to a second, never past the
// lease's expiry (after it, the claim takes the lease over).
const (
	leaseWaitMin = 20 * time.Millisecond
	leaseWaitMax = time.Second
)

// permanent marks an error retryStore must not retry.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

func isPermanent(err error) bool {
	var p permanent
	return errors.As(err, &p)
}

func unwrapPermanent(err error) error {
	var p permanent
	if errors.As(err, &p) {
		return p.err
	}
	return err
}

// leaseTTL is the lease a delivery of the route takes.
func (d *delivery) leaseTTL() time.Duration { return d.route.Timeout + d.cfg.LeaseMargin }

// claim claims the message's pair, retrying while Postgres fails, and
// waiting while another claim holds a live lease on it: it polls, with
// backoff and never past that lease's expiry, until the lease is released
// or expires. The wait is bounded by StoreRetryFor (a lease is renewed by
// each new claim, so a pair can stay busy longer than one lease) and ends
// early when d.stop closes or ctx is done.
func (d *delivery) claim(ctx context.Context) (Lease, error) {
	deadline := time.Now().Add(d.cfg.StoreRetryFor)
	wait := backoff.Backoff{Min: leaseWaitMin, Max: leaseWaitMax}
	// One owner for every try: a try that timed out after Postgres took
	// the lease leaves it to this delivery, not to a stranger.
	owner := uuid.New()
	waited := false
	for {
		var lease Lease
		err := d.retryStore(ctx, "claiming delivery", func() (err error) {
			if d.route.InOrder {
				lease, err = d.cfg.Lanes.DeliveryClaimInOrder(ctx, owner, d.msg.EventID, d.route.Name, d.msg.Attempt, d.msg.Gen, d.leaseTTL(), d.route.SkipDead)
			} else {
				lease, err = d.cfg.Store.DeliveryClaim(ctx, owner, d.msg.EventID, d.route.Name, d.msg.Attempt, d.msg.Gen, d.leaseTTL())
			}
			var busy *webhook.LeaseBusyError
			if errors.As(err, &busy) || errors.Is(err, webhook.ErrWaiting) {
				return permanent{err}
			}
			return err
		})
		var busy *webhook.LeaseBusyError
		if !errors.As(err, &busy) {
			if waited && err == nil {
				d.log.Debug().Msg("lease released or expired; claimed")
			}
			return lease, err
		}
		if !waited {
			waited = true
			d.cfg.Metrics.lease(d.route.Name, "waited")
			d.log.Info().Dur("lease_remaining", busy.Remaining).Msg("pair in flight elsewhere; waiting for its lease")
		}
		if !time.Now().Before(deadline) {
			return nil, fmt.Errorf("waiting for the pair's lease for %s: %w", d.cfg.StoreRetryFor, err)
		}
		pause := wait.Next()
		// Poll just after the expiry rather than long past it.
		pause = min(pause, busy.Remaining+leaseWaitMin)
		t := time.NewTimer(pause)
		select {
		case <-d.stop:
			t.Stop()
			return nil, fmt.Errorf("waiting for the pair's lease: %w (shutting down)", err)
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("waiting for the pair's lease: %w", ctx.Err())
		case <-t.C:
		}
	}
}
