package amqp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hookrelay/hookrelay/internal/backoff"
	"github.com/hookrelay/hookrelay/internal/webhook"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"
)

// HandleFunc processes one route message, decoded from the wire (see
// decodeRouteMessage). Returning nil acks it; an error nacks it with
// requeue (after a pause), so it comes back. Shutdown first closes stopping
// (stop waiting for dependencies), which also closes when the connection
// is lost, then, after the shutdown timeout, cancels ctx: the handler
// abandons its work, and the message, neither acked nor nacked, goes back
// to the queue when the connection closes. Until then ctx is not
// cancelled: the handler bounds its own work.
type HandleFunc func(ctx context.Context, m webhook.RouteMessage, stopping <-chan struct{}) error

// ErrGiveBack, wrapped in a HandleFunc's error, gives the message back to
// the queue at once (through ConsumersConfig.GiveBack, else a nack with
// requeue; without the pause before a failed delivery's requeue) and logs
// it at debug: the handler has not started the delivery and is not
// failing (its route was paused while the delivery waited for the rate
// limit).
var ErrGiveBack = errors.New("message given back to the queue")

// ConsumerGroup is Concurrency consumers of one route queue, each on its
// own channel with prefetch 1.
type ConsumerGroup struct {
	Queue       string
	Concurrency int
	Handle      HandleFunc
	// Gate, when set, says when the group's consumers may consume (a
	// paused route, an open circuit); nil means always.
	Gate Gate
	// Version: a change restarts the group's consumers (SetGroups).
	Version int64
}

// Gate tells a group's consumers when they may consume.
type Gate interface {
	// Open reports whether consumer i (0 to Concurrency-1) may consume
	// now, and returns a channel that is closed at the next change.
	Open(i int) (bool, <-chan struct{})
}

// ActivityGate is a Gate that is also told what its consumers do, so it
// can tell a consumer able to take a message from one that is not (its
// connection reconnecting, its channel stuck, its delivery held).
type ActivityGate interface {
	Gate
	// Consuming says consumer i is subscribed: waiting for a message
	// (busy false) or handling one (busy true).
	Consuming(i int, busy bool)
	// Stopped says consumer i takes no message: its gate closed, its
	// channel or connection was lost, or it is stopping.
	Stopped(i int)
}

func consuming(g Gate, i int, busy bool) {
	if a, ok := g.(ActivityGate); ok {
		a.Consuming(i, busy)
	}
}

func stoppedConsuming(g Gate, i int) {
	if a, ok := g.(ActivityGate); ok {
		a.Stopped(i)
	}
}

// ConsumersConfig configures Consumers.
type ConsumersConfig struct {
	// Dialer reaches a node of the cluster.
	Dialer         *Dialer
	ConnectionName string
	// TopologyFunc returns the topology declared on every (re)connect
	// before consuming: the routes' as they are then.
	TopologyFunc func() Topology
	// OnConnect, when set, runs on the declaring channel after the
	// topology is declared, at every (re)connect; an error fails the
	// connection, which is tried again.
	OnConnect func(ctx context.Context, ch *amqp.Channel) error
	// Groups are consumed from the start; SetGroups changes them.
	Groups []ConsumerGroup
	// ShutdownTimeout bounds how long Run waits for in-flight deliveries on
	// shutdown before it cancels them. Default 30s.
	ShutdownTimeout time.Duration
	Logger          zerolog.Logger
	// GiveBack, when set, gives a message back to queue without a
	// requeue: it publishes a copy there (confirmed) and the original is
	// then acked. RabbitMQ counts a requeue, or a message returned by a
	// closed channel, toward a quorum queue's delivery-limit (3.x counts
	// both; 4.x a reject), so a message given back again and again for our
	// own reasons (a pause, an open circuit, a hold) would be parked in
	// .dead without one attempt. Nil, or when it fails (a broker alarm),
	// the message is requeued.
	GiveBack func(ctx context.Context, queue string, d amqp.Delivery) error
	// IdleCheck is how often a session looks for consumers the broker no
	// longer serves (see watchIdle). Default 10s.
	IdleCheck time.Duration
}

// abortGrace is how long Run waits for cancelled deliveries to return
// after the shutdown timeout, before it closes the connection regardless.
// With the connection's bounded close it stays under the processes' own
// stop grace (internal/app).
const abortGrace = 2 * time.Second

