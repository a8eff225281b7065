// Package deliver is the dispatcher's handler: for one message of a route
// queue it claims the (event, route) delivery in Postgres with a lease
// (see lease.go), skips it if it was already delivered, POSTs the event to
// the route's URL with Standard Webhooks headers holding no database
// connection, and records the attempt. A success is then done; a failure
// to retry is done too, because its record puts the retry copy in the
// outbox in the same statement (the outbox relay publishes it to the
// retry tier); a last failure is parked in the route's dead-letter queue.
// The caller acks only when Handle returns nil, so every outcome is stored
// (and a dead letter's publish confirmed) before the ack.
package deliver

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/backoff"
	"github.com/hookrelay/hookrelay/internal/outgoing"
	"github.com/hookrelay/hookrelay/internal/rule"
	"github.com/hookrelay/hookrelay/internal/tracing"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Lease is a claimed (event, route) delivery. It holds no database
// connection: while it is live no other claim takes the pair, and every
// write of its holder is fenced by it.
type Lease interface {
	State() webhook.DeliveryState
	// Gen is the generation of the pair's current copy; only a message of
	// that generation is delivered.
	Gen() int64
	// Restart starts a new attempt series for a dead pair (its dead letter
	// was moved back by an operator) and returns the new generation; the
	// lease stays held.
	Restart(ctx context.Context) (int64, error)
	// Record stores the attempt and the pair's new state and releases the
	// lease, at once, and returns the pair's generation afterwards (a
	// retry's copy is a new generation). The state changes only if the
	// pair is still at a.Gen (a replay may have moved it on meanwhile):
	// current says so. A lease taken over meanwhile fails with
	// webhook.ErrLeaseLost: the attempt is stored as lost, nothing else.
	Record(ctx context.Context, a *webhook.Attempt) (gen int64, current bool, err error)
	// Release gives the lease back without recording.
	Release(ctx context.Context) error
}

// Store is what delivery needs from Postgres.
type Store interface {
	// DeliveryClaim claims the pair for attempt, made by the copy of
	// generation gen, with a lease of ttl. A delivered pair, or one at
	// another generation (the copy is stale), is returned unclaimed (State
	// and Gen say so; Release does nothing); a pair in flight elsewhere
	// fails with a *webhook.LeaseBusyError; a purged event with
	// webhook.ErrEventMissing (and webhook.ErrEventPurged when its dedupe
	// key says it was stored once).
	// owner names the claimant: a lease that owner holds already is taken
	// again, so a claim whose answer was lost (its deadline passed after
	// Postgres had taken the lease) is not then kept waiting for itself.
	DeliveryClaim(ctx context.Context, owner uuid.UUID, eventID uuid.UUID, route string, attempt int, gen int64, ttl time.Duration) (Lease, error)
}

// LaneStore is what routes that deliver in order need from Postgres.
type LaneStore interface {
	// DeliveryClaimInOrder is DeliveryClaim for a route with ordering
	// fifo: a pair whose resource has an earlier pair still owed, or one
	// in flight, is parked and the claim fails with webhook.ErrWaiting
	// (the copy is done with: the record that frees its resource sends
	// the pair a new one). skipDead: the route's dead pairs free their
	// resource (on_dead skip) instead of holding it.
	DeliveryClaimInOrder(ctx context.Context, owner uuid.UUID, eventID uuid.UUID, route string, attempt int, gen int64, ttl time.Duration, skipDead bool) (Lease, error)
}

// HandOver is a Lease claimed in order (LaneStore) whose record can hand
// its holder the resource's next event, so that a resource's events go
// one after another from one dispatcher, without a copy through the
// outbox and the broker between two of them (docs/ordering.md).
type HandOver interface {
	// HandOver asks Record, when its outcome frees the resource, to claim
	// the resource's next event for the same holder, with a lease of ttl,
	// instead of sending it a copy. That event's copy waits in the outbox
	// until the lease runs out: if the holder stops before its record, the
	// copy delivers it.
	HandOver(ttl time.Duration)
	// Next returns, once, the event Record handed over: its lease and its
	// message, addressed to the route. ok is false when none was.
	Next() (lease Lease, m webhook.Message, ok bool)
}

// handOverFor bounds how long a delivery goes on with the events of its
// resource that records hand over (HandOver), from its message's start:
// after it, the next one's copy goes through the route's queue, where
// the other resources' copies waiting get their turn.
const handOverFor = 10 * time.Second

// RuleStore is what routes with rules need from Postgres.
type RuleStore interface {
	// DeliveryExists reports whether the (event, route) pair exists.
	DeliveryExists(ctx context.Context, eventID uuid.UUID, route string) (bool, error)
	// EventHeaders returns the event's stored headers;
	// webhook.ErrEventMissing when it was purged.
	EventHeaders(ctx context.Context, eventID uuid.UUID) (http.Header, error)
}

// Publisher publishes a message's dead letter and waits, bounded, for the
// broker's confirm: nil means confirmed and routed. (A retry copy needs no
// publish here: it goes into the outbox with the record of the attempt.)
type Publisher interface {
	// DeadLetter parks m in its route's dead-letter queue, saying why.
	DeadLetter(ctx context.Context, m webhook.RouteMessage, why webhook.DeadLetter) error
	// Blocked returns nil while the broker accepts publishes. While it
	// blocks them (a memory or disk alarm), it returns a channel that is
	// closed when the block lifts.
	Blocked() <-chan struct{}
}

