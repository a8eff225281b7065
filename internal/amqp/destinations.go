package amqp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/hookrelay/hookrelay/internal/webhook"
)

// DestinationsConfig configures Destinations.
type DestinationsConfig struct {
	// ConnectionName shows in the destination broker's management UI.
	ConnectionName string
	// GuardControl is the socket control of a guarded publication's
	// dials (a team's route): netguard's, refusing the relay's own side.
	// Nil refuses every guarded dial.
	GuardControl func(network, address string, c syscall.RawConn) error
	// Resolver resolves the destinations' names; nil is the system's.
	Resolver *net.Resolver
	Logger   zerolog.Logger
}

// Destinations publishes the deliveries of amqp routes to their brokers:
// one connection per destination broker (its URL, and whether it is a
// team's), shared by every consumer of every route that publishes there,
// each publish on a confirm channel of its own from the connection's pool
// (ConfirmPublisher). A publish is persistent and mandatory, and succeeds
// only when the broker confirmed it and did not return it. Safe for
// concurrent use.
type Destinations struct {
	cfg DestinationsConfig

	mu     sync.Mutex
	pubs   map[destKey]*ConfirmPublisher
	closed bool
}

type destKey struct {
	url     string
	guarded bool
}

// NewDestinations returns Destinations; it connects on each
// destination's first publish.
func NewDestinations(cfg DestinationsConfig) *Destinations {
	if cfg.GuardControl == nil {
		cfg.GuardControl = func(string, string, syscall.RawConn) error {
			return errors.New("destination refused: no guard configured")
		}
	}
	return &Destinations{cfg: cfg, pubs: map[destKey]*ConfirmPublisher{}}
}

// publisher returns the publisher of p's destination, made on first use.
func (d *Destinations) publisher(p webhook.Publication) (*ConfirmPublisher, error) {
	k := destKey{p.URL, p.Guarded}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, errors.New("destinations closed")
	}
	if pub := d.pubs[k]; pub != nil {
		return pub, nil
	}
	dc := DialerConfig{URLs: []string{p.URL}, Resolver: d.cfg.Resolver, Logger: d.cfg.Logger}
	if p.Guarded {
		dc.Control = d.cfg.GuardControl
	}
	dialer, err := NewDialer(dc)
	if err != nil {
		return nil, errors.New("the route's url is not a valid amqp:// URL")
	}
	pub := NewConfirmPublisher(ConfirmPublisherConfig{
		Dialer:         dialer,
		ConnectionName: d.cfg.ConnectionName,
		// The delivery's context bounds the wait (the route's timeout).
		ConfirmTimeout: 10 * time.Minute,
		Logger:         d.cfg.Logger,
	})
	d.pubs[k] = pub
	return pub, nil
}

// Publish publishes p and waits for the destination broker's confirm,
// bounded by ctx. It fails with webhook.ErrUnroutable when the exchange is
// missing, the message was returned, or the broker refused the user; with
// another error when the broker could not be reached or did not confirm.
// No error carries the URL's credentials.
func (d *Destinations) Publish(ctx context.Context, p webhook.Publication) error {
	pub, err := d.publisher(p)
	if err != nil {
		return err
	}
	headers := make(amqp.Table, len(p.Headers))
	for k, v := range p.Headers {
		headers[k] = v
	}
	err = pub.Publish(ctx, p.Exchange, p.RoutingKey, amqp.Publishing{
		DeliveryMode: amqp.Persistent,
		MessageId:    p.MessageID,
		ContentType:  p.ContentType,
		Type:         p.Type,
		Timestamp:    p.Timestamp,
		AppId:        "hookrelay",
		Headers:      headers,
		Body:         p.Body,
	})
	if errors.Is(err, ErrRefused) {
		// The broker refused the login or the vhost: the route's
		// settings, not the broker's health.
		return fmt.Errorf("%w: the destination broker refused the connection (its credentials, vhost or permissions)", webhook.ErrUnroutable)
	}
	return err
}

// Close closes every destination's connection.
func (d *Destinations) Close() error {
	d.mu.Lock()
	pubs := d.pubs
	d.pubs, d.closed = nil, true
	d.mu.Unlock()
	var errs []error
	for _, p := range pubs {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}

// Forget closes the connections to destinations no route publishes to
// any more; in holds the URLs still in use.
func (d *Destinations) Forget(in map[string]bool) {
	d.mu.Lock()
	var gone []*ConfirmPublisher
	for k, p := range d.pubs {
		if !in[k.url] {
			gone = append(gone, p)
			delete(d.pubs, k)
		}
	}
	d.mu.Unlock()
	for _, p := range gone {
		if err := p.Close(); err != nil {
			d.cfg.Logger.Debug().Err(err).Msg("closing a destination broker's connection")
		}
	}
}
