package amqp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"
)

// ConfirmPublisherConfig configures a ConfirmPublisher.
type ConfirmPublisherConfig struct {
	// Dialer reaches a node of the cluster.
	Dialer *Dialer
	// ConnectionName shows in the management UI.
	ConnectionName string
	// ConfirmTimeout bounds the wait for one publish's confirm.
	ConfirmTimeout time.Duration
	// Blocked, when set, is 1 while the broker blocks the connection.
	Blocked prometheus.Gauge
	Logger  zerolog.Logger
}

// maxIdleChannels is how many confirm channels a ConfirmPublisher keeps
// open between publishes; more concurrent publishes open more, and close
// the extra ones afterwards.
const maxIdleChannels = 64

// ConfirmPublisher publishes single messages, each mandatory, persistent as
// the caller sets it, and confirmed, on a connection of its own. The
// dispatcher publishes dead letters and messages it gives back with it: a
// broker alarm blocks this connection, not the one deliveries are consumed
// and acked on.
//
// Concurrent publishes each take a channel of their own from a pool, so
// they do not wait for each other's confirms. Every publish carries a
// correlation id of its own, and a return counts only for the publish with
// its id. A channel whose confirm did not come in time is discarded, never
// reused, so a late return or confirm is never taken for a later publish's.
//
// It connects on first use and after the connection is lost; it does not
// use amqp091-go's automatic recovery. It is safe for concurrent use.
type ConfirmPublisher struct {
	cfg    ConfirmPublisherConfig
	logger zerolog.Logger

	dialMu sync.Mutex // one dial at a time

	mu     sync.Mutex // guards the fields below
	sess   *session
	idle   []*confirmChannel
	closed bool
}

// NewConfirmPublisher returns a ConfirmPublisher; it does not connect yet.
func NewConfirmPublisher(cfg ConfirmPublisherConfig) *ConfirmPublisher {
	if cfg.ConfirmTimeout <= 0 {
		cfg.ConfirmTimeout = 10 * time.Second
	}
	if cfg.Blocked != nil {
		cfg.Blocked.Set(0)
	}
	return &ConfirmPublisher{cfg: cfg, logger: cfg.Logger.With().Str("component", "amqp_confirm_publisher").Logger()}
}

// session returns the open session, connecting when there is none.
func (p *ConfirmPublisher) session() (*session, error) {
	if s := p.current(); s != nil {
		return s, nil
	}
	p.dialMu.Lock()
	defer p.dialMu.Unlock()
	if s := p.current(); s != nil {
		return s, nil
	}
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return nil, errors.New("publisher closed")
	}
	s, err := openSession(p.cfg.Dialer, p.cfg.ConnectionName, p.cfg.Blocked, p.logger)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = closeConn(s.conn)
		return nil, errors.New("publisher closed")
	}
	p.sess, p.idle = s, nil
	p.logger.Info().Msg("connected to rabbitmq")
	return s, nil
}

// current returns the session if it is open.
func (p *ConfirmPublisher) current() *session {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sess == nil {
		return nil
	}
	if gone, err := p.sess.closed(); gone {
		p.logger.Warn().Err(err).Msg("rabbitmq connection lost")
		p.sess, p.idle = nil, nil
		return nil
	}
	return p.sess
}

// channel takes an idle channel of s, or opens one.
func (p *ConfirmPublisher) channel(s *session) (*confirmChannel, error) {
	p.mu.Lock()
	for p.sess == s && len(p.idle) > 0 {
		cc := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if !cc.ch.IsClosed() {
			p.mu.Unlock()
			return cc, nil
		}
	}
	p.mu.Unlock()
	// One publish in flight per channel: at most one return in the buffer,
	// plus room for a stray one.
	return s.openConfirmChannel(p.cfg.ConfirmTimeout, 2, nil)
}

// putBack returns a clean channel (every publish on it answered) to the
// pool.
func (p *ConfirmPublisher) putBack(s *session, cc *confirmChannel) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sess != s || cc.ch.IsClosed() || len(p.idle) >= maxIdleChannels {
		cc.discard()
		return
	}
	p.idle = append(p.idle, cc)
}

// Publish publishes msg to exchange with key (mandatory) and waits up to
// the confirm timeout for the broker's answer. It returns nil only when the
// broker confirmed the message and did not return it. While the broker
// blocks the connection it fails at once with ErrBlocked (see Blocked). A
// block that begins while it waits pauses the confirm timeout: the broker
// reads and confirms the message once the block lifts, and waiting for that
// beats publishing it again. ctx bounds that wait and ends any wait early.
// It sets msg.CorrelationId to an id of its own.
func (p *ConfirmPublisher) Publish(ctx context.Context, exchange, key string, msg amqp.Publishing) error {
	s, err := p.session()
	if err != nil {
		return err
	}
	if reason, _ := s.block.current(); reason != "" {
		return blockedError(reason)
	}
	cc, err := p.channel(s)
	if err != nil {
		return err
	}
	corr := uuid.NewString()
	msg.CorrelationId = corr
	dc, err := cc.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, msg)
	if err != nil {
		cc.discard()
		return fmt.Errorf("publishing to %q with key %q: %w", exchange, key, err)
	}
	if err := p.wait(ctx, s, dc); err != nil {
		cc.discard()
		return fmt.Errorf("publish to %q with key %q: %w", exchange, key, err)
	}
	// The broker sends a message's return before its ack, and the
	// connection's reader hands the return over before it reads the ack: a
	// return of this publish is in the buffer now.
	returned := p.takeReturn(cc, corr)
	if cc.ch.IsClosed() {
		// A channel error (say, the exchange does not exist) nacks every
		// pending confirm; the channel cannot be reused.
		cc.discard()
		return fmt.Errorf("publish to %q with key %q: %w", exchange, key, cc.closeReason())
	}
	if !dc.Acked() {
		// A quorum queue's channel that registered as a publisher while
		// the queue had no leader (its node just died) can go on refusing
		// every publish (rabbitmq-server#15333 has the same root); a
		// fresh channel registers again.
		cc.discard()
		return fmt.Errorf("publish to %q with key %q nacked by the broker", exchange, key)
	}
	p.putBack(s, cc)
	if returned != nil {
		return fmt.Errorf("publish to %q with key %q returned: %s (%w)", exchange, key, returned.ReplyText, webhook.ErrUnroutable)
	}
	return nil
}