// Route is one destination.
type Route struct {
	Name        string
	URL         string
	Timeout     time.Duration
	Headers     map[string]string
	NoRetry     map[int]bool
	MaxAttempts int
	// SigningKeys sign each delivery; every key adds a signature.
	SigningKeys [][]byte
	// PreviousKey signs too, after them, until PreviousUntil: a rotated
	// secret's overlap.
	PreviousKey   []byte
	PreviousUntil time.Time
	// DeadLetterAll moves every message to the route's dead letters
	// without a POST (reason route_deleted): a deleted route whose
	// backlog goes there.
	DeadLetterAll bool
	// DropStale records an event stale instead of POSTing it when a newer
	// version of its resource was delivered on the route (ordering:
	// drop_stale).
	DropStale bool
	// InOrder delivers the events of one resource one at a time, in the
	// order they were accepted (ordering: fifo): a pair waits while an
	// earlier one of its resource is owed or in flight. SkipDead lets a
	// dead pair free its resource (on_dead: skip); otherwise it holds it
	// until an operator requeues it.
	InOrder, SkipDead bool
	// NoTraceparent keeps the trace context out of the route's requests
	// (send_traceparent: false); otherwise, when tracing, each carries
	// traceparent, so the destination's own spans join the event's trace.
	NoTraceparent bool
	// Guarded: a team's route made at run time. Its POSTs go through
	// Config.GuardedClient, whose dialer refuses the relay's own side, and
	// a failure below HTTP is recorded by its kind only, never with an
	// address, a port or the system's words (the team reads its attempts).
	Guarded bool
	// Filtered: the route has a filter. Its pairs are made only where the
	// filter took the event, and its copies come addressed to it; a copy
	// that is not (a pattern binding left from before the filter) and has
	// no pair is acked without a POST.
	Filtered bool
	// Transform shapes each request from the event (docs/rules.md); nil
	// sends the event's body as received. A transformation that fails on
	// an event fails its attempt with reason transform_error, without a
	// POST, and the pair goes to the dead letters at once: it would fail
	// the same way on every try.
	Transform *rule.Transform
	// Version is the route's version (a run-time route's; 0 for one of
	// config.yaml), recorded with each attempt as the one that shaped it.
	Version int64
	// Exchange, when set, makes the route publish each event into an
	// exchange on the broker at URL (a route of kind amqp) instead of
	// POSTing it: delivered means confirmed and not returned.
	Exchange *Exchange

	// spanName and postAttrs are its spans' name and its POST span's
	// attributes, set by SetRoutes (trace.go).
	spanName  string
	postAttrs []attribute.KeyValue
}

// Exchange is where a route of kind amqp publishes: the exchange, and the
// routing key made from each event.
type Exchange struct {
	Name string
	Key  *outgoing.KeyTemplate
}

// Exchanges publishes the deliveries of routes of kind amqp
// (internal/amqp's Destinations): nil only when the destination broker
// confirmed the message and did not return it; webhook.ErrUnroutable when
// it would not take it as addressed.
type Exchanges interface {
	Publish(ctx context.Context, p webhook.Publication) error
}

// Tier is a retry tier.
type Tier struct {
	// Name labels the tier in metrics, e.g. "10s".
	Name  string
	Delay time.Duration
}

// Config configures a Handler.
type Config struct {
	Routes []Route
	// Tiers are ordered by attempt: a failed attempt n goes to tier n-1 (the
	// last tier repeats).
	Tiers     []Tier
	Store     Store
	Publisher Publisher
	Client    *http.Client
	// GuardedClient makes the deliveries of guarded routes: a client
	// whose dialer refuses the relay's own side (NewGuardedClient with a
	// netguard.Guard's Control). Nil refuses every such dial.
	GuardedClient *http.Client
	// Exchanges publishes for routes with an Exchange. Required when any
	// route has one.
	Exchanges Exchanges
	Metrics   *Metrics
	Logger    zerolog.Logger
	// NowFunc is the clock; time.Now when nil.
	NowFunc func() time.Time
	// StoreRetryFor bounds how long a Postgres failure is retried while the
	// message is held unacked. Holding does not count as a redelivery, so a
	// Postgres outage does not push messages toward the delivery limit; it
	// stays well under RabbitMQ's 30-minute consumer timeout. Default 10m.
	StoreRetryFor time.Duration
	// PublishHoldFor bounds how long a message whose outcome needs a
	// publish (a dead letter) is held while the broker blocks publishing
	// (a resource alarm): no requeue loop meanwhile. After it, the message
	// is requeued. Default 10m, well under RabbitMQ's 30-minute consumer
	// timeout.
	PublishHoldFor time.Duration
	// Ordering serves the stale check of routes with DropStale; nil turns
	// the check off.
	Ordering OrderingStore
	// Lanes serves the claims of routes that deliver in order. Required
	// when any route does.
	Lanes LaneStore
	// Rules serves routes with a filter or a transformation: whether a
	// pair exists, and an event's headers for a transformation that reads
	// them. Required when any route has either.
	Rules RuleStore
	// ObserveFunc, when set, is told each HTTP attempt's answer (status 0:
	// none came) and its Retry-After, before the outcome is recorded and
	// the message acked: the route controls count it (internal/control).
	ObserveFunc func(ctx context.Context, route string, status int, retryAfter time.Duration)
	// AfterRecordFunc, when set, runs after an attempt's outcome is
	// recorded and before anything else (a dead letter's publish, the
	// ack), with the outcome. Tests use it to kill the process there.
	AfterRecordFunc func(outcome webhook.DeliveryState)
	// LeaseMargin is added to a route's timeout for the lease a delivery
	// holds on its pair: it covers the claim, the request's set-up and the
	// record after the answer. A dispatcher killed mid-POST leaves a lease
	// that expires after the route's timeout plus this. Default 10s.
	LeaseMargin time.Duration
	// Tracer, when set, traces each delivery (see trace.go), its POST
	// included.
	Tracer trace.Tracer
	// Handed reads a message handed over by a record (HandOver) as a
	// consumer of its route's queue would read it, had it been published
	// there. Nil: no hand-over, each next event's copy goes through the
	// queue.
	Handed func(webhook.Message) webhook.RouteMessage
}

