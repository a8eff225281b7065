package amqp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hookrelay/hookrelay/internal/backoff"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"
)

// HandleFunc processes one delivery. Returning nil acks it; an error nacks
// it with requeue (after a pause), so it comes back. It runs with a context
// that shutdown does not cancel: it must bound its own work.
type HandleFunc func(ctx context.Context, d *Delivery) error

// ConsumerGroup is Concurrency consumers of one queue, each on its own
// channel with prefetch 1.
type ConsumerGroup struct {
	Queue       string
	Concurrency int
	Handle      HandleFunc
}

// ConsumersConfig configures Consumers.
type ConsumersConfig struct {
	URL            string
	ConnectionName string
	// Topology is declared on every (re)connect before consuming.
	Topology Topology
	Groups   []ConsumerGroup
	Logger   zerolog.Logger
}

// Consumers runs every group's consumers on one connection and reconnects
// with backoff and jitter when it is lost. Each reconnect opens fresh
// channels: a delivery from a lost channel can no longer be acked (the ack
// fails, the broker redelivers), and can never ack another message. The
// connection only consumes and acks: publish on another one, so that a
// broker alarm, which blocks publishing connections, cannot freeze acks.
type Consumers struct {
	cfg    ConsumersConfig
	logger zerolog.Logger

	mu   sync.Mutex
	conn *amqp.Connection
}

// NewConsumers returns Consumers; Run starts them.
func NewConsumers(cfg ConsumersConfig) *Consumers {
	return &Consumers{cfg: cfg, logger: cfg.Logger.With().Str("component", "amqp_consumers").Logger()}
}

// Ping reports whether the connection is open.
func (c *Consumers) Ping(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil || c.conn.IsClosed() {
		return errors.New("not connected to rabbitmq")
	}
	return nil
}

// Run consumes until ctx is done. On shutdown it cancels every consumer,
// lets each in-flight delivery finish (and be acked), closes the connection
// and returns nil. Connection failures are retried, never returned.
func (c *Consumers) Run(ctx context.Context) error {
	retry := backoff.Backoff{Min: 200 * time.Millisecond, Max: 30 * time.Second}
	for {
		err := c.session(ctx, retry.Reset)
		if ctx.Err() != nil {
			return nil
		}
		wait := retry.Next()
		c.logger.Warn().Err(err).Dur("retry_in", wait).Msg("rabbitmq connection lost; reconnecting")
		if !backoff.Sleep(ctx, wait) {
			return nil
		}
	}
}

func (c *Consumers) session(ctx context.Context, connected func()) error {
	conn, err := Dial(c.cfg.URL, c.cfg.ConnectionName)
	if err != nil {
		return err
	}
	defer func() { _ = closeConn(conn) }() // gone or abandoned either way
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	go drainBlocked(conn.NotifyBlocked(make(chan amqp.Blocking, 4)), c.logger)

	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("opening channel: %w", err)
	}
	if err := c.cfg.Topology.Declare(ch); err != nil {
		return err
	}
	_ = ch.Close() // declarations are done; each consumer has its own channel

	sctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	// A consumer whose channel closes (a channel error, the broker's
	// consumer timeout, its queue deleted) must not vanish while the
	// connection looks healthy: the whole session starts over.
	total := 0
	for _, g := range c.cfg.Groups {
		total += g.Concurrency
	}
	lost := make(chan error, total)
	for _, g := range c.cfg.Groups {
		for i := range g.Concurrency {
			cc, err := c.openConsumer(conn, g, i)
			if err != nil {
				stop()
				wg.Wait()
				return err
			}
			chClosed := cc.ch.NotifyClose(make(chan *amqp.Error, 1))
			wg.Add(1)
			go func() {
				defer wg.Done()
				cc.run(sctx, g.Handle)
				if sctx.Err() == nil {
					err := fmt.Errorf("consumer of %s stopped", g.Queue)
					select {
					case e := <-chClosed:
						if e != nil {
							err = fmt.Errorf("consumer of %s stopped: %w", g.Queue, e)
						}
					default:
					}
					lost <- err
				}
			}()
		}
	}
	c.mu.Lock()
	c.conn = conn
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.conn = nil
		c.mu.Unlock()
	}()
	connected()
	c.logger.Info().Int("groups", len(c.cfg.Groups)).Msg("consuming")

	select {
	case <-ctx.Done():
		stop()
		wg.Wait() // in-flight deliveries finish and are acked
		return nil
	case err := <-closed:
		stop()
		wg.Wait()
		if err == nil {
			return errors.New("connection closed")
		}
		return err
	case err := <-lost:
		stop()
		wg.Wait()
		return err
	}
}