// Consumers runs every group's consumers on one connection and reconnects
// with backoff and jitter when it is lost. Each reconnect opens fresh
// channels: a delivery from a lost channel can no longer be acked (the ack
// fails, the broker redelivers), and can never ack another message. The
// connection only consumes and acks: publish on another one, so that a
// broker alarm, which blocks publishing connections, cannot freeze acks.
type Consumers struct {
	cfg    ConsumersConfig
	logger zerolog.Logger

	mu     sync.Mutex
	conn   *amqp.Connection
	groups []ConsumerGroup
	// changed wakes the session when SetGroups changed the groups.
	changed chan struct{}
}

// NewConsumers returns Consumers; Run starts them.
func NewConsumers(cfg ConsumersConfig) *Consumers {
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 30 * time.Second
	}
	if cfg.TopologyFunc == nil {
		cfg.TopologyFunc = func() Topology { return Topology{} }
	}
	if cfg.IdleCheck <= 0 {
		cfg.IdleCheck = 10 * time.Second
	}
	return &Consumers{cfg: cfg, logger: cfg.Logger.With().Str("component", "amqp_consumers").Logger(),
		groups: cfg.Groups, changed: make(chan struct{}, 1)}
}

// SetGroups replaces the groups consumed: a group whose queue is new
// starts; one whose queue is gone, or whose Concurrency or Version
// changed, stops taking messages (the one in hand finishes and is acked
// first) and, when still wanted, starts again with its new settings.
func (c *Consumers) SetGroups(groups []ConsumerGroup) {
	c.mu.Lock()
	c.groups = slices.Clone(groups)
	c.mu.Unlock()
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

func (c *Consumers) currentGroups() []ConsumerGroup {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.groups)
}

// Apply runs fn on a channel of the consuming connection (declarations,
// bindings) and closes it; while there is no connection it does nothing
// and returns nil: the next connection declares TopologyFunc's topology.
func (c *Consumers) Apply(fn func(ch *amqp.Channel) error) error {
	c.mu.Lock()
	conn := c.conn
	c.mu.Unlock()
	if conn == nil || conn.IsClosed() {
		return nil
	}
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("opening channel: %w", err)
	}
	defer func() { _ = ch.Close() }() // an error closed it already, or it is done
	return fn(ch)
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