// Handler delivers messages.
type Handler struct {
	cfg    Config
	mu     sync.RWMutex
	routes map[string]*Route
	logger zerolog.Logger
	now    func() time.Time

	// storeFailedAt is when a delivery last failed to reach Postgres
	// (unix nanoseconds), and holding counts the deliveries holding their
	// message while they retry: see LastStoreFailure.
	storeFailedAt atomic.Int64
	holding       atomic.Int32

	// bodies keeps the latest events' bodies parsed for transformations:
	// an event bound to several routes with one is parsed once.
	bodies bodyCache
	// handed are the generations of the pairs handed over (HandOver):
	// their older copies are dropped without a claim.
	handed handedGens
}

// LastStoreFailure is when a delivery of this handler last failed to reach
// Postgres, or now while one holds its message retrying: until its claim
// or record lands, its pair looks undelivered and not in flight, while its
// copy is in hand. Zero if none ever failed.
func (h *Handler) LastStoreFailure() time.Time {
	if h.holding.Load() > 0 {
		return h.now()
	}
	if n := h.storeFailedAt.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// New returns a Handler.
func New(cfg Config) (*Handler, error) {
	if cfg.Store == nil || cfg.Publisher == nil || cfg.Metrics == nil || len(cfg.Tiers) == 0 {
		return nil, errors.New("deliver: Store, Publisher, Metrics and at least one Tier are required")
	}
	if cfg.Client == nil {
		cfg.Client = NewClient()
	}
	if cfg.GuardedClient == nil {
		cfg.GuardedClient = NewGuardedClient(refuseEvery, nil)
	}
	if cfg.StoreRetryFor == 0 {
		cfg.StoreRetryFor = 10 * time.Minute
	}
	if cfg.PublishHoldFor == 0 {
		cfg.PublishHoldFor = 10 * time.Minute
	}
	if cfg.LeaseMargin == 0 {
		cfg.LeaseMargin = 10 * time.Second
	}
	h := &Handler{cfg: cfg, routes: map[string]*Route{}, logger: cfg.Logger.With().Str("component", "deliver").Logger(), now: cfg.NowFunc}
	if h.now == nil {
		h.now = time.Now
	}
	if err := h.SetRoutes(cfg.Routes); err != nil {
		return nil, err
	}
	return h, nil
}

// SetRoutes replaces the routes delivered to; a delivery under way keeps
// the settings it started with.
func (h *Handler) SetRoutes(routes []Route) error {
	m := make(map[string]*Route, len(routes))
	for i := range routes {
		r := routes[i]
		if r.MaxAttempts < 1 || r.Timeout <= 0 || len(r.SigningKeys) == 0 {
			return fmt.Errorf("deliver: route %q needs MaxAttempts, Timeout and a signing key", r.Name)
		}
		if r.InOrder && h.cfg.Lanes == nil {
			return fmt.Errorf("deliver: route %q delivers in order, and the handler has no Lanes store", r.Name)
		}
		if (r.Filtered || r.Transform != nil) && h.cfg.Rules == nil {
			return fmt.Errorf("deliver: route %q has rules, and the handler has no Rules store", r.Name)
		}
		if r.Exchange != nil && (h.cfg.Exchanges == nil || r.Exchange.Key == nil) {
			return fmt.Errorf("deliver: route %q publishes to an exchange, and the handler has no Exchanges (or the route no routing key)", r.Name)
		}
		r.traced()
		m[r.Name] = &r
	}
	h.mu.Lock()
	h.routes = m
	h.mu.Unlock()
	return nil
}

// signingKeys are the keys that sign a delivery made at now.
func (r *Route) signingKeys(now time.Time) [][]byte {
	if r.PreviousKey == nil || !now.Before(r.PreviousUntil) {
		return r.SigningKeys
	}
	return append(r.SigningKeys[:len(r.SigningKeys):len(r.SigningKeys)], r.PreviousKey)
}

// NewClient returns the HTTP client for deliveries: it does not follow
// redirects (a 3xx is a failed attempt, its Location recorded in the
// response headers), bounds connection setup, and reads at most
// MaxResponseHeaderBytes of response headers.
func NewClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	tr.ResponseHeaderTimeout = 0 // each request has its own deadline
	tr.MaxResponseHeaderBytes = MaxResponseHeaderBytes
	return &http.Client{
		Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// NewGuardedClient is NewClient for guarded routes: its dialer resolves
// names with resolver (nil: the system's) and calls control with each
// address before connecting to it (net.Dialer.Control), so a guard
// refuses the relay's own side even for a name that resolved elsewhere
// when the route was saved. It uses no proxy: a proxy would resolve and
// connect where the guard cannot see. Its connections are its own, never
// shared with NewClient's.
func NewGuardedClient(control func(network, address string, c syscall.RawConn) error, resolver *net.Resolver) *http.Client {
	c := NewClient()
	tr := c.Transport.(*http.Transport)
	// As http.DefaultTransport's dialer, with the guard.
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: control, Resolver: resolver}
	tr.DialContext = d.DialContext
	tr.Proxy = nil
	return c
}

// refuseEvery is the guard of a Handler given no GuardedClient.
func refuseEvery(string, string, syscall.RawConn) error {
	return errors.New("destination refused: no guard configured")
}

// Handle delivers one message of route's queue. It returns nil when the
// outcome is stored and any republish confirmed: the caller then acks. Any
// error means "do not ack". Waits for a dependency (Postgres down, the
// broker blocking publishes) end early when stopping closes. Cancelling ctx
// aborts the delivery: an HTTP attempt in flight is cancelled and nothing
// is recorded for it.
func (h *Handler) Handle(ctx context.Context, route string, msg webhook.RouteMessage, stopping <-chan struct{}) error {
	return h.HandleThen(ctx, route, msg, stopping, nil)
}

// HandleThen is Handle, and then, on a route that delivers in order, the
// events of msg's resource that each record handed over (HandOver), one
// after another, each once admit lets it (nil: at once), for up to
// handOverFor, while stopping is open. Their outcomes are their own:
// once msg's outcome is stored, HandleThen returns nil, and a next event
// that fails (or that admit or stopping turns away) is given back, its
// copy sent through the route's queue at once.
func (h *Handler) HandleThen(ctx context.Context, route string, msg webhook.RouteMessage, stopping <-chan struct{}, admit func(context.Context) error) error {
	start := time.Now()
	next, err := h.handle(ctx, route, msg, stopping, nil, true)
	for next != nil {
		if err != nil {
			h.giveBack(ctx, route, next)
			return err
		}
		lease, m := next.lease, next.msg
		if isClosed(stopping) {
			h.giveBack(ctx, route, next)
			return nil
		}
		if admit != nil {
			if aerr := admit(ctx); aerr != nil {
				h.giveBack(ctx, route, next)
				h.logger.Debug().Err(aerr).Str("route", route).Msg("the resource's next event handed over, not admitted; its copy goes through the queue")
				return nil
			}
		}
		var serr error
		next, serr = h.handle(ctx, route, h.cfg.Handed(m), stopping, lease, time.Since(start) < handOverFor)
		if serr != nil {
			// The event's held copy goes now (a record that committed
			// deleted it: then nothing is sent).
			h.giveBack(ctx, route, &handed{lease: lease, msg: m})
			h.logger.Warn().Err(serr).Str("route", route).Stringer("event_id", m.EventID).
				Msg("delivering the resource's next event, handed over, failed; its copy goes through the queue")
			err = nil
			if next != nil {
				h.giveBack(ctx, route, next)
				next = nil
			}
		}
	}
	return err
}

// handed is an event a record handed over: its lease and message.
type handed struct {
	lease Lease
	msg   webhook.Message
}

// giveBack releases a lease handed over, which sends its copy through the
// route's queue at once.
func (h *Handler) giveBack(ctx context.Context, route string, n *handed) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := n.lease.Release(rctx); err != nil {
		h.logger.Warn().Err(err).Str("route", route).Stringer("event_id", n.msg.EventID).
			Msg("giving back an event handed over failed; its copy goes when its lease runs out")
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// handle delivers msg, with held its pair's lease when a record handed it
// over (nil: it is claimed), and returns the event of its resource that
// its record handed over when handOver asks for one.
func (h *Handler) handle(ctx context.Context, route string, msg webhook.RouteMessage, stopping <-chan struct{}, held Lease, handOver bool) (next *handed, err error) {
	h.mu.RLock()
	r, ok := h.routes[route]
	h.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("no route %q", route)
	}
	d := &delivery{Handler: h, route: r, msg: msg, stop: stopping, log: h.logger.With().Str("route", route).Logger()}
	if msg.Malformed != nil {
		// Nothing to deliver or record against: park it for an operator.
		d.log.Error().Err(msg.Malformed).Str("message_id", msg.Wire.MessageID).Msg("malformed message; dead-lettering")
		return nil, d.deadLetter(ctx, "malformed", &webhook.Attempt{Route: route, StartedAt: h.now(), Error: msg.Malformed.Error()})
	}
	d.log = d.log.With().Stringer("event_id", msg.EventID).Int("attempt", msg.Attempt).Logger()
	ctx, end := d.startDelivery(ctx)
	defer end()
	if r.Filtered && !msg.Addressed {
		if done, err := d.notAddressed(ctx); done || err != nil {
			return nil, err
		}
	}

	if held == nil && r.InOrder && h.handed.stale(route, msg.EventID, msg.Gen) {
		// Its pair was handed over, at a newer generation, by a record of
		// this handler: nothing to ask Postgres.
		d.cfg.Metrics.outcome(route, "superseded")
		d.log.Debug().Int64("gen", msg.Gen).Msg("stale copy of a pair handed over; dropped without a POST")
		return nil, nil
	}
	lease := held
	if lease == nil {
		err = d.timed("claim", func() (err error) {
			lease, err = d.claim(ctx)
			return err
		})
	}
	if errors.Is(err, webhook.ErrWaiting) {
		// An earlier event of its resource is owed or in flight: the
		// pair is parked, and gets a new copy when its turn comes.
		d.cfg.Metrics.outcome(route, "waiting")
		d.log.Debug().Msg("an earlier event of its resource goes first; parked")
		return nil, nil
	}
	if errors.Is(err, webhook.ErrEventPurged) && !msg.MovedBack {
		// Purge keeps every event with a pair still to deliver (pending,
		// retrying, dead unless --include-dead), so the pairs of a purged
		// event were all final, and this copy is a stale one (a duplicate
		// whose ack was lost, a retry copy late from its tier), or one
		// routed to a route that never recorded a pair for it: nothing is
		// owed. Dead-lettering it would report a failure that did not
		// happen.
		d.cfg.Metrics.outcome(route, "superseded")
		d.log.Warn().Int64("gen", msg.Gen).Msg("event purged, so every pair of it was final: stale copy dropped without a POST")
		return nil, nil
	}
	if errors.Is(err, webhook.ErrEventMissing) {
		// A dead letter an operator moved back whose event was purged
		// since (purge --include-dead), or a message of an event never
		// stored (or purged longer ago than the dedupe window): retrying
		// cannot help, and delivering without a record would break the
		// at-most-once promise: park it for an operator.
		d.log.Error().Err(err).Msg("event purged; dead-lettering")
		return nil, d.deadLetter(ctx, "event_missing", &webhook.Attempt{
			Route: route, Number: msg.Attempt, StartedAt: h.now(), Error: "event purged from the database",
		})
	}
	if err != nil {
		return nil, err
	}
	if done, err := d.current(ctx, lease); done || err != nil {
		return nil, err
	}
	if done, err := d.stale(ctx, lease); done || err != nil {
		return nil, err
	}
	var attempt *webhook.Attempt
	var tier int
	var deadReason string
	if r.DeadLetterAll {
		attempt = &webhook.Attempt{EventID: msg.EventID, Route: route, Number: msg.Attempt, StartedAt: h.now(), Gen: msg.Gen,
			Error: "route deleted: its backlog goes to its dead letters", Outcome: webhook.StateDead}
		deadReason = "route_deleted"
	} else {
		req, shapeErr := d.shape(ctx)
		if shapeErr == nil && r.Exchange != nil {
			d.key, shapeErr = d.routingKey()
		}
		var evalErr *rule.EvalError
		switch {
		case errors.Is(shapeErr, outgoing.ErrKey):
			// The event lacks what its routing key is made of: no
			// publish, and no retry (it would fail the same way).
			attempt = &webhook.Attempt{EventID: msg.EventID, Route: route, Number: msg.Attempt, StartedAt: h.now(), Gen: msg.Gen,
				Error: "routing_key_error: " + shapeErr.Error(), Outcome: webhook.StateDead}
			deadReason = "routing_key_error"
			h.cfg.Metrics.outcome(route, "routing_key_error")
		case errors.As(shapeErr, &evalErr):
			// The expression fails on this event: no POST, and no retry
			// (it would fail the same way); an operator fixes the route
			// and requeues the dead letter.
			attempt = &webhook.Attempt{EventID: msg.EventID, Route: route, Number: msg.Attempt, StartedAt: h.now(), Gen: msg.Gen,
				Error: "transform_error: " + evalErr.Error(), Outcome: webhook.StateDead}
			deadReason = "transform_error"
			h.cfg.Metrics.outcome(route, "transform_error")
		case shapeErr != nil:
			// Postgres (the event's headers): not acked, tried again.
			if rerr := lease.Release(ctx); rerr != nil {
				d.log.Warn().Err(rerr).Msg("releasing delivery lease")
			}
			return nil, shapeErr
		default:
			var retryAfter time.Duration
			if attempt, retryAfter, err = d.attempt(ctx, lease, req); err != nil {
				return nil, err
			}
			if h.cfg.ObserveFunc != nil {
				h.cfg.ObserveFunc(ctx, route, d.observed(attempt), retryAfter)
			}
			tier, deadReason = d.decide(attempt, retryAfter)
		}
	}
	attempt.RouteVersion = r.Version
	attempt.FirstAttemptAt = msg.FirstAttemptAt
	attempt.TraceParent = tracing.Of(ctx).Parent
	d.outcome(attempt, deadReason)
	hand, _ := lease.(HandOver)
	if hand != nil && handOver && r.InOrder && h.cfg.Handed != nil && !isClosed(d.stop) {
		hand.HandOver(d.leaseTTL())
	}
	var done bool
	err = d.timed("record", func() (err error) {
		done, err = d.record(ctx, lease, attempt)
		return err
	})
	if hand != nil {
		if l, m, ok := hand.Next(); ok {
			next = &handed{lease: l, msg: m}
			h.handed.add(route, m.EventID, m.Gen)
		}
	}
	if done || err != nil {
		return next, err
	}
	if h.cfg.AfterRecordFunc != nil {
		h.cfg.AfterRecordFunc(attempt.Outcome)
	}
	switch attempt.Outcome {
	case webhook.StateRetrying:
		d.retried(attempt, tier)
	case webhook.StateDead:
		if err := d.deadLetter(ctx, deadReason, attempt); err != nil {
			return next, err
		}
		h.cfg.Metrics.outcome(route, "dead")
		d.log.Warn().Int("status", attempt.Status).Str("error", attempt.Error).Msg("delivery dead-lettered")
	default:
		h.cfg.Metrics.outcome(route, "delivered")
		d.log.Debug().Int("status", attempt.Status).Msg("delivered")
	}
	return next, nil
}

// delivery is one message being handled.
type delivery struct {
	*Handler
	route *Route
	msg   webhook.RouteMessage
	// stop ends waits for a dependency early (shutdown).
	stop <-chan struct{}
	log  zerolog.Logger
	// span is the delivery's span when tracing, else nil.
	span trace.Span
	// key is the routing key of a route with an Exchange; unroutable says
	// its publish failed with webhook.ErrUnroutable.
	key        string
	unroutable bool
}

// current decides, with the pair claimed, whether the message is the copy
// to deliver now. It returns done (the message is handled, the lease
// released) for a pair already delivered, for a stale copy (another
// generation: a replay, a reconciled resend or a retry replaced it), and
// for a pair whose dead-lettering this very copy started but did not
// finish (its dead letter is published again, without a POST). A dead
// letter an operator moved back starts a new series and is delivered.
func (d *delivery) current(ctx context.Context, lease Lease) (done bool, err error) {
	release := func() {
		if err := lease.Release(ctx); err != nil {
			d.log.Warn().Err(err).Msg("releasing delivery lease")
		}
	}
	state, gen := lease.State(), lease.Gen()
	// A stale copy is superseded whatever the pair's state: a retry tier's
	// copy coming back after `hookrelay retry` delivered the pair counts
	// as superseded, not as a duplicate of the delivered one.
	switch {
	case d.msg.MovedBack && state == webhook.StateDead && d.msg.Gen == gen:
		ng, err := lease.Restart(ctx)
		if err != nil {
			// The lease is given back, so the message's next try claims at
			// once instead of waiting it out as if a dispatcher had died.
			if !errors.Is(err, webhook.ErrLeaseLost) {
				release()
			}
			return true, fmt.Errorf("restarting a moved-back dead letter: %w", err)
		}
		d.log.Info().Int64("gen", ng).Msg("dead letter moved back by an operator; starting a new series")
		d.msg.Gen = ng
		return false, nil
	case d.msg.Gen != gen:
		release()
		d.cfg.Metrics.outcome(d.route.Name, "superseded")
		d.log.Info().Int64("gen", d.msg.Gen).Int64("current_gen", gen).Msg("stale copy of the pair; dropped without a POST")
		return true, nil
	case state == webhook.StateDelivered, state == webhook.StateStale:
		// Both are final: a copy that comes back (its ack was lost) is a
		// duplicate. Only replay --include-stale sends a stale pair again,
		// as a new generation.
		release()
		d.cfg.Metrics.outcome(d.route.Name, "skipped_duplicate")
		d.log.Debug().Str("state", string(state)).Msg("already delivered or recorded stale; skipping")
		return true, nil
	case state == webhook.StateDead:
		// This copy was dead-lettered in Postgres, but its dead letter was
		// not confirmed before the message came back.
		release()
		return true, d.deadLetter(ctx, "max_attempts", &webhook.Attempt{
			Route: d.route.Name, Number: d.msg.Attempt, StartedAt: d.now(), Error: "dead-lettered before; dead letter published again",
		})
	}
	return false, nil
}

// attempt POSTs the message and returns the attempt, with the Retry-After
// delay the destination asked for. When ctx is cancelled meanwhile
// (shutdown timeout), the attempt's result, if any, is not known to be the
// destination's answer: it releases the lease, records nothing, and fails,
// so the message is not acked and is delivered again after the restart.
// No database connection is held during the POST.
func (d *delivery) attempt(ctx context.Context, lease Lease, req Request) (*webhook.Attempt, time.Duration, error) {
	route := d.route.Name
	d.cfg.Metrics.inFlight.WithLabelValues(route).Inc()
	var a *webhook.Attempt
	var retryAfter time.Duration
	if d.route.Exchange != nil {
		a = d.publishOut(ctx, req)
	} else {
		a, retryAfter = d.post(ctx, d.route, d.msg, req)
	}
	d.cfg.Metrics.inFlight.WithLabelValues(route).Dec()
	if err := ctx.Err(); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if rerr := lease.Release(rctx); rerr != nil {
			d.log.Warn().Err(rerr).Msg("releasing delivery lease")
		}
		return nil, 0, fmt.Errorf("delivery aborted: %w", err)
	}
	d.cfg.Metrics.duration.WithLabelValues(route).Observe(a.Duration.Seconds())
	a.Gen = d.msg.Gen
	return a, retryAfter, nil
}

