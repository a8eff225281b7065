package amqp

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// requeueConfirmTimeout bounds the wait for each moved message's confirm.
const requeueConfirmTimeout = 10 * time.Second

// DeadLetters reads and moves the messages of the routes' dead-letter
// queues for an operator, each call on a connection of its own.
type DeadLetters struct {
	dialer *Dialer
	names  Names
	// connName shows in the management UI.
	connName string
	now      func() time.Time
}

// NewDeadLetters reaches the queues named by names through dialer;
// connectionName shows in the management UI.
func NewDeadLetters(dialer *Dialer, names Names, connectionName string) *DeadLetters {
	return &DeadLetters{dialer: dialer, names: names, connName: connectionName, now: time.Now}
}

// DeadLetterPage is part of a dead-letter queue: Items of its Total
// messages.
type DeadLetterPage struct {
	Queue string
	Total int
	Items []DeadLetterInfo
}

// List reads up to limit messages of route's dead-letter queue without
// consuming them: they are taken unacknowledged and all returned to the
// queue. (Dead-letter queues have no delivery limit, so reading is safe.)
// Total is the queue's message count, at least len(Items).
func (dl *DeadLetters) List(ctx context.Context, route string, limit int) (*DeadLetterPage, error) {
	conn, ch, err := dl.channel()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	queue := dl.names.DeadQueue(route)
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		return nil, fmt.Errorf("inspecting %s: %w", queue, err)
	}
	out := &DeadLetterPage{Queue: queue, Items: []DeadLetterInfo{}}
	var last uint64
	for len(out.Items) < limit {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		d, ok, err := ch.Get(queue, false)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", queue, err)
		}
		if !ok {
			break
		}
		last = d.DeliveryTag
		out.Items = append(out.Items, decodeDeadLetter(d))
	}
	if last > 0 {
		if err := ch.Nack(last, true, true); err != nil {
			return nil, fmt.Errorf("returning messages to the queue: %w", err)
		}
	}
	// Messages dead-lettered since the count was taken may have been read.
	out.Total = max(q.Messages, len(out.Items))
	return out, nil
}

// Requeue moves up to limit messages (0: all there are now) from route's
// dead-letter queue back to its route queue, one at a time: each is
// published as a dead letter moved back (a fresh attempt series; see
// movedBackMessage) and confirmed before the original is acked, so a crash
// can duplicate a message, never lose one. It returns how many it moved,
// also on error. progress, when set, is called after each message with
// the count moved and the count it means to move.
func (dl *DeadLetters) Requeue(ctx context.Context, route string, limit int, progress func(moved, total int)) (int, error) {
	conn, ch, err := dl.channel()
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if err := ch.Confirm(false); err != nil {
		return 0, fmt.Errorf("enabling confirms: %w", err)
	}
	returns := ch.NotifyReturn(make(chan amqp.Return, 1))
	dead, target := dl.names.DeadQueue(route), dl.names.RouteQueue(route)
	if limit <= 0 {
		// "All" means what is there now: a message that fails at once (a
		// 410) comes straight back, and must not be moved forever.
		q, err := ch.QueueDeclarePassive(dead, true, false, false, false, nil)
		if err != nil {
			return 0, fmt.Errorf("inspecting %s: %w", dead, err)
		}
		limit = q.Messages
	}
	moved := 0
	for moved < limit {
		if err := ctx.Err(); err != nil {
			return moved, err
		}
		d, ok, err := ch.Get(dead, false)
		if err != nil {
			return moved, fmt.Errorf("reading %s: %w", dead, err)
		}
		if !ok {
			break
		}
		if err := publishConfirmed(ctx, ch, returns, target, movedBackMessage(d, route, dl.now())); err != nil {
			return moved, fmt.Errorf("republishing: %w", err)
		}
		if err := d.Ack(false); err != nil {
			return moved, fmt.Errorf("acking the dead letter: %w", err)
		}
		moved++
		if progress != nil {
			progress(moved, limit)
		}
	}
	return moved, nil
}

// publishConfirmed publishes p to queue through the default exchange on
// ch, a confirm channel whose returns arrive on returns, and waits up to
// requeueConfirmTimeout for the broker to take it.
func publishConfirmed(ctx context.Context, ch *amqp.Channel, returns <-chan amqp.Return, queue string, p amqp.Publishing) error {
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, p)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, requeueConfirmTimeout)
	defer cancel()
	acked, err := dc.WaitContext(wctx)
	if err != nil {
		return fmt.Errorf("waiting for the confirm: %w", err)
	}
	if !acked {
		return errors.New("nacked by the broker")
	}
	// The broker sends a return before the confirm of the same message.
	select {
	case r := <-returns:
		return fmt.Errorf("returned: %s", r.ReplyText)
	default:
		return nil
	}
}

func (dl *DeadLetters) channel() (*Conn, *amqp.Channel, error) {
	conn, err := dl.dialer.Dial(dl.connName)
	if err != nil {
		return nil, nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.Close() // abandoned either way
		return nil, nil, fmt.Errorf("opening channel: %w", err)
	}
	return conn, ch, nil
}
