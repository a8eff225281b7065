package amqp

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"
)

// Outcome is what the broker said about one published message.
type Outcome int

// Outcomes of a publish. Only Acked means the broker took responsibility for
// the message; every other outcome leaves the outbox row for another try.
const (
	// Unconfirmed: no answer before the timeout, or the connection was lost.
	Unconfirmed Outcome = iota
	// Acked: routed and stored (quorum: by a majority).
	Acked
	// Nacked: the broker refused it.
	Nacked
	// Returned: mandatory and unroutable (the alternate exchange is missing).
	Returned
)

func (o Outcome) String() string {
	switch o {
	case Acked:
		return "ack"
	case Nacked:
		return "nack"
	case Returned:
		return "returned"
	default:
		return "unconfirmed"
	}
}

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	URL string
	// Topology is declared on every (re)connect.
	Topology Topology
	// Exchange receives the messages.
	Exchange string
	// Names maps a message's Route (a replay to one route) to its queue,
	// published to through the default exchange.
	Names Names
	// ConfirmTimeout bounds the wait for a batch's confirms.
	ConfirmTimeout time.Duration
	// MaxBatch is the largest batch Publish is given; it sizes the return
	// buffer.
	MaxBatch int
	// ConnectionName shows in the management UI.
	ConnectionName string
	Logger         zerolog.Logger
	// Confirms counts outcomes when set; see NewConfirmsCounter.
	Confirms *prometheus.CounterVec
}

// NewConfirmsCounter registers hookrelay_publish_confirms_total on reg.
func NewConfirmsCounter(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hookrelay_publish_confirms_total",
		Help: "Published messages by broker answer: ack, nack, returned (unroutable) or unconfirmed (timeout or lost connection).",
	}, []string{"outcome"})
	reg.MustRegister(c)
	for _, o := range []Outcome{Acked, Nacked, Returned, Unconfirmed} {
		c.WithLabelValues(o.String())
	}
	return c
}

// Publisher publishes persistent, mandatory messages with publisher confirms
// over one channel. It connects on first use and after any failure: the
// caller's retry loop decides how long to wait between tries. It is safe for
// concurrent use; publishes are serialised.
//
// It does not use amqp091-go's automatic recovery: a fresh connection and
// channel after every failure means no confirm or tag from an old channel
// can be mistaken for a new one.
type Publisher struct {
	cfg    PublisherConfig
	logger zerolog.Logger

	mu      sync.Mutex // serialises Publish and guards the fields below
	conn    *amqp.Connection
	ch      *amqp.Channel
	returns chan amqp.Return
	closed  chan *amqp.Error

	blockedMu sync.Mutex
	blocked   string // non-empty while the broker blocks publishing
}

// NewPublisher returns a Publisher; it does not connect yet.
func NewPublisher(cfg PublisherConfig) *Publisher {
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 1000
	}
	if cfg.ConfirmTimeout <= 0 {
		cfg.ConfirmTimeout = 10 * time.Second
	}
	return &Publisher{cfg: cfg, logger: cfg.Logger.With().Str("component", "amqp_publisher").Logger()}
}

// Dial opens a connection with hookrelay's settings.
func Dial(url, name string) (*amqp.Connection, error) {
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(name)
	conn, err := amqp.DialConfig(url, amqp.Config{
		Heartbeat:  10 * time.Second,
		Locale:     "en_US",
		Properties: props,
		Dial:       amqp.DefaultDial(5 * time.Second),
	})
	if err != nil {
		return nil, fmt.Errorf("connecting to rabbitmq: %w", err)
	}
	return conn, nil
}

// connectLocked dials, declares the topology and opens a confirm channel.
func (p *Publisher) connectLocked() error {
	if p.ch != nil {
		select {
		case err := <-p.closed:
			p.logger.Warn().Err(err).Msg("rabbitmq connection lost")
			p.resetLocked()
		default:
			return nil
		}
	}
	conn, err := Dial(p.cfg.URL, p.cfg.ConnectionName)
	if err != nil {
		return err
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.Close()
		return fmt.Errorf("opening channel: %w", err)
	}
	if err := p.cfg.Topology.Declare(ch); err != nil {
		_ = conn.Close()
		return err
	}
	if err := ch.Confirm(false); err != nil {
		_ = conn.Close()
		return fmt.Errorf("enabling publisher confirms: %w", err)
	}
	p.closed = conn.NotifyClose(make(chan *amqp.Error, 1))
	// The broker sends basic.return before the ack of the same message, from
	// the connection's single reader goroutine. Sized for a whole batch, the
	// buffer never blocks that reader; Publish drains it after the confirms,
	// by which time every return of the batch is already in it.
	p.returns = ch.NotifyReturn(make(chan amqp.Return, p.cfg.MaxBatch+1))
	go p.watchBlocked(conn.NotifyBlocked(make(chan amqp.Blocking, 4)))
	p.conn, p.ch = conn, ch
	p.logger.Info().Msg("connected to rabbitmq")
	return nil
}

// watchBlocked drains blocked notifications (an undrained channel stalls the
// connection) and remembers whether publishing is blocked by an alarm.
func (p *Publisher) watchBlocked(c <-chan amqp.Blocking) {
	for b := range c {
		p.blockedMu.Lock()
		if b.Active {
			p.blocked = b.Reason
			p.logger.Warn().Str("reason", b.Reason).Msg("rabbitmq blocked publishing")
		} else {
			p.blocked = ""
			p.logger.Info().Msg("rabbitmq unblocked publishing")
		}
		p.blockedMu.Unlock()
	}
}