// decide sets the attempt's outcome: delivered on a 2xx; dead on 410 or a
// status the route does not retry, or after its last attempt; else
// retrying, in the tier it returns. deadReason says why a dead one is.
func (d *delivery) decide(a *webhook.Attempt, retryAfter time.Duration) (tier int, deadReason string) {
	r := d.route
	switch {
	case a.Status >= 200 && a.Status < 300, r.Exchange != nil && a.Error == "":
		a.Outcome = webhook.StateDelivered
	case a.Status == http.StatusGone || r.NoRetry[a.Status]:
		a.Outcome, deadReason = webhook.StateDead, "no_retry_status"
	case d.msg.Attempt >= r.MaxAttempts:
		a.Outcome, deadReason = webhook.StateDead, "max_attempts"
	default:
		a.Outcome = webhook.StateRetrying
		tier = d.tierFor(d.msg.Attempt, retryAfter)
		a.RetryIn = d.cfg.Tiers[tier].Delay
	}
	return tier, deadReason
}

// record stores the attempt and the pair's new state and releases the
// lease, retrying while Postgres fails. If another copy moved the pair on meanwhile (a replay), that
// copy owns what comes next, and done says this one is handled. If the
// lease was lost (it expired, during a long Postgres outage, and another
// copy of the message claimed the pair), the attempt is stored as lost and
// nothing else: the other claim owns the pair now. This copy is then not
// acked: it comes back, and what Postgres says then decides (delivered:
// acked without a POST), so neither a success nor a failure of this
// attempt is taken as the pair's outcome blindly.
func (d *delivery) record(ctx context.Context, lease Lease, a *webhook.Attempt) (done bool, err error) {
	var current bool
	err = d.retryStore(ctx, "recording attempt", func() (err error) {
		_, current, err = lease.Record(ctx, a)
		if errors.Is(err, webhook.ErrLeaseLost) {
			return permanent{err}
		}
		return err
	})
	if errors.Is(err, webhook.ErrLeaseLost) {
		d.cfg.Metrics.lease(d.route.Name, "lost")
		d.log.Warn().Int("status", a.Status).Str("error", a.Error).Str("outcome", string(a.Outcome)).
			Msg("delivery lease lost before recording; attempt stored as lost_lease, message requeued")
		return true, fmt.Errorf("recording attempt: %w", err)
	}
	if err != nil {
		return true, err
	}
	if !current && a.Outcome != webhook.StateDelivered {
		d.cfg.Metrics.outcome(d.route.Name, "superseded")
		d.log.Info().Msg("pair moved on while recording; this copy is done")
		return true, nil
	}
	return false, nil
}

