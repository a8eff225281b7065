package amqp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hookrelay/hookrelay/internal/tracing"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"
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
	// Dialer reaches a node of the cluster.
	Dialer *Dialer
	// TopologyFunc returns the topology declared on every (re)connect: the
	// routes' as they are then. Nil declares nothing.
	TopologyFunc func() Topology
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
	// Blocked, when set, is 1 while the broker blocks the connection; see
	// NewBlockedGauge.
	Blocked prometheus.Gauge
	// Tracer, when set, makes a producer span for each traced message,
	// ended with its confirm. Without one, messages still carry the trace
	// context they were given.
	Tracer trace.Tracer
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
// can be mistaken for a new one. A channel whose confirms were not all
// answered (a timeout, a block) is never used again.
type Publisher struct {
	cfg    PublisherConfig
	logger zerolog.Logger

	mu    sync.Mutex // serialises Publish and guards the fields below
	cc    *confirmChannel
	batch uint64 // numbers publishes, for correlation ids

	sessMu sync.Mutex // guards sess and declared, read without waiting for a publish
	sess   *session
	// declared says the topology was declared on sess: until then the
	// connection is up but a queue may not exist yet.
	declared bool
}

// NewPublisher returns a Publisher; it does not connect yet.
func NewPublisher(cfg PublisherConfig) *Publisher {
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 1000
	}
	if cfg.ConfirmTimeout <= 0 {
		cfg.ConfirmTimeout = 10 * time.Second
	}
	if cfg.Blocked != nil {
		cfg.Blocked.Set(0)
	}
	return &Publisher{cfg: cfg, logger: cfg.Logger.With().Str("component", "amqp_publisher").Logger()}
}

func (p *Publisher) session() *session {
	p.sessMu.Lock()
	defer p.sessMu.Unlock()
	return p.sess
}

// connectLocked dials if there is no open connection and opens a confirm
// channel if there is none; the topology is declared on each new channel.
func (p *Publisher) connectLocked() (*session, error) {
	s := p.session()
	if s != nil {
		if gone, err := s.closed(); gone {
			p.logger.Warn().Err(err).Msg("rabbitmq connection lost")
			p.resetLocked()
			s = nil
		}
	}
	if s == nil {
		var err error
		if s, err = openSession(p.cfg.Dialer, p.cfg.ConnectionName, p.cfg.Blocked, p.logger); err != nil {
			return nil, err
		}
		p.sessMu.Lock()
		p.sess = s
		p.sessMu.Unlock()
		p.logger.Info().Msg("connected to rabbitmq")
	}
	if p.cc != nil {
		return s, nil
	}
	if reason, _ := s.block.current(); reason != "" {
		// A blocked broker does not read: opening a channel would hang.
		return s, blockedError(reason)
	}
	// The broker sends basic.return before the ack of the same message, from
	// the connection's single reader goroutine. Sized for a whole batch, the
	// buffer never blocks that reader; Publish drains it after the confirms,
	// by which time every return of the batch is already in it.
	var topo Topology
	if p.cfg.TopologyFunc != nil {
		topo = p.cfg.TopologyFunc()
	}
	cc, err := s.openConfirmChannel(p.cfg.ConfirmTimeout, p.cfg.MaxBatch+1, topo.Declare)
	if err != nil {
		p.resetLocked()
		return nil, err
	}
	// The tiers the topology holds were declared with it.
	for _, q := range topo.Queues {
		if d, ok := p.cfg.Names.TierDelay(q.Name); ok {
			cc.tiers[d] = true
		}
	}
	p.cc = cc
	p.sessMu.Lock()
	p.declared = true
	p.sessMu.Unlock()
	return s, nil
}

// resetLocked abandons the connection; the next publish dials again.
func (p *Publisher) resetLocked() {
	p.sessMu.Lock()
	s := p.sess
	p.sess, p.declared = nil, false
	p.sessMu.Unlock()
	p.cc = nil
	if s != nil {
		_ = closeConn(s.conn) // the connection is being abandoned either way
	}
}

// discardChannelLocked gives up the channel (its publishes were not all
// answered) and keeps the connection: the next publish opens a fresh
// channel, so no late confirm or return can be taken for a later one's.
func (p *Publisher) discardChannelLocked() {
	if p.cc != nil {
		p.cc.discard()
		p.cc = nil
	}
}

