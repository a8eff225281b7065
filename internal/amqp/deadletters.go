package amqp

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hookrelay/hookrelay/internal/webhook"
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

// DeadLetterVisit is given each batch Scan reads and says which of its
// messages to remove from the queue (drop[i] for items[i]; nil keeps all)
// and whether to stop reading.
type DeadLetterVisit = func(items []webhook.DeadLetterInfo) (drop []bool, stop bool, err error)

// Scan reads route's dead-letter queue in batches of up to batch messages,
// at most as many as it holds when Scan starts (so messages that come back
// at once are not read twice), and gives each batch to visit. The messages
// visit drops are acked, each once visit returned; all others are taken
// unacknowledged and returned to the queue in one go at the end (or by the
// broker when the connection closes on an error), so a failed scan loses
// nothing. (Dead-letter queues have no delivery limit, so reading is
// safe.) It returns the queue's message count at the start: 0, with
// nothing visited, when the queue does not exist (deadQueueCount).
func (dl *DeadLetters) Scan(ctx context.Context, route string, batch int, visit DeadLetterVisit) (int, error) {
	if batch < 1 {
		return 0, fmt.Errorf("scan batch %d: must be positive", batch)
	}
	conn, ch, err := dl.channel()
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	queue := dl.names.DeadQueue(route)
	q, missing, err := deadQueueCount(ch, queue)
	if err != nil || missing {
		return 0, err
	}
	// kept is the highest delivery tag taken and not acked: one multiple
	// nack up to it returns every message kept.
	var kept uint64
	read, empty := 0, false
	for read < q.Messages && !empty {
		var ds []amqp.Delivery
		for len(ds) < batch && read < q.Messages {
			if err := ctx.Err(); err != nil {
				return q.Messages, err
			}
			d, ok, err := ch.Get(queue, false)
			if err != nil {
				return q.Messages, fmt.Errorf("reading %s: %w", queue, err)
			}
			if !ok {
				empty = true
				break
			}
			ds = append(ds, d)
			read++
		}
		if len(ds) == 0 {
			break
		}
		infos := make([]webhook.DeadLetterInfo, len(ds))
		for i, d := range ds {
			infos[i] = decodeDeadLetter(d)
		}
		drop, stop, err := visit(infos)
		if err != nil {
			return q.Messages, err
		}
		if drop != nil && len(drop) != len(ds) {
			return q.Messages, fmt.Errorf("scan visit answered %d drops for %d messages", len(drop), len(ds))
		}
		for i, d := range ds {
			if drop != nil && drop[i] {
				if err := d.Ack(false); err != nil {
					return q.Messages, fmt.Errorf("dropping a dead letter: %w", err)
				}
				continue
			}
			kept = d.DeliveryTag
		}
		if stop {
			break
		}
	}
	if kept > 0 {
		if err := ch.Nack(kept, true, true); err != nil {
			return q.Messages, fmt.Errorf("returning messages to the queue: %w", err)
		}
	}
	return q.Messages, nil
}

// Requeue moves up to limit messages (0: all there are now) from route's
// dead-letter queue back to its route queue, one at a time: each is
// published as a dead letter moved back (a fresh attempt series; see
// movedBackMessage) and confirmed before the original is acked, so a crash
// can duplicate a message, never lose one. It returns how many it moved,
// also on error. progress, when set, is called after each message with
// the count moved and the count it means to move.
func (dl *DeadLetters) Requeue(ctx context.Context, route string, limit int, progress func(moved, total int)) (int, error) {
	conn, ch, returns, err := dl.confirmChannel()
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	dead, target := dl.names.DeadQueue(route), dl.names.RouteQueue(route)
	q, missing, err := deadQueueCount(ch, dead)
	if err != nil || missing {
		return 0, err
	}
	if limit <= 0 {
		// "All" means what is there now: a message that fails at once (a
		// 410) comes straight back, and must not be moved forever.
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

// RequeueEvents moves the messages of route's dead-letter queue whose
// event is in events back to its route queue, as Requeue does, reading
// the queue once, all of it (as many messages as it holds at the start):
// every copy of a chosen event moves (a pair that died again after a
// replay leaves a second one; the dispatcher drops a superseded copy),
// the others are taken unacknowledged and returned in one go at the end,
// or by the broker if the connection closes first, so a failure loses
// nothing. It returns how many it moved, also on error. progress, when
// set, is called after each message read with the count moved and the
// count read.
func (dl *DeadLetters) RequeueEvents(ctx context.Context, route string, events map[string]bool, progress func(moved, read int)) (int, error) {
	conn, ch, returns, err := dl.confirmChannel()
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	dead, target := dl.names.DeadQueue(route), dl.names.RouteQueue(route)
	q, missing, err := deadQueueCount(ch, dead)
	if err != nil || missing {
		return 0, err
	}
	var kept uint64
	moved := 0
	for read := 0; read < q.Messages; read++ {
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
		if !events[headerString(d.Headers, HeaderEventID)] {
			kept = d.DeliveryTag
		} else {
			if err := publishConfirmed(ctx, ch, returns, target, movedBackMessage(d, route, dl.now())); err != nil {
				return moved, fmt.Errorf("republishing: %w", err)
			}
			if err := d.Ack(false); err != nil {
				return moved, fmt.Errorf("acking the dead letter: %w", err)
			}
			moved++
		}
		if progress != nil {
			progress(moved, read+1)
		}
	}
	if kept > 0 {
		if err := ch.Nack(kept, true, true); err != nil {
			return moved, fmt.Errorf("returning messages to the queue: %w", err)
		}
	}
	return moved, nil
}

// deadQueueCount inspects a dead-letter queue. One that does not exist
// holds no letters (missing, and no error): a route made at run time and
// deleted before any dispatcher declared its queues never had one. The
// broker closes ch on a missing queue; the caller returns at once.
func deadQueueCount(ch *amqp.Channel, queue string) (q amqp.Queue, missing bool, err error) {
	q, err = ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	switch {
	case isNotFound(err):
		return amqp.Queue{}, true, nil
	case err != nil:
		return amqp.Queue{}, false, fmt.Errorf("inspecting %s: %w", queue, err)
	}
	return q, false, nil
}

// isNotFound says whether err is the broker's 404 (NOT_FOUND): a passive
// declare of a queue that does not exist.
func isNotFound(err error) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Code == amqp.NotFound
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

// confirmChannel is channel in confirm mode, with the channel its
// returns arrive on (publishConfirmed's).
func (dl *DeadLetters) confirmChannel() (*Conn, *amqp.Channel, <-chan amqp.Return, error) {
	conn, ch, err := dl.channel()
	if err != nil {
		return nil, nil, nil, err
	}
	if err := ch.Confirm(false); err != nil {
		_ = conn.Close() // abandoned either way
		return nil, nil, nil, fmt.Errorf("enabling confirms: %w", err)
	}
	return conn, ch, ch.NotifyReturn(make(chan amqp.Return, 1)), nil
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