// retryStore runs op until it succeeds, retrying with backoff for up to
// StoreRetryFor while the message stays unacked, or until d.stop closes.
func (d *delivery) retryStore(ctx context.Context, what string, op func() error) error {
	err := op()
	if err == nil || errors.Is(err, webhook.ErrEventMissing) || isPermanent(err) {
		return unwrapPermanent(err) // done, or permanent
	}
	d.holding.Add(1)
	defer func() {
		d.storeFailedAt.Store(d.now().UnixNano())
		d.holding.Add(-1)
	}()
	deadline := time.Now().Add(d.cfg.StoreRetryFor)
	retry := backoff.Backoff{Min: 100 * time.Millisecond, Max: 10 * time.Second}
	for time.Now().Before(deadline) {
		wait := retry.Next()
		d.log.Warn().Err(err).Dur("retry_in", wait).Msgf("%s failed; holding the message", what)
		t := time.NewTimer(wait)
		select {
		case <-d.stop:
			t.Stop()
			return fmt.Errorf("%s: %w (shutting down)", what, err)
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-t.C:
		}
		if err = op(); err == nil || errors.Is(err, webhook.ErrEventMissing) || isPermanent(err) {
			return unwrapPermanent(err)
		}
	}
	return fmt.Errorf("%s: %w", what, err)
}

