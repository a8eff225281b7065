package config

import (
	"fmt"
	"time"
)

// RetryAfterMax is the longest one Retry-After holds a route
// (internal/control's MaxSlow, which the dispatcher sets from it).
const RetryAfterMax = 10 * time.Minute

// AdmitHoldMax is the longest the route controls hold one delivery before
// its POST, its message in hand: a Retry-After hold, at most RetryAfterMax,
// and the rate limit's turns, a minute more in all (control.Admit gives the
// message back then).
const AdmitHoldMax = RetryAfterMax + time.Minute

// HoldMargin is how far under amqp.consumer_timeout a route's longest hold
// must stay: room for what the sum leaves out (a lease's release, the
// stale check, counting the attempt toward the circuit, scheduling).
const HoldMargin = time.Minute

// Hold is the longest a dispatcher holds one message of a route unacked,
// while Postgres and the broker answer, in the parts the code bounds one
// after the other (internal/app consumerGroups, internal/deliver Handle).
type Hold struct {
	// Admit is the route controls' wait before the POST (AdmitHoldMax).
	Admit time.Duration
	// Lease is waiting out another holder's lease on the pair (a copy
	// redelivered while the first is in flight, or a dispatcher killed
	// mid-POST): the route's timeout plus dispatcher.lease_margin.
	Lease time.Duration
	// Post is the POST itself: the route's timeout.
	Post time.Duration
	// Store is the claim and the record: a database.query_timeout each.
	Store time.Duration
	// Confirm is a dead letter's publisher confirm, after the last
	// attempt: outbox.publish_timeout.
	Confirm time.Duration
}

// Total is the whole hold.
func (h Hold) Total() time.Duration { return h.Admit + h.Lease + h.Post + h.Store + h.Confirm }

// Tail is what runs to its end once begun, whatever the wait before it:
// the POST, the claim and the record, and a dead letter's confirm.
func (h Hold) Tail() time.Duration { return h.Post + h.Store + h.Confirm }

func (h Hold) String() string {
	return fmt.Sprintf("%s (route controls %s + another holder's lease %s + POST %s + claim and record %s + dead-letter confirm %s)",
		FormatDuration(h.Total()), FormatDuration(h.Admit), FormatDuration(h.Lease), FormatDuration(h.Post), FormatDuration(h.Store), FormatDuration(h.Confirm))
}

// RouteHold is the longest a dispatcher with this config holds one message
// of r unacked while Postgres and the broker answer.
func (c *Config) RouteHold(r Route) Hold {
	return Hold{
		Admit:   AdmitHoldMax,
		Lease:   r.Timeout + c.Dispatcher.LeaseMargin,
		Post:    r.Timeout,
		Store:   2 * c.Database.QueryTimeout,
		Confirm: c.Outbox.PublishTimeout,
	}
}

// HoldBudget is how long a delivery of r may wait, in all, for the route
// controls, another holder's lease, and Postgres or the broker when they
// fail, before it stops waiting and gives its message back: what is left
// of amqp.consumer_timeout after HoldMargin and the hold's Tail, so that
// the message is acked or back in the queue before the broker acts (it
// closes the channel, or cancels the consumer, and requeues the message,
// which counts toward dispatcher.delivery_limit). Zero, no bound, when
// amqp.consumer_timeout is not set (a config built by hand).
func (c *Config) HoldBudget(r Route) time.Duration {
	if c.AMQP.ConsumerTimeout <= 0 {
		return 0
	}
	return max(c.AMQP.ConsumerTimeout-HoldMargin-c.RouteHold(r).Tail(), time.Second)
}

// holdProblem says why r's longest hold does not fit under
// amqp.consumer_timeout; "" when it does.
func (c *Config) holdProblem(r Route) string {
	limit := c.AMQP.ConsumerTimeout
	if limit <= 0 || r.Timeout <= 0 {
		return "" // reported as such elsewhere
	}
	h := c.RouteHold(r)
	if h.Total()+HoldMargin <= limit {
		return ""
	}
	return fmt.Sprintf("a delivery can hold its message unacked for up to %s, and amqp.consumer_timeout is %s: the broker would take the message back "+
		"before it is acked. It must stay %s under it: lower timeout or dispatcher.lease_margin, or raise the broker's consumer_timeout and amqp.consumer_timeout with it",
		h, FormatDuration(limit), FormatDuration(HoldMargin))
}

func checkHolds(cfg *Config) []string {
	var problems []string
	for i, r := range cfg.Routes {
		if p := cfg.holdProblem(r); p != "" {
			problems = append(problems, fmt.Sprintf("routes[%d]: %s", i, p))
		}
	}
	return problems
}