// Run consumes until ctx is done. On shutdown it cancels every consumer (no
// new deliveries), waits up to the shutdown timeout for in-flight
// deliveries to finish and be acked, then cancels the rest, closes the
// connection (the broker requeues what was not acked) and returns nil.
// Connection failures are retried, never returned. Run is not reusable.
func (c *Consumers) Run(ctx context.Context) error {
	// Deliveries run under work, not ctx: shutdown cancels it only after
	// the shutdown timeout.
	work, abort := context.WithCancel(context.WithoutCancel(ctx))
	defer abort()
	retry := backoff.Backoff{Min: 200 * time.Millisecond, Max: 30 * time.Second}
	for {
		err := c.session(ctx, work, abort, retry.Reset)
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

func (c *Consumers) session(ctx, work context.Context, abort func(), connected func()) error {
	node, err := c.cfg.Dialer.Dial(c.cfg.ConnectionName)
	if err != nil {
		return err
	}
	conn := node.Connection
	var watching sync.WaitGroup
	defer func() {
		_ = closeConn(conn) // gone or abandoned either way
		watching.Wait()     // its reads end with the connection
	}()
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	go drainBlocked(conn.NotifyBlocked(make(chan amqp.Blocking, 4)), c.logger)

	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("opening channel: %w", err)
	}
	if err := c.cfg.TopologyFunc().Declare(ch); err != nil {
		return err
	}
	if c.cfg.OnConnect != nil {
		if err := c.cfg.OnConnect(ctx, ch); err != nil {
			return err
		}
	}
	_ = ch.Close() // declarations are done; each consumer has its own channel

	sctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	lost := make(chan error, 1)
	running := map[string]*groupRun{}
	idle := &idleWatch{live: map[*consumer]bool{}}
	if err := c.sync(sctx, work, conn, &wg, running, idle, lost); err != nil {
		stop()
		wg.Wait()
		return err
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
	c.logger.Info().Int("groups", len(running)).Msg("consuming")
	watching.Add(1)
	go func() {
		defer watching.Done()
		c.watchIdle(sctx, conn, idle, lost)
	}()

	for {
		select {
		case <-ctx.Done():
			stop()
			c.drain(&wg, abort)
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
		case <-c.changed:
			if err := c.sync(sctx, work, conn, &wg, running, idle, lost); err != nil {
				stop()
				wg.Wait()
				return err
			}
		}
	}
}

// groupRun is a group's consumers in a session.
type groupRun struct {
	group  ConsumerGroup
	cancel context.CancelFunc
}

// sync makes the session's running groups the current ones: it stops
// those gone or changed (their consumers finish the message in hand) and
// starts those new or changed. Stopped consumers stay counted in wg until
// they return.
func (c *Consumers) sync(ctx, work context.Context, conn *amqp.Connection, wg *sync.WaitGroup, running map[string]*groupRun,
	idle *idleWatch, lost chan<- error) error {
	want := map[string]ConsumerGroup{}
	var start []ConsumerGroup
	for _, g := range c.currentGroups() {
		want[g.Queue] = g
		if r, ok := running[g.Queue]; ok && r.group.Concurrency == g.Concurrency && r.group.Version == g.Version {
			continue
		}
		start = append(start, g)
	}
	for queue, r := range running {
		if g, ok := want[queue]; !ok || g.Concurrency != r.group.Concurrency || g.Version != r.group.Version {
			r.cancel()
			delete(running, queue)
			c.logger.Info().Str("queue", queue).Msg("stopped consuming: the route was removed or changed")
		}
	}
	return c.startConsumers(ctx, work, conn, wg, start, running, idle, lost)
}

// startConsumers starts groups' consumers on conn, each in a goroutine
// counted in wg that hands deliveries to its handler (under work) until
// ctx, or its group's context in running, is done. A consumer whose channel closes while ctx is
// not done (a channel error, the broker's consumer timeout, its queue
// deleted) must not vanish while the connection looks healthy: it says so
// on lost, and the session starts over.
func (c *Consumers) startConsumers(ctx, work context.Context, conn *amqp.Connection, wg *sync.WaitGroup, groups []ConsumerGroup,
	running map[string]*groupRun, idle *idleWatch, lost chan<- error) error {
	// Open the consumers whose gate is open several at a time: each is
	// three round trips to the broker (channel, prefetch, consume), and
	// opened one after another, 600 of them took seconds, during which
	// the first ones worked alone. On a failure the session closes the
	// connection, and with it every channel opened here.
	opened := make([][]*consumer, len(groups))
	var eg errgroup.Group
	eg.SetLimit(openConsumersAtOnce)
	for gi, g := range groups {
		opened[gi] = make([]*consumer, g.Concurrency)
		for i := range g.Concurrency {
			if open, _ := gateOpen(g.Gate, i); !open {
				continue
			}
			eg.Go(func() (err error) {
				opened[gi][i], err = c.openConsumer(conn, g, i)
				return err
			})
		}
	}
	if err := eg.Wait(); err != nil {
		return err
	}
	for gi, g := range groups {
		gctx, cancel := context.WithCancel(ctx)
		running[g.Queue] = &groupRun{group: g, cancel: cancel}
		for i := range g.Concurrency {
			cc := opened[gi][i]
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := c.consume(gctx, work, conn, g, i, cc, idle)
				if gctx.Err() == nil {
					select {
					case lost <- err: // the first loss restarts the session
					default:
					}
				}
			}()
		}
	}
	return nil
}

// openConsumersAtOnce is how many consumers a session opens at the same
// time.
const openConsumersAtOnce = 16

func gateOpen(g Gate, i int) (bool, <-chan struct{}) {
	if g == nil {
		return true, nil
	}
	return g.Open(i)
}

// consume runs consumer i of g (cc, or one it opens when its gate opens)
// until ctx is done, and returns why it stopped otherwise. When the gate
// closes it cancels the consumer (basic.cancel: the message in hand
// finishes and is acked first) and closes its channel, which returns a
// message prefetched but not started to the queue; when the gate opens
// again it consumes on a new channel.
func (c *Consumers) consume(ctx, work context.Context, conn *amqp.Connection, g ConsumerGroup, i int, cc *consumer, idle *idleWatch) error {
	defer stoppedConsuming(g.Gate, i)
	for {
		if cc == nil {
			for {
				open, changed := gateOpen(g.Gate, i)
				if open {
					break
				}
				select {
				case <-ctx.Done():
					return nil
				case <-changed:
				}
			}
			var err error
			if cc, err = c.openConsumer(conn, g, i); err != nil {
				return err
			}
			cc.logger.Debug().Msg("consuming again")
		}
		chClosed := cc.ch.NotifyClose(make(chan *amqp.Error, 1))
		consuming(g.Gate, i, false)
		idle.add(cc)
		gated := cc.run(ctx, work, g.Handle, g.Gate, i)
		idle.remove(cc)
		stoppedConsuming(g.Gate, i)
		if !gated {
			err := stopped(g.Queue, chClosed, cc.cancelled)
			if ctx.Err() != nil {
				// Stopped by its group (the route changed or went) or the
				// session: a message the broker sent before the cancel
				// took effect goes back to the queue now, not when the
				// connection closes (TestChangedGroupLeavesNoMessageBehind).
				_ = cc.ch.Close() // gone already, or closed here
			}
			return err
		}
		_ = cc.ch.Close() // given back already; anything left goes back to the queue
		cc.logger.Debug().Msg("stopped consuming: the route is paused, held or its circuit open")
		cc = nil
	}
}

// stopped says why a consumer of queue stopped: the broker's basic.cancel
// (its queue was deleted; 4.x also cancels on a quorum queue's consumer
// timeout), which closes the deliveries and leaves the channel open, or
// its channel's error (3.x's consumer timeout closes the channel with 406
// PRECONDITION_FAILED).
func stopped(queue string, chClosed <-chan *amqp.Error, cancelled <-chan string) error {
	var closeErr *amqp.Error
	select {
	case closeErr = <-chClosed:
	default:
	}
	byBroker := false
	select {
	case _, byBroker = <-cancelled: // closed, it only says the channel closed
	default:
	}
	const cancel = "cancelled by the broker (basic.cancel: the queue was deleted, or the consumer timed out)"
	switch {
	case byBroker && closeErr != nil:
		return fmt.Errorf("consumer of %s %s, then its channel closed: %w", queue, cancel, closeErr)
	case byBroker:
		return fmt.Errorf("consumer of %s %s", queue, cancel)
	case closeErr != nil:
		return fmt.Errorf("consumer of %s stopped: %w", queue, closeErr)
	}
	return fmt.Errorf("consumer of %s stopped", queue)
}

// drain waits for in-flight deliveries on shutdown: up to the shutdown
// timeout, then it aborts them and waits a little more.
func (c *Consumers) drain(wg *sync.WaitGroup, abort func()) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	t := time.NewTimer(c.cfg.ShutdownTimeout)
	defer t.Stop()
	select {
	case <-done:
		return // every delivery finished and was acked or nacked
	case <-t.C:
	}
	c.logger.Warn().Dur("shutdown_timeout", c.cfg.ShutdownTimeout).
		Msg("deliveries still in flight at the shutdown timeout; aborting them, rabbitmq redelivers them")
	abort()
	t.Reset(abortGrace)
	select {
	case <-done:
	case <-t.C:
		c.logger.Error().Dur("waited", abortGrace).Msg("aborted deliveries did not return; closing the connection regardless")
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
	queue      string
	deliveries <-chan amqp.Delivery
	// cancelled receives the tag when the broker cancels the consumer.
	cancelled <-chan string
	// idleSince is when the consumer began to wait for a message, in
	// Unix nanoseconds; 0 while it handles one or does not consume.
	idleSince    atomic.Int64
	logger       zerolog.Logger
	giveBackFunc func(ctx context.Context, queue string, d amqp.Delivery) error
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
	// Before Consume, so that a cancel right after it is not missed. The
	// library's send to it gives up after a while when nobody reads, so
	// one slot (one consumer per channel) never holds the channel up.
	cancelled := ch.NotifyCancel(make(chan string, 1))
	// autoAck false: a message is acked only after its outcome is stored.
	deliveries, err := ch.Consume(g.Queue, tag, false, false, false, false, nil)
	if err != nil {
		return nil, fmt.Errorf("consuming %s: %w", g.Queue, err)
	}
	return &consumer{
		ch: ch, tag: tag, queue: g.Queue, deliveries: deliveries, cancelled: cancelled, giveBackFunc: c.cfg.GiveBack,
		logger: c.logger.With().Str("queue", g.Queue).Str("consumer", tag).Logger(),
	}, nil
}

// run hands each delivery to handle until ctx is done or gate closes for
// consumer i (it then cancels the consumer and returns true); handle runs
// under work.
func (cc *consumer) run(ctx, work context.Context, handle HandleFunc, gate Gate, i int) (gated bool) {
	defer cc.idleSince.Store(0)
	for {
		open, changed := gateOpen(gate, i)
		if !open {
			// Cancel, then give back (without a requeue) what the broker
			// sent before the cancel took effect.
			if err := cc.ch.Cancel(cc.tag, false); err != nil {
				// The channel is going: what it holds goes back to the
				// queue with a requeue, which counts toward the delivery
				// limit.
				cc.logger.Warn().Err(err).Msg("cancelling the consumer to give its messages back failed; the channel's close returns them with a requeue")
			} else {
				cc.drainGivingBack(work)
			}
			return true
		}
		cc.idleSince.CompareAndSwap(0, time.Now().UnixNano())
		select {
		case <-ctx.Done():
			// Stop receiving; a message already prefetched but not handled
			// goes back to the queue when consume closes the channel.
			_ = cc.ch.Cancel(cc.tag, false)
			return false
		case <-changed:
		case d, ok := <-cc.deliveries:
			if !ok {
				return false // channel or connection closed
			}
			cc.idleSince.Store(0)
			consuming(gate, i, true)
			cc.handle(ctx, work, d, handle)
			consuming(gate, i, false)
		}
	}
}

func (cc *consumer) handle(ctx, work context.Context, d amqp.Delivery, handle HandleFunc) {
	err := safeHandle(work, decodeRouteMessage(d), ctx.Done(), handle)
	if err != nil && work.Err() != nil {
		// Aborted at the shutdown timeout: neither acked nor nacked, it goes
		// back to the queue when the connection closes.
		cc.logger.Warn().Err(err).Str("message_id", d.MessageId).Msg("delivery aborted by shutdown; rabbitmq redelivers it")
		return
	}
	if err == nil {
		if err := d.Ack(false); err != nil {
			// The channel is gone: the broker redelivers the message.
			cc.logger.Warn().Err(err).Str("message_id", d.MessageId).Msg("ack failed; message will be redelivered")
		}
		return
	}
	if errors.Is(err, ErrGiveBack) {
		cc.logger.Debug().Err(err).Str("message_id", d.MessageId).Msg("message given back to the queue")
		cc.giveBack(work, d)
		return
	}
	cc.logger.Error().Err(err).Str("message_id", d.MessageId).Msg("delivery not completed; requeueing")
	// A pause before the requeue keeps a failing dependency from turning
	// into a hot loop; shutdown cuts it short.
	backoff.Sleep(ctx, time.Second)
	// basic.reject, not basic.nack: since RabbitMQ 4.3 only a reject
	// counts toward a quorum queue's delivery-limit (a nack says "not
	// processed", not "failed"), and a message that keeps failing here (a
	// poison message) must still be parked after dispatcher.delivery_limit
	// tries, as 3.x, which counts both, parks it. A message given back
	// for our own reasons (giveBack) is nacked: it did not fail.
	if err := d.Reject(true); err != nil {
		cc.logger.Warn().Err(err).Str("message_id", d.MessageId).Msg("reject failed; message will be redelivered")
	}
}

// giveBack gives d back to its queue through GiveBack (a copy published,
// the original acked), or with a requeue when there is none or it fails.
func (cc *consumer) giveBack(ctx context.Context, d amqp.Delivery) {
	if cc.giveBackFunc != nil {
		gctx, cancel := context.WithTimeout(ctx, giveBackTimeout)
		err := cc.giveBackFunc(gctx, cc.queue, d)
		cancel()
		if err == nil {
			if err := d.Ack(false); err != nil {
				// The copy is in the queue and the original comes back
				// too: a duplicate, which the dispatcher drops.
				cc.logger.Warn().Err(err).Str("message_id", d.MessageId).Msg("ack of a message given back failed; it will be redelivered")
			}
			return
		}
		cc.logger.Warn().Err(err).Str("message_id", d.MessageId).Msg("giving a message back without a requeue failed; requeueing it")
	}
	if err := d.Nack(false, true); err != nil {
		cc.logger.Warn().Err(err).Str("message_id", d.MessageId).Msg("nack failed; message will be redelivered")
	}
}

// giveBackTimeout bounds one give-back's publish and confirm.
const giveBackTimeout = 5 * time.Second

// drainGivingBack gives back every message the broker sent before the
// consumer's cancel took effect (prefetched, not started), after Cancel:
// the channel's close would return them with a requeue.
func (cc *consumer) drainGivingBack(ctx context.Context) {
	for d := range cc.deliveries {
		cc.giveBack(ctx, d)
	}
}

func safeHandle(ctx context.Context, m webhook.RouteMessage, stopping <-chan struct{}, handle HandleFunc) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panicked: %v", r)
		}
	}()
	return handle(ctx, m, stopping)
}

