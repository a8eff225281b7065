package amqp

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"
)

// ErrBlocked is returned (wrapped, with RabbitMQ's reason) by a publish
// while the broker blocks the publishing connection: a memory or disk alarm
// is on. Nothing was confirmed; publishing works again once the alarm
// clears.
var ErrBlocked = errors.New("rabbitmq is blocking publishers")

func blockedError(reason string) error {
	return fmt.Errorf("%w: %s", ErrBlocked, reason)
}

const (
	// dialTimeout bounds the TCP connect and the AMQP handshake.
	dialTimeout = 5 * time.Second
	// writeTimeout bounds each socket write. A broker that stops reading
	// (an alarm blocked the connection, or the network drops packets
	// without closing) would otherwise hang a write once the socket buffer
	// is full; the failed write closes the connection.
	writeTimeout = 15 * time.Second
	// closeTimeout bounds closing a connection: a blocked broker does not
	// read the close request, so its answer may never come.
	closeTimeout = 2 * time.Second
)

// writeDeadlineConn sets a fresh write deadline before each write, so a
// write that makes no progress for timeout fails. A deadline the library
// sets itself (the handshake, a bounded close) still applies when earlier.
type writeDeadlineConn struct {
	net.Conn
	timeout time.Duration

	mu    sync.Mutex
	fixed time.Time
}

func (c *writeDeadlineConn) Write(b []byte) (int, error) {
	d := time.Now().Add(c.timeout)
	c.mu.Lock()
	if !c.fixed.IsZero() && c.fixed.Before(d) {
		d = c.fixed
	}
	c.mu.Unlock()
	if err := c.Conn.SetWriteDeadline(d); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

func (c *writeDeadlineConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.fixed = t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *writeDeadlineConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.fixed = t
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

// closeConn closes conn without waiting for a broker that does not read.
func closeConn(conn *amqp.Connection) error {
	err := conn.CloseDeadline(time.Now().Add(closeTimeout))
	if err != nil && !errors.Is(err, amqp.ErrClosed) {
		return fmt.Errorf("closing rabbitmq connection: %w", err)
	}
	return nil
}

// NewBlockedGauge registers hookrelay_rabbitmq_blocked on reg.
func NewBlockedGauge(reg prometheus.Registerer) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "hookrelay_rabbitmq_blocked",
		Help: "1 while RabbitMQ blocks the publishing connection (a memory or disk alarm), else 0.",
	}, []string{"connection"})
	reg.MustRegister(g)
	return g
}

// blockState follows one connection's connection.blocked and
// connection.unblocked notifications.
type blockState struct {
	gauge prometheus.Gauge // may be nil

	mu     sync.Mutex
	reason string        // non-empty while blocked
	began  chan struct{} // closed when a block begins; replaced when it lifts
	lifted chan struct{} // closed when the block lifts; replaced when one begins
}

func newBlockState(gauge prometheus.Gauge) *blockState {
	lifted := make(chan struct{})
	close(lifted)
	return &blockState{gauge: gauge, began: make(chan struct{}), lifted: lifted}
}

func (b *blockState) set(active bool, reason string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case active:
		if reason == "" {
			reason = "no reason given"
		}
		if b.reason == "" {
			close(b.began)
			b.lifted = make(chan struct{})
		}
		b.reason = reason
		if b.gauge != nil {
			b.gauge.Set(1)
		}
	case b.reason != "":
		b.reason = ""
		close(b.lifted)
		b.began = make(chan struct{})
		if b.gauge != nil {
			b.gauge.Set(0)
		}
	}
}

// current returns the block's reason (empty when not blocked) and a channel
// closed when it lifts.
func (b *blockState) current() (string, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.reason, b.lifted
}

// beginning returns a channel closed once a block begins (at once if one is
// on).
func (b *blockState) beginning() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.began
}

// session is one publishing connection with its notifications drained: a
// block shows in block, and gone closes when the connection does.
type session struct {
	conn  *amqp.Connection
	block *blockState
	gone  chan struct{}

	mu  sync.Mutex
	err error // why it closed; set before gone closes
}