// closeReason says why the broker closed cc: its words, and
// webhook.ErrUnroutable for a missing exchange (404) or a refused
// permission (403). The reason follows the close at once; it is waited
// for briefly.
func (cc *confirmChannel) closeReason() error {
	select {
	case e, ok := <-cc.closes:
		if ok && e != nil {
			if e.Code == amqp.NotFound || e.Code == amqp.AccessRefused {
				return fmt.Errorf("channel closed by the broker: %s (%w)", e.Reason, webhook.ErrUnroutable)
			}
			return fmt.Errorf("channel closed by the broker: %s", e.Reason)
		}
	case <-time.After(100 * time.Millisecond):
	}
	return errors.New("channel closed by the broker")
}

// wait waits for dc's answer: up to the confirm timeout, not counting time
// the broker blocks the connection (it has perhaps not read the message yet,
// and answers once the block lifts), until ctx ends or the connection is
// lost.
func (p *ConfirmPublisher) wait(ctx context.Context, s *session, dc *amqp.DeferredConfirmation) error {
	timer := time.NewTimer(p.cfg.ConfirmTimeout)
	defer timer.Stop()
	paused := false
	for {
		reason, lifted := s.block.current()
		switch {
		case reason != "" && !paused:
			timer.Stop()
			paused = true
			p.logger.Debug().Str("reason", reason).Msg("rabbitmq blocks publishing; waiting for the block to lift")
		case reason == "" && paused:
			timer.Reset(p.cfg.ConfirmTimeout)
			paused = false
		}
		var began <-chan struct{}
		var expired <-chan time.Time
		if paused {
			began = nil
		} else {
			lifted, began, expired = nil, s.block.beginning(), timer.C
		}
		select {
		case <-dc.Done():
			return nil
		case <-began:
		case <-lifted:
		case <-s.gone:
			_, cause := s.closed()
			return fmt.Errorf("unconfirmed, connection lost: %w", cause)
		case <-ctx.Done():
			if paused {
				return fmt.Errorf("unconfirmed: %w (%w: %s)", ctx.Err(), ErrBlocked, reason)
			}
			return fmt.Errorf("unconfirmed: %w", ctx.Err())
		case <-expired:
			return fmt.Errorf("no confirm within %s", p.cfg.ConfirmTimeout)
		}
	}
}

// takeReturn drains cc's buffered returns and gives back the one of the
// publish with correlation id corr, if any.
func (p *ConfirmPublisher) takeReturn(cc *confirmChannel, corr string) *amqp.Return {
	var mine *amqp.Return
	for {
		select {
		case r, ok := <-cc.returns:
			if !ok {
				return mine
			}
			if r.CorrelationId == corr {
				mine = &r
				continue
			}
			// Not possible while channels with unanswered publishes are
			// discarded; never blamed on this publish either way.
			p.logger.Warn().Str("routing_key", r.RoutingKey).Str("reply", r.ReplyText).
				Msg("ignoring a return of an earlier publish")
		default:
			return mine
		}
	}
}

// Blocked returns nil while the broker is not known to block publishing,
// and while it blocks the connection a channel that is closed when the
// block lifts or the connection is lost.
func (p *ConfirmPublisher) Blocked() <-chan struct{} {
	s := p.current()
	if s == nil {
		return nil
	}
	reason, lifted := s.block.current()
	if reason == "" {
		return nil
	}
	return lifted
}

// Ping connects if needed and reports whether the connection is open: nil,
// ErrBlocked (wrapped) while the broker blocks it, or the connection error.
func (p *ConfirmPublisher) Ping(context.Context) error {
	s, err := p.session()
	if err != nil {
		return err
	}
	if reason, _ := s.block.current(); reason != "" {
		return blockedError(reason)
	}
	return nil
}

// Close closes the connection; Publish fails afterwards. A publish still
// waiting ends with the connection.
func (p *ConfirmPublisher) Close() error {
	p.dialMu.Lock()
	defer p.dialMu.Unlock()
	p.mu.Lock()
	s := p.sess
	p.sess, p.idle, p.closed = nil, nil, true
	p.mu.Unlock()
	if s == nil {
		return nil
	}
	return closeConn(s.conn)
}

// GiveBack publishes a copy of d, a message consumed from queue, back to
// queue through the default exchange, confirmed, as Publish does: the
// caller then acks d. The copy has d's body, properties and headers but
// RabbitMQ's x-delivery-count (it is a new message, whose deliveries count
// from zero) and its user-id (the broker checks it against the publishing
// connection's user).
func (p *ConfirmPublisher) GiveBack(ctx context.Context, queue string, d amqp.Delivery) error {
	headers := amqp.Table{}
	for k, v := range d.Headers {
		if k != "x-delivery-count" {
			headers[k] = v
		}
	}
	return p.Publish(ctx, "", queue, amqp.Publishing{
		Headers: headers, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding,
		DeliveryMode: amqp.Persistent, Priority: d.Priority, ReplyTo: d.ReplyTo, Expiration: d.Expiration,
		MessageId: d.MessageId, Timestamp: d.Timestamp, Type: d.Type, AppId: d.AppId, Body: d.Body,
	})
}