// idleWatch is a session's consumers that are subscribed, for watchIdle.
type idleWatch struct {
	mu   sync.Mutex
	live map[*consumer]bool
}

func (w *idleWatch) add(cc *consumer) {
	w.mu.Lock()
	w.live[cc] = true
	w.mu.Unlock()
}

func (w *idleWatch) remove(cc *consumer) {
	w.mu.Lock()
	delete(w.live, cc)
	w.mu.Unlock()
}

// idleBefore returns the consumers waiting for a message since before
// cutoff, with since when.
func (w *idleWatch) idleBefore(cutoff time.Time) map[*consumer]int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[*consumer]int64{}
	for cc := range w.live {
		if since := cc.idleSince.Load(); since != 0 && since <= cutoff.UnixNano() {
			out[cc] = since
		}
	}
	return out
}

// watchIdle reports on lost, every IdleCheck until ctx is done, a consumer
// the broker no longer delivers to: one that waited for a message all
// through two readings of its queue, IdleCheck apart, that both counted
// ready messages. The broker gives a ready message to a consumer with room
// (prefetch 1, none in hand) at once, so such a consumer is one it has
// lost track of, and nothing else says so: RabbitMQ 3.10 sends no
// basic.cancel to the consumers of a quorum queue deleted and declared
// again at once, and attaches them to the new queue, which gives each one
// message that never reaches it and keeps the rest ready. The session
// then starts over: closing the channels gives those messages back, and
// new consumers take them.
func (c *Consumers) watchIdle(ctx context.Context, conn *amqp.Connection, w *idleWatch, lost chan<- error) {
	t := time.NewTicker(c.cfg.IdleCheck)
	defer t.Stop()
	var ch *amqp.Channel
	defer func() {
		if ch != nil {
			_ = ch.Close() // a reading's channel; the connection may be gone
		}
	}()
	// suspects are the consumers idle all through the last reading, of
	// a queue that counted ready messages, with since when.
	suspects := map[*consumer]int64{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		idle := w.idleBefore(time.Now().Add(-c.cfg.IdleCheck))
		ready := map[string]int{}
		for cc := range idle {
			if _, read := ready[cc.queue]; read {
				continue
			}
			if ch == nil {
				var err error
				if ch, err = conn.Channel(); err != nil {
					return // the connection is going; the session knows
				}
			}
			q, err := ch.QueueDeclarePassive(cc.queue, true, false, false, false, nil)
			if err != nil {
				// Gone (which closes the channel) or not answering: its
				// consumers learn of it otherwise.
				_ = ch.Close()
				ch = nil
				ready[cc.queue] = 0
				continue
			}
			ready[cc.queue] = q.Messages
		}
		next := map[*consumer]int64{}
		for cc, since := range idle {
			if ready[cc.queue] == 0 || cc.idleSince.Load() != since {
				continue // nothing for it, or it took a message meanwhile
			}
			if suspects[cc] == since {
				err := fmt.Errorf("consumer of %s received nothing for %s while its queue held %d ready message(s): the broker no longer delivers to it (its queue deleted and declared again at once?)",
					cc.queue, time.Since(time.Unix(0, since)).Round(time.Second), ready[cc.queue])
				select {
				case lost <- err:
				default:
				}
				return
			}
			next[cc] = since
		}
		suspects = next
	}
}