func openSession(d *Dialer, name string, gauge prometheus.Gauge, logger zerolog.Logger) (*session, error) {
	c, err := d.Dial(name)
	if err != nil {
		return nil, err
	}
	conn := c.Connection
	s := &session{conn: conn, block: newBlockState(gauge), gone: make(chan struct{})}
	closes := conn.NotifyClose(make(chan *amqp.Error, 1))
	blocks := conn.NotifyBlocked(make(chan amqp.Blocking, 4))
	go s.watch(closes, blocks, logger)
	return s, nil
}

// watch drains the connection's notifications until it closes (undrained,
// they would stall the connection's reader). A block belongs to the
// connection: when it closes, the block is lifted, and a new connection is
// told again if the alarm persists.
func (s *session) watch(closes <-chan *amqp.Error, blocks <-chan amqp.Blocking, logger zerolog.Logger) {
	for {
		select {
		case b, ok := <-blocks:
			if !ok {
				blocks = nil
				continue
			}
			if b.Active {
				logger.Warn().Str("reason", b.Reason).Msg("rabbitmq blocked publishing")
			} else {
				logger.Info().Msg("rabbitmq unblocked publishing")
			}
			s.block.set(b.Active, b.Reason)
		case e, ok := <-closes:
			s.mu.Lock()
			s.err = errors.New("rabbitmq connection closed")
			if ok && e != nil {
				s.err = e
			}
			s.mu.Unlock()
			s.block.set(false, "")
			close(s.gone)
			if blocks != nil {
				for range blocks { // closed with the connection
				}
			}
			return
		}
	}
}

// closed reports whether the connection is gone, and why.
func (s *session) closed() (bool, error) {
	select {
	case <-s.gone:
		s.mu.Lock()
		defer s.mu.Unlock()
		return true, s.err
	default:
		return false, nil
	}
}

// bounded runs fn, a call that waits for the broker, and closes the
// connection if it takes longer than timeout, which ends fn with an error.
func (s *session) bounded(timeout time.Duration, fn func() error) error {
	t := time.AfterFunc(timeout, func() { _ = closeConn(s.conn) })
	defer t.Stop()
	return fn()
}

// confirmChannel is a channel in confirm mode with its returns.
type confirmChannel struct {
	ch      *amqp.Channel
	returns chan amqp.Return
	// closes tells why the broker closed the channel (a publish to a
	// missing exchange closes it with 404).
	closes chan *amqp.Error
	// tiers are the retry tiers declared on ch, by delay.
	tiers map[time.Duration]bool
}

// openConfirmChannel opens a confirm channel on s; returnBuffer must hold
// every return of the publishes in flight on it, so the connection's reader
// never waits on it.
func (s *session) openConfirmChannel(timeout time.Duration, returnBuffer int, setup func(*amqp.Channel) error) (*confirmChannel, error) {
	var cc *confirmChannel
	err := s.bounded(timeout, func() error {
		ch, err := s.conn.Channel()
		if err != nil {
			return fmt.Errorf("opening channel: %w", err)
		}
		if setup != nil {
			if err := setup(ch); err != nil {
				_ = ch.Close()
				return err
			}
		}
		if err := ch.Confirm(false); err != nil {
			_ = ch.Close()
			return fmt.Errorf("enabling publisher confirms: %w", err)
		}
		cc = &confirmChannel{ch: ch, returns: ch.NotifyReturn(make(chan amqp.Return, returnBuffer)), closes: ch.NotifyClose(make(chan *amqp.Error, 1)),
			tiers: map[time.Duration]bool{}}
		return nil
	})
	return cc, err
}

// discard closes the channel in the background, draining returns that
// arrive for its abandoned publishes meanwhile. A blocked broker answers
// the close only when the block lifts or the connection closes; nothing
// waits for it.
func (c *confirmChannel) discard() {
	go func() {
		closed := make(chan struct{})
		go func() {
			_ = c.ch.Close() // abandoned either way
			close(closed)
		}()
		for {
			select {
			case _, ok := <-c.returns:
				if !ok {
					<-closed
					return
				}
			case <-closed:
				for range c.returns { // closed with the channel
				}
				return
			}
		}
	}()
}
