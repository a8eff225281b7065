package amqp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Inspector reads queue depths over a connection of its own (a passive
// declare per question), reconnecting through the Dialer when the
// connection or its channel is lost. Safe for concurrent use; questions
// are serialised.
type Inspector struct {
	dialer *Dialer
	name   string

	mu   sync.Mutex
	conn *Conn
	ch   *amqp.Channel
}

// NewInspector returns an Inspector; it connects on first use.
func NewInspector(d *Dialer, connectionName string) *Inspector {
	return &Inspector{dialer: d, name: connectionName}
}

// QueueInfo is what a passive declare tells of a queue.
type QueueInfo struct {
	// Ready counts the messages not delivered to a consumer yet.
	Ready int
	// Consumers counts the queue's consumers.
	Consumers int
}

// Queue returns queue's ready messages (those not delivered to a consumer
// yet) and consumers. A missing queue is an error. Without a deadline on
// ctx, the question is bounded by 10s.
//
// A quorum queue whose leader does not answer within 250 ms is read as 0
// ready and 0 consumers (RabbitMQ's rabbit_quorum_queue:stat gives zeros
// on a timeout, as a busy broker's leaders may take while they move a
// backlog): such a reading says nothing about a queue someone consumes.
func (in *Inspector) Queue(ctx context.Context, queue string) (QueueInfo, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	ch, err := in.channelLocked()
	if err != nil {
		return QueueInfo{}, err
	}
	type result struct {
		q   amqp.Queue
		err error
	}
	done := make(chan result, 1)
	go func() {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		done <- result{q, err}
	}()
	select {
	case r := <-done:
		if r.err == nil {
			return QueueInfo{Ready: r.q.Messages, Consumers: r.q.Consumers}, nil
		}
		// A passive declare of a missing queue closes the channel (404);
		// the next question opens a new one.
		in.ch = nil
		if isNotFound(r.err) {
			return QueueInfo{}, fmt.Errorf("queue %s does not exist", queue)
		}
		return QueueInfo{}, fmt.Errorf("inspecting %s: %w", queue, r.err)
	case <-ctx.Done():
		// The broker did not answer in time: drop the connection so the
		// stuck call returns, and the next question starts afresh.
		in.resetLocked()
		<-done
		return QueueInfo{}, fmt.Errorf("inspecting %s: %w", queue, ctx.Err())
	}
}

func (in *Inspector) channelLocked() (*amqp.Channel, error) {
	if in.ch != nil && !in.ch.IsClosed() {
		return in.ch, nil
	}
	if in.conn == nil || in.conn.IsClosed() {
		conn, err := in.dialer.Dial(in.name)
		if err != nil {
			return nil, err
		}
		in.conn = conn
	}
	ch, err := in.conn.Channel()
	if err != nil {
		in.resetLocked()
		return nil, fmt.Errorf("opening channel: %w", err)
	}
	in.ch = ch
	return ch, nil
}

func (in *Inspector) resetLocked() {
	if in.conn != nil {
		_ = in.conn.Close() // abandoned either way
	}
	in.conn, in.ch = nil, nil
}

// Close closes the connection.
func (in *Inspector) Close() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.conn == nil {
		return nil
	}
	err := in.conn.Close()
	in.conn, in.ch = nil, nil
	if err != nil && !errors.Is(err, amqp.ErrClosed) {
		return fmt.Errorf("closing rabbitmq connection: %w", err)
	}
	return nil
}