// drainBlocked drains a consuming connection's block notifications (an
// undrained channel stalls the connection's reader). Only publishing
// connections are blocked; this one just says so in the log.
func drainBlocked(c <-chan amqp.Blocking, logger zerolog.Logger) {
	for b := range c {
		if b.Active {
			logger.Info().Str("reason", b.Reason).Msg("rabbitmq blocks publishers; this connection only consumes")
		} else {
			logger.Info().Msg("rabbitmq unblocked publishers")
		}
	}
}

type consumer struct {
	ch         *amqp.Channel
	tag        string
	deliveries <-chan amqp.Delivery
	logger     zerolog.Logger
}

func (c *Consumers) openConsumer(conn *amqp.Connection, g ConsumerGroup, i int) (*consumer, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("opening consumer channel: %w", err)
	}
	// Prefetch 1: a consumer holds one unacked message at a time, so a
	// crash redelivers at most one per consumer and slow destinations do
	// not hoard messages other consumers could take.
	if err := ch.Qos(1, 0, false); err != nil {
		return nil, fmt.Errorf("setting prefetch: %w", err)
	}
	tag := fmt.Sprintf("%s#%d", c.cfg.ConnectionName, i)
	// autoAck false: a message is acked only after its outcome is stored.
	deliveries, err := ch.Consume(g.Queue, tag, false, false, false, false, nil)
	if err != nil {
		return nil, fmt.Errorf("consuming %s: %w", g.Queue, err)
	}
	return &consumer{
		ch: ch, tag: tag, deliveries: deliveries,
		logger: c.logger.With().Str("queue", g.Queue).Str("consumer", tag).Logger(),
	}, nil
}

func (cc *consumer) run(ctx context.Context, handle HandleFunc) {
	for {
		select {
		case <-ctx.Done():
			// Stop receiving; a message already prefetched but not handled
			// goes back to the queue when the channel closes.
			_ = cc.ch.Cancel(cc.tag, false)
			return
		case d, ok := <-cc.deliveries:
			if !ok {
				return // channel or connection closed
			}
			cc.handle(ctx, d, handle)
		}
	}
}

func (cc *consumer) handle(ctx context.Context, d amqp.Delivery, handle HandleFunc) {
	err := safeHandle(context.WithoutCancel(ctx), &Delivery{Delivery: d, stopping: ctx.Done()}, handle)
	if err == nil {
		if err := d.Ack(false); err != nil {
			// The channel is gone: the broker redelivers the message.
			cc.logger.Warn().Err(err).Str("message_id", d.MessageId).Msg("ack failed; message will be redelivered")
		}
		return
	}
	cc.logger.Error().Err(err).Str("message_id", d.MessageId).Msg("delivery not completed; requeueing")
	// A pause before the requeue keeps a failing dependency from turning
	// into a hot loop; shutdown cuts it short.
	backoff.Sleep(ctx, time.Second)
	if err := d.Nack(false, true); err != nil {
		cc.logger.Warn().Err(err).Str("message_id", d.MessageId).Msg("nack failed; message will be redelivered")
	}
}

func safeHandle(ctx context.Context, d *Delivery, handle HandleFunc) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panicked: %v", r)
		}
	}()
	return handle(ctx, d)
}

// Delivery is a consumed message.
type Delivery struct {
	amqp.Delivery
	stopping <-chan struct{}
}

// Stopping is closed when the consumers shut down or their connection is
// lost. A handler waiting for a dependency gives up then; its message is
// requeued.
func (d *Delivery) Stopping() <-chan struct{} { return d.stopping }
