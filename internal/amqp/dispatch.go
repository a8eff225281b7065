package amqp

import (
	"context"
	"time"

	"github.com/hookrelay/hookrelay/internal/tracing"
	"github.com/hookrelay/hookrelay/internal/webhook"
)

// DispatchPublisher publishes what the dispatcher decides about a route
// message that the outbox does not: its dead letter. (A retry copy is put
// in the outbox with the record of the failed attempt, and the outbox
// relay publishes it.) Each publish is confirmed (see
// ConfirmPublisher.Publish). Safe for concurrent use.
type DispatchPublisher struct {
	pub   *ConfirmPublisher
	names Names
}

// NewDispatchPublisher publishes over pub, with names for the tiers and
// queues.
func NewDispatchPublisher(pub *ConfirmPublisher, names Names) *DispatchPublisher {
	return &DispatchPublisher{pub: pub, names: names}
}

// DeadLetter publishes m to the dead-letter queue of why.Route; it carries
// the trace context of ctx's span, if any.
func (p *DispatchPublisher) DeadLetter(ctx context.Context, m webhook.RouteMessage, why webhook.DeadLetter) error {
	return p.pub.Publish(ctx, "", p.names.DeadQueue(why.Route), deadLetterMessage(m, why, tracing.Of(ctx), time.Now()))
}

// Blocked is the ConfirmPublisher's Blocked.
func (p *DispatchPublisher) Blocked() <-chan struct{} { return p.pub.Blocked() }