func (p *Publisher) resetLocked() {
	if p.conn != nil {
		_ = p.conn.Close() // the connection is being abandoned either way
	}
	p.conn, p.ch, p.returns, p.closed = nil, nil, nil, nil
	// A block belongs to the connection: a new one starts unblocked (and is
	// told again if the alarm persists).
	p.blockedMu.Lock()
	p.blocked = ""
	p.blockedMu.Unlock()
}

// Ping connects if needed and reports whether the connection is open.
func (p *Publisher) Ping(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.connectLocked(); err != nil {
		return err
	}
	if p.conn.IsClosed() {
		return errors.New("rabbitmq connection closed")
	}
	return nil
}

// ErrConfirmTimeout is wrapped by Publish's error when the broker did not
// confirm every message within the confirm timeout: the outcomes then say
// which messages it answered (Unconfirmed for the rest). Any other error
// means the connection or channel failed, and outcomes other than Acked say
// nothing about their messages.
var ErrConfirmTimeout = errors.New("confirm timeout")

// Publish sends msgs to the exchange, all in flight at once, and waits up to
// the confirm timeout for the broker's answers. outcomes[i] is the answer
// about msgs[i]: only Acked means the broker took it. A non-nil error means
// the connection or channel failed, or the confirms timed out
// (ErrConfirmTimeout); either way it is reset and the next call reconnects.
// ctx is checked before each write only.
func (p *Publisher) Publish(ctx context.Context, msgs []webhook.Message) (outcomes []Outcome, err error) {
	outcomes, err = p.publish(ctx, msgs)
	if p.cfg.Confirms != nil {
		for _, o := range outcomes {
			p.cfg.Confirms.WithLabelValues(o.String()).Inc()
		}
	}
	return outcomes, err
}

func (p *Publisher) publish(ctx context.Context, msgs []webhook.Message) ([]Outcome, error) {
	outcomes := make([]Outcome, len(msgs))
	if len(msgs) == 0 {
		return outcomes, nil
	}
	if len(msgs) > p.cfg.MaxBatch {
		return outcomes, fmt.Errorf("batch of %d exceeds MaxBatch %d", len(msgs), p.cfg.MaxBatch)
	}
	p.blockedMu.Lock()
	blocked := p.blocked
	p.blockedMu.Unlock()
	if blocked != "" {
		// A publish now would hang on the socket: the broker stopped reading.
		return outcomes, fmt.Errorf("rabbitmq is blocking publishers: %s", blocked)
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.connectLocked(); err != nil {
		return outcomes, err
	}

	confirms := make([]*amqp.DeferredConfirmation, len(msgs))
	index := make(map[string]int, len(msgs))
	for i, m := range msgs {
		id := m.EventID.String()
		// Returns are matched by the outbox row, not the event: one batch
		// may hold several rows of one event (a replay to several routes).
		corr := strconv.FormatInt(m.OutboxID, 10)
		index[corr] = i
		exchange, key := p.cfg.Exchange, m.RoutingKey
		if m.Route != "" {
			exchange, key = "", p.cfg.Names.RouteQueue(m.Route)
		}
		dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, amqp.Publishing{
			DeliveryMode:  amqp.Persistent,
			ContentType:   m.ContentType,
			MessageId:     id,
			CorrelationId: corr,
			Timestamp:     m.ReceivedAt,
			Type:          m.EventType,
			AppId:         "hookrelay",
			Headers: amqp.Table{
				webhook.HeaderEventID:   id,
				webhook.HeaderSource:    m.Source,
				webhook.HeaderEventType: m.EventType,
			},
			Body: m.Body,
		})
		if err != nil {
			p.resetLocked()
			return outcomes, fmt.Errorf("publishing: %w", err)
		}
		confirms[i] = dc
	}

	waitCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.ConfirmTimeout)
	defer cancel()
	var waitErr error
	for i, dc := range confirms {
		acked, err := dc.WaitContext(waitCtx)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				err = fmt.Errorf("%w after %s", ErrConfirmTimeout, p.cfg.ConfirmTimeout)
			}
			waitErr = fmt.Errorf("waiting for publisher confirms: %w", err)
			break
		}
		if acked {
			outcomes[i] = Acked
		} else {
			outcomes[i] = Nacked
		}
	}
	// Every return for an acked message arrived before its ack, so it is in
	// the buffer now.
	p.drainReturnsLocked(index, outcomes)

	if waitErr != nil {
		p.resetLocked()
		return outcomes, waitErr
	}
	select {
	case err := <-p.closed:
		// Confirms of a closing channel resolve as nacks; report the cause.
		p.resetLocked()
		return outcomes, fmt.Errorf("rabbitmq connection lost: %w", err)
	default:
	}
	return outcomes, nil
}

func (p *Publisher) drainReturnsLocked(index map[string]int, outcomes []Outcome) {
	for {
		select {
		case r, ok := <-p.returns:
			if !ok {
				return
			}
			if i, mine := index[r.CorrelationId]; mine {
				outcomes[i] = Returned
				p.logger.Error().Str("event_id", r.MessageId).Str("routing_key", r.RoutingKey).
					Str("reply", r.ReplyText).Msg("message returned unroutable; is the alternate exchange missing?")
			}
		default:
			return
		}
	}
}

// Close closes the connection.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == nil {
		return nil
	}
	err := p.conn.Close()
	p.conn, p.ch, p.returns, p.closed = nil, nil, nil, nil
	if err != nil && !errors.Is(err, amqp.ErrClosed) {
		return fmt.Errorf("closing rabbitmq connection: %w", err)
	}
	return nil
}