// publish runs send, a publish that waits for its confirm. While the broker
// blocks publishing it holds the message (unacked, no new POST) until the
// block lifts, for up to PublishHoldFor, and publishes then; a publish
// already sent when the block began waits for its confirm within the same
// bound. d.stop ends a hold early, ctx any wait. Other failures return at
// once.
func (d *delivery) publish(ctx context.Context, send func(context.Context) error) error {
	pub := d.cfg.Publisher
	hctx, cancel := context.WithTimeout(ctx, d.cfg.PublishHoldFor)
	defer cancel()
	held := false
	for {
		lifted := pub.Blocked()
		if lifted == nil {
			err := send(hctx)
			if err == nil || pub.Blocked() == nil {
				return err
			}
			continue // the block began meanwhile: hold
		}
		if !held {
			held = true
			d.log.Warn().Dur("hold_for", d.cfg.PublishHoldFor).Msg("rabbitmq blocks publishing; holding the message")
		}
		select {
		case <-lifted:
		case <-d.stop:
			return errors.New("rabbitmq blocks publishing (shutting down)")
		case <-hctx.Done():
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("rabbitmq blocks publishing: %w", err)
			}
			return fmt.Errorf("rabbitmq blocked publishing for longer than %s", d.cfg.PublishHoldFor)
		}
	}
}