// Ping connects if needed and reports whether the connection is open with
// the topology declared on it: nil, ErrBlocked (wrapped) while the broker
// blocks it, or the connection error. It does not wait for a publish in
// progress when connected and declared.
func (p *Publisher) Ping(context.Context) error {
	p.sessMu.Lock()
	s, declared := p.sess, p.declared
	p.sessMu.Unlock()
	if s != nil && declared {
		if gone, _ := s.closed(); !gone {
			if reason, _ := s.block.current(); reason != "" {
				return blockedError(reason)
			}
			return nil
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_, err := p.connectLocked()
	return err
}

// ErrConfirmTimeout is wrapped by Publish's error when the broker did not
// confirm every message within the confirm timeout: the outcomes then say
// which messages it answered (Unconfirmed for the rest). After any other
// error (the connection or channel failed, or ErrBlocked) outcomes other
// than Acked say nothing about their messages.
var ErrConfirmTimeout = errors.New("confirm timeout")

// Publish sends msgs to the exchange, all in flight at once, and waits up to
// the confirm timeout for the broker's answers. outcomes[i] is the answer
// about msgs[i]: only Acked means the broker took it. A non-nil error means
// the connection or channel failed, or the confirms timed out
// (ErrConfirmTimeout): either way it is reset and the next call reconnects.
// Or the broker blocks publishing (ErrBlocked): then Publish answers at
// once, also when the block begins while it waits for the confirms, and
// the next call fails at once until the block lifts; unanswered outcomes
// say nothing about their messages then. ctx is checked before each write
// only.
func (p *Publisher) Publish(ctx context.Context, msgs []webhook.Message) (outcomes []Outcome, err error) {
	msgs, spans := p.traced(msgs)
	outcomes, err = p.publish(ctx, msgs)
	endSpans(spans, outcomes, err)
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
	if s := p.session(); s != nil {
		if reason, _ := s.block.current(); reason != "" {
			// The broker stopped reading this connection: answer at once,
			// so the caller releases its claim.
			return outcomes, blockedError(reason)
		}
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	s, err := p.connectLocked()
	if err != nil {
		return outcomes, err
	}
	refused, err := p.declareTiersLocked(s, msgs)
	if err != nil {
		p.resetLocked()
		return outcomes, err
	}
	if len(refused) > 0 {
		// Copies whose tier the broker refused are returned, as
		// unroutable: their rows wait out a backoff, and the rest of the
		// batch goes on a fresh channel.
		var rest []webhook.Message
		var at []int
		for i, m := range msgs {
			if m.Route != "" && refused[m.RetryIn] {
				outcomes[i] = Returned
				continue
			}
			rest, at = append(rest, m), append(at, i)
		}
		if s, err = p.connectLocked(); err != nil {
			return outcomes, err
		}
		sub, err := p.sendAndAwaitLocked(ctx, s, rest)
		for j, i := range at {
			outcomes[i] = sub[j]
		}
		return outcomes, err
	}
	return p.sendAndAwaitLocked(ctx, s, msgs)
}

// sendAndAwaitLocked publishes msgs on the current channel and waits for
// their answers, as Publish describes.
func (p *Publisher) sendAndAwaitLocked(ctx context.Context, s *session, msgs []webhook.Message) ([]Outcome, error) {
	outcomes := make([]Outcome, len(msgs))
	if len(msgs) == 0 {
		return outcomes, nil
	}
	cc := p.cc
	confirms, index, err := p.sendLocked(ctx, cc, msgs)
	if err != nil {
		p.resetLocked()
		return outcomes, err
	}

	// Not cut short by ctx: the batch is in flight, and its answers decide
	// which rows are deleted. A block or a lost connection ends the wait at
	// once.
	blocked, waitErr := p.awaitConfirms(s, confirms, outcomes)
	if waitErr != nil {
		// The wait ended early, but answers for later messages may have
		// arrived meanwhile: an ack taken now saves a second publish of
		// its row. (After a lost connection every pending confirm reads as
		// a nack; the caller knows those say nothing.)
		takeAnswered(confirms, outcomes)
	}
	// Every return for an answered message arrived before its answer, so it
	// is in the buffer now.
	p.drainReturnsLocked(cc, index, outcomes)

	switch {
	case blocked:
		// Keep the connection (a new one would be blocked at its first
		// publish too) but not the channel with unanswered publishes.
		p.discardChannelLocked()
		return outcomes, waitErr
	case waitErr != nil:
		p.resetLocked()
		return outcomes, waitErr
	}
	if gone, cause := s.closed(); gone || cc.ch.IsClosed() {
		// Confirms of a closing channel resolve as nacks; report the cause.
		if cause == nil {
			cause = errors.New("channel closed by the broker")
		}
		p.resetLocked()
		return outcomes, fmt.Errorf("rabbitmq connection lost: %w", cause)
	}
	if slices.Contains(outcomes, Nacked) {
		// A channel that registered as a quorum queue's publisher while
		// the queue had no leader (its node had just died) can go on
		// refusing every publish; a fresh channel registers again. Seen on
		// 3.10 after a node's kill -9: every later publish on the old
		// channel was nacked for minutes.
		p.discardChannelLocked()
	}
	return outcomes, nil
}

// declareTiersLocked declares on the current channel the retry tier of
// each retry copy in msgs that the channel has not declared yet. The tier
// of a copy is the delay the dispatcher recorded, which this process's own
// topology may lack (a tier added to the dispatchers' config first). A
// tier the broker refuses to declare (its queue exists with other
// arguments) is returned in refused, and the channel, which the broker
// closed, is given up; any other failure is the whole batch's.
func (p *Publisher) declareTiersLocked(s *session, msgs []webhook.Message) (refused map[time.Duration]bool, err error) {
	for _, m := range msgs {
		if m.Route == "" || m.RetryIn <= 0 || refused[m.RetryIn] {
			continue
		}
		if p.cc == nil {
			if s, err = p.connectLocked(); err != nil {
				return refused, err
			}
		}
		cc := p.cc
		if cc.tiers[m.RetryIn] {
			continue
		}
		tier := p.cfg.Names.TierTopology(m.RetryIn)
		err := s.bounded(p.cfg.ConfirmTimeout, func() error { return tier.Declare(cc.ch) })
		var ae *amqp.Error
		switch {
		case err == nil:
			cc.tiers[m.RetryIn] = true
		case errors.As(err, &ae) && ae.Server && ae.Recover:
			// A channel exception (406: the queue exists with other
			// arguments): this tier's, not the connection's.
			if refused == nil {
				refused = map[time.Duration]bool{}
			}
			refused[m.RetryIn] = true
			p.logger.Error().Err(err).Str("tier", p.cfg.Names.Retry(m.RetryIn)).
				Msg("rabbitmq refused to declare a retry tier; its retry copies wait in the outbox")
			p.discardChannelLocked()
		default:
			return refused, fmt.Errorf("declaring retry tier %s: %w", p.cfg.Names.Retry(m.RetryIn), err)
		}
	}
	return refused, nil
}

// sendLocked publishes every message of a batch on cc without waiting, and
// returns their deferred confirms and the index of each correlation id.
func (p *Publisher) sendLocked(ctx context.Context, cc *confirmChannel, msgs []webhook.Message) ([]*amqp.DeferredConfirmation, map[string]int, error) {
	p.batch++
	confirms := make([]*amqp.DeferredConfirmation, len(msgs))
	index := make(map[string]int, len(msgs))
	for i, m := range msgs {
		// Returns are matched by the outbox row, not the event: one batch
		// may hold several rows of one event (a replay to several routes).
		// The batch number makes the id unique to this publish.
		corr := strconv.FormatUint(p.batch, 10) + "." + strconv.FormatInt(m.OutboxID, 10)
		index[corr] = i
		exchange, key, msg := eventMessage(p.cfg.Exchange, p.cfg.Names, m, corr)
		dc, err := cc.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, msg)
		if err != nil {
			return nil, nil, fmt.Errorf("publishing: %w", err)
		}
		confirms[i] = dc
	}
	return confirms, index, nil
}

// awaitConfirms records the broker's answers in outcomes, in order, until
// every message is answered, the confirm timeout passes, a block begins or
// the connection is lost; it says whether a block stopped it early, and
// why it stopped early.
func (p *Publisher) awaitConfirms(s *session, confirms []*amqp.DeferredConfirmation, outcomes []Outcome) (blocked bool, err error) {
	timer := time.NewTimer(p.cfg.ConfirmTimeout)
	defer timer.Stop()
	for i, dc := range confirms {
		select {
		case <-dc.Done():
		case <-s.block.beginning():
			reason, _ := s.block.current()
			if reason == "" {
				reason = "lifted again"
			}
			return true, fmt.Errorf("waiting for publisher confirms: %w", blockedError(reason))
		case <-s.gone:
			_, cause := s.closed()
			return false, fmt.Errorf("rabbitmq connection lost: %w", cause)
		case <-timer.C:
			return false, fmt.Errorf("waiting for publisher confirms: %w after %s", ErrConfirmTimeout, p.cfg.ConfirmTimeout)
		}
		outcomes[i] = answer(dc)
	}
	return false, nil
}

// takeAnswered records the answers that have arrived for messages still
// Unconfirmed, without waiting.
func takeAnswered(confirms []*amqp.DeferredConfirmation, outcomes []Outcome) {
	for i, dc := range confirms {
		if outcomes[i] != Unconfirmed || dc == nil {
			continue
		}
		select {
		case <-dc.Done():
			outcomes[i] = answer(dc)
		default:
		}
	}
}

// answer is the outcome of an answered confirm.
func answer(dc *amqp.DeferredConfirmation) Outcome {
	if dc.Acked() {
		return Acked
	}
	return Nacked
}

func (p *Publisher) drainReturnsLocked(cc *confirmChannel, index map[string]int, outcomes []Outcome) {
	for {
		select {
		case r, ok := <-cc.returns:
			if !ok {
				return
			}
			if i, mine := index[r.CorrelationId]; mine {
				outcomes[i] = Returned
				// The outbox logs refused rows itself, sparingly; a row
				// that keeps coming back must not log on every try.
				ev := p.logger.Debug().Str("event_id", r.MessageId).Str("routing_key", r.RoutingKey).Str("reply", r.ReplyText)
				if id := tracing.TraceID(headerString(r.Headers, HeaderTraceParent)); id != "" {
					ev = ev.Str("trace_id", id)
				}
				ev.Msg("message returned unroutable")
			}
		default:
			return
		}
	}
}

// Close closes the connection. A later Publish connects again.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sessMu.Lock()
	s := p.sess
	p.sess, p.declared = nil, false
	p.sessMu.Unlock()
	p.cc = nil
	if s == nil {
		return nil
	}
	return closeConn(s.conn)
}
