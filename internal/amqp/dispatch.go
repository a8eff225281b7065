package amqp

import (
	"context"
	"time"

	"github.com/hookrelay/hookrelay/internal/webhook"
)

// DispatchPublisher publishes what the dispatcher decides about a route
// message: its retry copy, to a retry tier, or its dead letter. Each
// publish is confirmed (see ConfirmPublisher.Publish). Safe for concurrent
// use.
type DispatchPublisher struct {
	pub   *ConfirmPublisher
	names Names
}

// NewDispatchPublisher publishes over pub, with names for the tiers and
// queues.
func NewDispatchPublisher(pub *ConfirmPublisher, names Names) *DispatchPublisher {
	return &DispatchPublisher{pub: pub, names: names}
}

// Retry publishes next, a message's copy for its next attempt, to the retry
// tier with delay; the tier dead-letters it back to route's queue when the
// delay has passed.
func (p *DispatchPublisher) Retry(ctx context.Context, route string, delay time.Duration, next webhook.RouteMessage) error {
	return p.pub.Publish(ctx, p.names.Retry(delay), p.names.RouteQueue(route), retryMessage(next, time.Now()))
}

// DeadLetter publishes m to the dead-letter queue of why.Route.
func (p *DispatchPublisher) DeadLetter(ctx context.Context, m webhook.RouteMessage, why webhook.DeadLetter) error {
	return p.pub.Publish(ctx, "", p.names.DeadQueue(why.Route), deadLetterMessage(m, why, time.Now()))
}

// Blocked is the ConfirmPublisher's Blocked.
func (p *DispatchPublisher) Blocked() <-chan struct{} { return p.pub.Blocked() }