// tierFor picks the tier after failed attempt n: tier n-1 (the last one
// repeats), or later when the destination asked for a longer pause with
// Retry-After.
func (h *Handler) tierFor(n int, retryAfter time.Duration) int {
	last := len(h.cfg.Tiers) - 1
	tier := min(n-1, last)
	for tier < last && h.cfg.Tiers[tier].Delay < retryAfter {
		tier++
	}
	return tier
}

const maxBodySnippet = 1024

// Limits on a destination's response headers. A destination (or whatever
// answers at its address) can send megabytes of headers; what the relay
// reads is bounded by MaxResponseHeaderBytes (the attempt fails with an
// error beyond it), and what it stores per attempt by MaxStoredHeaderBytes
// of names and values: enough for the headers an operator reads (status
// line companions like Content-Type, Location, Retry-After, a request id),
// small enough that a chatty destination cannot bloat delivery_attempts.
const (
	MaxResponseHeaderBytes = 64 << 10
	MaxStoredHeaderBytes   = 4 << 10
	// maxStoredHeaderValue cuts a single long value (a cookie, a CSP).
	maxStoredHeaderValue = 512
	// HeaderHeadersTruncated is added to stored response headers when some
	// were dropped or cut; its value says how many.
	HeaderHeadersTruncated = "X-Hookrelay-Headers-Truncated"
)

// post makes one HTTP attempt and reports it, with the Retry-After delay
// asked for by a 429 or 503.
func (h *Handler) post(ctx context.Context, r *Route, msg webhook.RouteMessage, shaped Request) (*webhook.Attempt, time.Duration) {
	start := h.now()
	a := &webhook.Attempt{EventID: msg.EventID, Route: r.Name, Number: msg.Attempt, StartedAt: start}
	ctx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL, strings.NewReader(string(shaped.Body)))
	if err != nil {
		a.Error = "building request: " + err.Error()
		return a, 0
	}
	req.Header = r.RequestHeaders(msg, shaped, start)
	span := h.postSpan(ctx, r, req)

	client, describe := h.cfg.Client, describeError
	if r.Guarded {
		client, describe = h.cfg.GuardedClient, describeGuarded
	}
	resp, err := client.Do(req)
	a.Duration = time.Since(start)
	if err != nil {
		a.Error = describe(err, r.Timeout)
		endPost(span, a, err)
		return a, 0
	}
	defer resp.Body.Close()
	defer endPost(span, a, nil)
	a.Status = resp.StatusCode
	a.ResponseHeaders = capHeaders(resp.Header)
	// The status decides the outcome; the body is kept for the operator, so
	// a failure to read it is recorded with a failed attempt, not fatal.
	body, readErr := io.ReadAll(io.LimitReader(resp.Body, maxBodySnippet))
	a.ResponseBody = body
	// Read a little more so the connection can be reused; a huge body is
	// cut off by Close instead. An error here only costs the reuse.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	a.Duration = time.Since(start)
	if a.Status < 200 || a.Status >= 300 {
		a.Error = "HTTP " + strconv.Itoa(a.Status)
		if readErr != nil {
			a.Error += " (reading the response: " + describe(readErr, r.Timeout) + ")"
		}
	}
	var retryAfter time.Duration
	if a.Status == http.StatusTooManyRequests || a.Status == http.StatusServiceUnavailable {
		retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), h.now())
	}
	return a, retryAfter
}

// capHeaders returns what is stored of a response's headers: at most
// MaxStoredHeaderBytes of names and values, shortest headers first (the
// ones an operator reads are short; a filler or a cookie is long), each
// value cut to maxStoredHeaderValue bytes. When anything was dropped or
// cut, HeaderHeadersTruncated says how much; its own size is reserved in
// the budget.
func capHeaders(h http.Header) http.Header {
	type field struct {
		name  string
		value string
	}
	var fields []field
	for k, vs := range h {
		for _, v := range vs {
			fields = append(fields, field{k, v})
		}
	}
	// Shortest first, then by name and value, so what is kept does not
	// depend on map order.
	slices.SortFunc(fields, func(a, b field) int {
		if n := cmp.Compare(len(a.name)+len(a.value), len(b.name)+len(b.value)); n != 0 {
			return n
		}
		if n := cmp.Compare(a.name, b.name); n != 0 {
			return n
		}
		return cmp.Compare(a.value, b.value)
	})
	const reserve = len(HeaderHeadersTruncated) + 160 // room for the marker
	out := http.Header{}
	size, dropped, cut := 0, 0, 0
	for _, f := range fields {
		v := f.value
		if len(v) > maxStoredHeaderValue {
			v = strings.ToValidUTF8(v[:maxStoredHeaderValue], "") + "…"
			cut++
		}
		if size+len(f.name)+len(v) > MaxStoredHeaderBytes-reserve {
			dropped++
			continue
		}
		size += len(f.name) + len(v)
		out[f.name] = append(out[f.name], v)
	}
	if dropped > 0 || cut > 0 {
		out.Set(HeaderHeadersTruncated, fmt.Sprintf("%d of %d header value(s) dropped, %d cut to %d bytes: %d bytes of headers received, at most %d stored",
			dropped, len(fields), cut, maxStoredHeaderValue, headerSize(h), MaxStoredHeaderBytes))
	}
	return out
}

func headerSize(h http.Header) int {
	n := 0
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v)
		}
	}
	return n
}

// describeError names a network failure without the URL (which may carry
// credentials in its query).
func describeError(err error, timeout time.Duration) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return fmt.Sprintf("timeout after %s", timeout)
	}
	return err.Error()
}

// describeGuarded names a failed attempt of a guarded route by its kind
// only: a guard's refusal (which names the class of address it refused),
// a timeout, a name that did not resolve, a certificate not accepted, or
// a connection that failed. Never an address, a port, or the system's or
// the remote's words: a team reads its attempts, and must not map the
// relay's network through them.
func describeGuarded(err error, timeout time.Duration) string {
	var refused interface {
		error
		DestinationRefused()
	}
	var dnsErr *net.DNSError
	var certErr *tls.CertificateVerificationError
	var ne net.Error
	switch {
	case errors.As(err, &refused):
		return refused.Error()
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return fmt.Sprintf("timeout after %s", timeout)
	case errors.As(err, &dnsErr):
		return "name not resolved"
	case errors.As(err, &certErr):
		return "TLS: the destination's certificate was not accepted"
	}
	return "connection failed"
}

// parseRetryAfter reads delta-seconds or an HTTP date; 0 when absent or
// invalid.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// retried counts and logs a failed attempt whose retry copy its record
// put in the outbox, for the tier.
func (d *delivery) retried(a *webhook.Attempt, tier int) {
	t := d.cfg.Tiers[tier]
	d.cfg.Metrics.outcome(d.route.Name, "retry_scheduled")
	d.cfg.Metrics.retries.WithLabelValues(d.route.Name, t.Name).Inc()
	d.log.Info().Int("status", a.Status).Str("error", a.Error).Dur("retry_in", t.Delay).Msg("delivery failed; retry scheduled")
}

// deadLetter parks the message in its route's dead-letter queue, for
// reason, after attempt a.
func (d *delivery) deadLetter(ctx context.Context, reason string, a *webhook.Attempt) error {
	first := d.msg.FirstAttemptAt
	if first.IsZero() {
		first = a.StartedAt
	}
	why := webhook.DeadLetter{
		Route: d.route.Name, Reason: reason, Attempts: d.msg.Attempt,
		LastStatus: a.Status, LastError: a.Error, FirstAttemptAt: first, LastAttemptAt: a.StartedAt,
	}
	err := d.step(ctx, "dead letter", func(ctx context.Context) error {
		return d.publish(ctx, func(ctx context.Context) error { return d.cfg.Publisher.DeadLetter(ctx, d.msg, why) })
	})
	if err != nil {
		return fmt.Errorf("dead-lettering: %w", err)
	}
	return nil
}
