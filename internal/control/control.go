// Package control holds a dispatcher's route controls: pause and resume,
// the circuit breaker, the rate limit and the hold a destination asks for
// with Retry-After. Their state lives in Postgres (one row per route,
// shared by every dispatcher); a Controller follows it, through NOTIFY and
// a poll every second, and tells the route's consumers when they may take
// messages (Gate), holds each delivery for the rate limit and Retry-After
// (Admit), and counts each attempt's outcome toward the breaker (Observe).
package control

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Store is what the controls need from Postgres. Every method is one
// bounded statement; see internal/store/routestate.go for their contracts.
type Store interface {
	RouteStateEnsure(ctx context.Context, routes []string) error
	RouteStateList(ctx context.Context) ([]webhook.RouteState, error)
	RouteSuccess(ctx context.Context, route string) error
	RouteFailure(ctx context.Context, route string, threshold int, cooldown, maxCooldown time.Duration) (circuit string, failures int, err error)
	RouteProbeClaim(ctx context.Context, route, owner string, stale time.Duration) (bool, error)
	RouteProbeRefresh(ctx context.Context, route, owner string) (bool, error)
	RouteSlow(ctx context.Context, route string, d time.Duration) error
	RouteRateTake(ctx context.Context, route string, interval time.Duration, burst int) (time.Duration, error)
	// RouteHold marks route held for d from now (later marks only extend
	// it): a delivery is held that long, its message in hand and its pair
	// not yet claimed, so the reconciler must not take it for lost.
	RouteHold(ctx context.Context, route string, d time.Duration) error
}

// orZero is *t, or the zero time for a time never set.
func orZero(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// Route is one route's control settings.
type Route struct {
	Name string
	// Failures is the number of consecutive failed attempts that opens
	// the circuit; 0 turns the breaker off.
	Failures int
	// Cooldown is how long the circuit stays open before a probe; it
	// doubles while probes fail, up to Config.MaxCooldown.
	Cooldown time.Duration
	// RateLimit is deliveries per second for the route as a whole; 0 means
	// no limit. Burst is how many may go at once after a quiet spell.
	RateLimit float64
	Burst     int
	// ProbeBusy is how long the half-open probe's delivery may take (the
	// route's timeout plus the lease margin): a probe consumer busy for
	// longer is stuck (a lease wait, a hold), and its dispatcher stops
	// holding the probe so that another takes it over. Default 1m.
	ProbeBusy time.Duration
}

// Config configures a Controller.
type Config struct {
	Routes []Route
	Store  Store
	// Owner names this dispatcher in probe claims; unique per process.
	Owner string
	// ListenFunc delivers a wake-up on wake for every change announced in
	// Postgres until ctx is done (store.DB.Listen); nil means poll only.
	ListenFunc func(ctx context.Context, wake chan<- struct{}) error
	// Poll is how often the state is read regardless of notifications.
	// Default 1s: a dispatcher that missed a notification follows within
	// a second or two.
	Poll time.Duration
	// ProbeStale is how long a half-open route's probe claim lives without
	// being refreshed before another dispatcher may take it over (its
	// owner died). Default 5s: five polls of a live owner.
	ProbeStale time.Duration
	// MaxCooldown caps the doubling cool-down. Default 10m.
	MaxCooldown time.Duration
	// MaxSlow caps how long one Retry-After holds the route. Default 10m,
	// far inside RabbitMQ's 30-minute consumer timeout for a held message.
	MaxSlow    time.Duration
	Registerer prometheus.Registerer
	Logger     zerolog.Logger
}

// Controller follows every route's controls for one dispatcher. Init reads
// the state once; Run follows it until ctx is done.
type Controller struct {
	cfg    Config
	mu     sync.RWMutex
	routes map[string]*route
	logger zerolog.Logger

	circuit *prometheus.GaugeVec
	paused  *prometheus.GaugeVec
	waits   *prometheus.CounterVec
	waited  *prometheus.CounterVec
}

// view is what a route's consumers go by.
type view struct {
	known   bool
	paused  bool
	circuit string
	owner   bool // this dispatcher holds the half-open probe
	slowed  bool
}

type route struct {
	cfg Route

	mu        sync.Mutex
	view      view
	slowUntil time.Time // local clock
	changed   chan struct{}
	// probe is what this dispatcher's consumer 0, the one that makes a
	// half-open circuit's probe, is doing, and since when; claimedAt is
	// when this dispatcher last claimed the probe.
	probe     activity
	claimedAt time.Time
	// leftProbe: this dispatcher said it leaves the probe to another
	// (logged once until it holds or claims the probe again).
	leftProbe bool
	// heldUntil is how far this dispatcher has marked the route held
	// (local clock): a hold within it needs no new mark.
	heldUntil time.Time
	// unsettled: the stored state may have failures to reset or a circuit
	// to close (the last read said so, or this dispatcher has recorded a
	// failure since). While it is false a success writes nothing: most
	// deliveries succeed on a closed circuit, and the store announces a
	// route's first failure, so every dispatcher reads it within
	// milliseconds and resets it on its next success.
	unsettled bool
}

// activity is what a consumer does, as its gate is told.
type activity struct {
	state int // stopped, idle or busy
	since time.Time
}

const (
	stopped = iota
	idle
	busy
)

// New returns a Controller for cfg's routes.
func New(cfg Config) (*Controller, error) {
	if cfg.Store == nil || cfg.Owner == "" || cfg.Registerer == nil {
		return nil, errors.New("control: Store, Owner and Registerer are required")
	}
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	if cfg.ProbeStale <= 0 {
		cfg.ProbeStale = 5 * time.Second
	}
	if cfg.MaxCooldown <= 0 {
		cfg.MaxCooldown = 10 * time.Minute
	}
	if cfg.MaxSlow <= 0 {
		cfg.MaxSlow = 10 * time.Minute
	}
	c := &Controller{
		cfg: cfg, routes: map[string]*route{},
		logger: cfg.Logger.With().Str("component", "route_control").Logger(),
		circuit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "hookrelay_route_circuit_state",
			Help: "The route's circuit breaker as this dispatcher sees it: 0 closed, 1 half-open, 2 open.",
		}, []string{"route"}),
		paused: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "hookrelay_route_paused",
			Help: "1 while the route is paused by an operator.",
		}, []string{"route"}),
		waits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookrelay_route_waits_total",
			Help: "Deliveries held before their POST, by reason: rate_limit (routes[].rate_limit) or retry_after (the destination's Retry-After).",
		}, []string{"route", "reason"}),
		waited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookrelay_route_wait_seconds_total",
			Help: "Time deliveries were held before their POST, by reason.",
		}, []string{"route", "reason"}),
	}
	cfg.Registerer.MustRegister(c.circuit, c.paused, c.waits, c.waited)
	routes, err := c.build(cfg.Routes)
	if err != nil {
		return nil, err
	}
	c.routes = routes
	return c, nil
}

// build returns the routes of list, keeping the followed state of those
// whose settings are unchanged.
func (c *Controller) build(list []Route) (map[string]*route, error) {
	out := make(map[string]*route, len(list))
	for _, r := range list {
		if r.RateLimit < 0 || (r.RateLimit > 0 && r.Burst < 1) || (r.Failures > 0 && r.Cooldown <= 0) {
			return nil, fmt.Errorf("control: route %q: rate limit needs a burst of 1 or more, a breaker a cool-down", r.Name)
		}
		if r.ProbeBusy <= 0 {
			r.ProbeBusy = time.Minute
		}
		if old := c.route(r.Name); old != nil && old.cfg == r {
			out[r.Name] = old
			continue
		}
		out[r.Name] = &route{cfg: r, changed: make(chan struct{}), view: view{circuit: webhook.CircuitClosed}, probe: activity{since: time.Now()}}
		c.circuit.WithLabelValues(r.Name)
		c.paused.WithLabelValues(r.Name)
		for _, reason := range []string{reasonRate, reasonRetryAfter} {
			c.waits.WithLabelValues(r.Name, reason)
			c.waited.WithLabelValues(r.Name, reason)
		}
	}
	return out, nil
}

// route returns the route name, nil for one this controller does not
// follow.
func (c *Controller) route(name string) *route {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.routes[name]
}

// snapshot returns the routes followed now.
func (c *Controller) snapshot() []*route {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]*route, 0, len(c.routes))
	for _, r := range c.routes {
		out = append(out, r)
	}
	return out
}

// SetRoutes replaces the routes followed (routes made, changed or deleted
// at run time) and reads their state before it returns, so consumers
// started afterwards follow a pause or an open circuit. A route whose
// settings changed starts afresh with a new gate: take Gate again.
func (c *Controller) SetRoutes(ctx context.Context, list []Route) error {
	routes, err := c.build(list)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.routes = routes
	c.mu.Unlock()
	return c.Init(ctx)
}

// ErrGateClosed is Admit's answer for a delivery it held (for the rate
// limit or a Retry-After hold) while the route was paused or its circuit
// opened: the message goes back to the queue instead of being sent.
var ErrGateClosed = errors.New("the route was paused or its circuit opened while the delivery was held; giving the message back")

// ErrStopping is Admit's answer for a delivery it held when the dispatcher
// began to stop: the message goes back to the queue.
var ErrStopping = errors.New("stopping while the route holds deliveries")

const (
	reasonRate       = "rate_limit"
	reasonRetryAfter = "retry_after"
)

// Init creates the routes' rows where missing and reads their state, so
// consumers started afterwards already follow a pause or an open circuit.
func (c *Controller) Init(ctx context.Context) error {
	routes := c.snapshot()
	names := make([]string, 0, len(routes))
	for _, r := range routes {
		names = append(names, r.cfg.Name)
	}
	if err := c.cfg.Store.RouteStateEnsure(ctx, names); err != nil {
		return err
	}
	// A breaker turned off in the config must not leave the route stuck
	// with the circuit it had: close it.
	for _, r := range routes {
		if r.cfg.Failures <= 0 {
			if err := c.cfg.Store.RouteSuccess(ctx, r.cfg.Name); err != nil {
				return err
			}
		}
	}
	_, err := c.refresh(ctx)
	return err
}

// Run follows the stored state until ctx is done, then returns nil: at
// every notification and at least every Poll, and when a Retry-After hold
// or a cool-down ends. A failed read is logged and tried again at the next
// poll; the consumers keep the last state meanwhile.
func (c *Controller) Run(ctx context.Context) error {
	wake := make(chan struct{}, 1)
	var wg sync.WaitGroup
	if c.cfg.ListenFunc != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.cfg.ListenFunc(ctx, wake); err != nil && ctx.Err() == nil {
				c.logger.Error().Err(err).Msg("listening for route state changes stopped; polling only")
			}
		}()
	}
	defer wg.Wait()
	next := c.cfg.Poll
	for {
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-wake:
			t.Stop()
		case <-t.C:
		}
		var err error
		next, err = c.refresh(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			c.logger.Warn().Err(err).Msg("reading route state; keeping the last one")
			next = c.cfg.Poll
		}
	}
}

// refresh reads every route's state, applies it, and claims or keeps the
// probes of circuits whose cool-down is over. It returns when to look
// again.
func (c *Controller) refresh(ctx context.Context) (time.Duration, error) {
	next := c.cfg.Poll
	for round := 0; round < 2; round++ {
		list, err := c.cfg.Store.RouteStateList(ctx)
		if err != nil {
			return 0, err
		}
		local := time.Now()
		again := false
		for _, s := range list {
			r := c.route(s.Route)
			if r == nil {
				continue // a route of another config
			}
			var slowUntil time.Time
			if at := orZero(s.SlowUntil); at.After(s.Now) {
				slowUntil = local.Add(at.Sub(s.Now))
				next = min(next, at.Sub(s.Now))
			}
			read := view{known: true, paused: s.Paused, circuit: s.Circuit, owner: s.Circuit == webhook.CircuitHalfOpen && s.ProbeOwner == c.cfg.Owner}
			c.apply(r, func(v *view, until *time.Time) {
				*v, *until = read, slowUntil
				r.unsettled = s.ConsecutiveFailures > 0 || s.Circuit != webhook.CircuitClosed // under r.mu, as apply holds it
			})
			claimed, err := c.probe(ctx, s)
			if err != nil {
				return 0, err
			}
			again = again || claimed
			if at := orZero(s.OpenedUntil); s.Circuit == webhook.CircuitOpen && at.After(s.Now) {
				next = min(next, at.Sub(s.Now))
			}
		}
		if !again {
			break
		}
	}
	return max(next, 10*time.Millisecond), nil
}

// probe claims the probe of a route whose cool-down is over, or whose
// probe owner went quiet, and keeps this dispatcher's own claim fresh. It
// reports whether the state changed.
func (c *Controller) probe(ctx context.Context, s webhook.RouteState) (bool, error) {
	rt := c.route(s.Route)
	switch {
	case rt == nil:
		// Removed meanwhile (a route deleted at run time).
	case rt.cfg.Failures <= 0:
		// Breaker off here; Init closed the circuit.
	case s.Circuit == webhook.CircuitOpen && !orZero(s.OpenedUntil).After(s.Now),
		s.Circuit == webhook.CircuitHalfOpen && s.ProbeOwner != c.cfg.Owner && (orZero(s.ProbeAt).IsZero() || s.Now.Sub(orZero(s.ProbeAt)) > c.cfg.ProbeStale):
		claimed, err := c.cfg.Store.RouteProbeClaim(ctx, s.Route, c.cfg.Owner, c.cfg.ProbeStale)
		if err != nil {
			return false, err
		}
		if claimed {
			r := rt
			r.mu.Lock()
			r.claimedAt, r.leftProbe = time.Now(), false
			r.mu.Unlock()
			c.logger.Info().Str("route", s.Route).Msg("circuit half-open: this dispatcher makes the probe delivery")
		}
		return claimed, nil
	case s.Circuit == webhook.CircuitHalfOpen && s.ProbeOwner == c.cfg.Owner:
		// The claim is kept only while this dispatcher can make the
		// probe; otherwise it goes stale and another takes it over.
		r := rt
		if able, why := r.canProbe(c.cfg.ProbeStale); !able {
			r.mu.Lock()
			left := r.leftProbe
			r.leftProbe = true
			r.mu.Unlock()
			if !left {
				c.logger.Warn().Str("route", s.Route).Str("why", why).Dur("probe_stale", c.cfg.ProbeStale).
					Msg("this dispatcher cannot make the probe delivery; leaving the probe to another")
			}
			return false, nil
		}
		r.mu.Lock()
		r.leftProbe = false
		r.mu.Unlock()
		held, err := c.cfg.Store.RouteProbeRefresh(ctx, s.Route, c.cfg.Owner)
		return !held, err
	}
	return false, nil
}

// canProbe says whether this dispatcher can make route r's probe delivery
// now, and if not, why: its probe consumer is subscribed and either waits
// for a message (for less than stale: with the route's backlog in the
// queue, a working consumer gets one at once) or handles one (for less
// than a delivery can take); or the probe was claimed less than stale ago
// and the consumer is starting.
func (r *route) canProbe(stale time.Duration) (bool, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a, since := r.probe, time.Since(r.probe.since)
	switch {
	case a.state == busy && since < r.cfg.ProbeBusy,
		a.state == idle && since < stale,
		a.state == stopped && time.Since(r.claimedAt) < stale:
		return true, ""
	case a.state == busy:
		return false, fmt.Sprintf("its probe consumer has been handling one message for %s (a lease wait or a hold)", since.Round(time.Second))
	case a.state == idle:
		return false, fmt.Sprintf("its probe consumer has had no message for %s (its connection is not moving)", since.Round(time.Second))
	}
	return false, fmt.Sprintf("its probe consumer has not been consuming for %s (its connection or channel is down)", since.Round(time.Second))
}

// apply makes v (and the Retry-After hold until slowUntil) route r's
// state: it wakes the consumers when what they go by changed, logs the
// change and sets the metrics.
//
// change edits the route's view and hold under the route's lock, so a
// change made here (a circuit this dispatcher just opened, a Retry-After)
// and one read from Postgres meanwhile cannot overwrite each other.
func (c *Controller) apply(r *route, change func(v *view, slowUntil *time.Time)) {
	r.mu.Lock()
	old := r.view
	v, slowUntil := r.view, r.slowUntil
	change(&v, &slowUntil)
	v.slowed = time.Now().Before(slowUntil)
	r.view, r.slowUntil = v, slowUntil
	if old != v {
		close(r.changed)
		r.changed = make(chan struct{})
	}
	r.mu.Unlock()
	c.paused.WithLabelValues(r.cfg.Name).Set(b2f(v.paused))
	c.circuit.WithLabelValues(r.cfg.Name).Set(circuitValue(v.circuit))
	if old == v {
		return
	}
	log := c.logger.With().Str("route", r.cfg.Name).Logger()
	switch {
	case old.paused != v.paused && v.paused:
		log.Info().Msg("route paused: this dispatcher stops consuming its queue")
	case old.paused != v.paused:
		log.Info().Msg("route resumed")
	case old.circuit != v.circuit || old.owner != v.owner:
		log.Info().Str("circuit", v.circuit).Bool("probe_here", v.owner).Str("was", old.circuit).Msg("route circuit changed")
	case old.slowed != v.slowed && v.slowed:
		log.Info().Time("until", slowUntil).Msg("route held: the destination asked to retry later")
	case old.slowed != v.slowed:
		log.Info().Msg("route hold over")
	}
	// Otherwise the first read found the route active: nothing to say.
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func circuitValue(s string) float64 {
	switch s {
	case webhook.CircuitHalfOpen:
		return 1
	case webhook.CircuitOpen:
		return 2
	}
	return 0
}

// Gate is the gate of route name's consumers; nil for an unknown route.
func (c *Controller) Gate(name string) *RouteGate {
	r := c.route(name)
	if r == nil {
		return nil
	}
	return &RouteGate{r: r}
}

// RouteGate tells a route's consumers when they may consume.
type RouteGate struct{ r *route }

// Open reports whether consumer i of the route may take messages now, and
// returns a channel closed at the route's next change. Nobody consumes a
// paused route, one held by Retry-After or one whose circuit is open; when
// the circuit is half-open only consumer 0 of the dispatcher that holds
// the probe does, so one message at a time is the probe.
func (g *RouteGate) Open(i int) (bool, <-chan struct{}) {
	r := g.r
	r.mu.Lock()
	defer r.mu.Unlock()
	v := r.view
	open := v.known && !v.paused && !time.Now().Before(r.slowUntil)
	if r.cfg.Failures <= 0 {
		v.circuit = webhook.CircuitClosed // breaker off for this dispatcher's config
	}
	switch v.circuit {
	case webhook.CircuitOpen:
		open = false
	case webhook.CircuitHalfOpen:
		open = open && v.owner && i == 0
	}
	return open, r.changed
}

// Consuming is told that consumer i of the route is subscribed, waiting
// (busy false) or handling a message (busy true); see amqp.ActivityGate.
func (g *RouteGate) Consuming(i int, isBusy bool) {
	state := idle
	if isBusy {
		state = busy
	}
	g.track(i, state)
}

// Stopped is told that consumer i of the route takes no message.
func (g *RouteGate) Stopped(i int) { g.track(i, stopped) }

// track records what consumer 0 does: it is the one that makes a
// half-open circuit's probe.
func (g *RouteGate) track(i, state int) {
	if i != 0 {
		return
	}
	r := g.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.probe.state != state {
		r.probe = activity{state: state, since: time.Now()}
	}
}

// Admit holds a delivery of route until it may go: past the route's
// Retry-After hold and within its rate limit. It returns ErrGateClosed
// when the route is paused, or its circuit opens, before the delivery goes
// (a pause stops the route's deliveries within 2s, however long the hold
// would have been); the probe of a half-open circuit that this dispatcher
// held already when it was taken still goes. It returns another error when
// stopping closes or ctx is done first, when the message was held for
// longer than MaxSlow and a minute in all (a slow rate shared by many
// consumers; the message must not reach RabbitMQ's 30-minute consumer
// timeout), or when Postgres cannot be asked. In every case but nil the
// message goes back to the queue.
func (c *Controller) Admit(ctx context.Context, name string, stopping <-chan struct{}) error {
	r := c.route(name)
	if r == nil {
		return nil
	}
	r.mu.Lock()
	taken := r.view // what the consumer went by when it took the message
	r.mu.Unlock()
	waitedFor := map[string]bool{}
	// A full Retry-After hold (at most MaxSlow) still lets the message go.
	deadline := time.Now().Add(c.cfg.MaxSlow + time.Minute)
	for {
		if time.Now().After(deadline) {
			return fmt.Errorf("held by the route's controls for more than %s", c.cfg.MaxSlow+time.Minute)
		}
		r.mu.Lock()
		hold := time.Until(r.slowUntil)
		v, changed := r.view, r.changed
		r.mu.Unlock()
		if r.stops(taken, v) {
			return ErrGateClosed
		}
		reason := reasonRetryAfter
		if hold <= 0 {
			if r.cfg.RateLimit <= 0 {
				return nil
			}
			wait, err := c.cfg.Store.RouteRateTake(ctx, name, time.Duration(float64(time.Second)/r.cfg.RateLimit), r.cfg.Burst)
			if err != nil {
				return err
			}
			if wait == 0 {
				return nil
			}
			hold, reason = wait, reasonRate
		}
		if !waitedFor[reason] {
			waitedFor[reason] = true
			c.waits.WithLabelValues(name, reason).Inc()
		}
		// A rate-limit hold is marked for the reconciler; a Retry-After is
		// already, as the route's slow_until.
		if reason == reasonRate {
			if err := c.markHeld(ctx, r, hold); err != nil {
				return err
			}
		}
		started := time.Now()
		// Never past the deadline: a hold begun just before it (the route
		// slowed again, a slow rate's turn) would stretch the message's
		// time in hand by up to MaxSlow.
		t := time.NewTimer(min(hold, time.Until(deadline)+time.Millisecond))
		select {
		case <-t.C:
		case <-changed:
			// Paused, the circuit moved, or the hold changed: look again.
			t.Stop()
		case <-stopping:
			t.Stop()
			return ErrStopping
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		c.waited.WithLabelValues(name, reason).Add(time.Since(started).Seconds())
	}
}

// heldMarkSlack is how much further than the hold itself a mark reaches:
// the message is claimed just after its hold, and a few holds in a row
// then need one mark, not one each.
const heldMarkSlack = 2 * time.Second

// markHeld marks route r held for at least hold from now, in Postgres,
// unless this dispatcher's last mark reaches that far already. The
// message stays in hand until it is claimed: without the mark, its pair
// would look lost to the reconciler.
func (c *Controller) markHeld(ctx context.Context, r *route, hold time.Duration) error {
	until := time.Now().Add(hold)
	r.mu.Lock()
	marked := !until.After(r.heldUntil)
	r.mu.Unlock()
	if marked {
		return nil
	}
	if err := c.cfg.Store.RouteHold(ctx, r.cfg.Name, hold+heldMarkSlack); err != nil {
		return err
	}
	r.mu.Lock()
	if until.Add(heldMarkSlack).After(r.heldUntil) {
		r.heldUntil = until.Add(heldMarkSlack)
	}
	r.mu.Unlock()
	return nil
}

// stops reports whether a delivery taken while the route's consumers went
// by taken must not go now that they go by v: the route is paused, or
// (with the breaker on here) its circuit is open, or half-open and this
// delivery is not the probe this dispatcher held when it was taken.
func (r *route) stops(taken, v view) bool {
	if v.paused {
		return true
	}
	if r.cfg.Failures <= 0 {
		return false // breaker off for this dispatcher's config
	}
	switch v.circuit {
	case webhook.CircuitOpen:
		return true
	case webhook.CircuitHalfOpen:
		return !(taken.circuit == webhook.CircuitHalfOpen && taken.owner && v.owner)
	}
	return false
}

// Observe counts one attempt's outcome on route: status is the HTTP
// status, 0 when no answer came (a network error or a timeout). A 2xx
// resets the consecutive failures and closes the circuit; no answer, a
// 408, a 429 or a 5xx counts as a failure; any other answer (the
// destination is up but refused this event) counts as neither. A 429 or
// 503 with Retry-After also holds the whole route for that long (at most
// MaxSlow). A failed write is logged, not returned: the delivery's own
// outcome is already decided, and the next poll puts the state right.
func (c *Controller) Observe(ctx context.Context, name string, status int, retryAfter time.Duration) {
	r := c.route(name)
	if r == nil {
		return
	}
	ctx = context.WithoutCancel(ctx)
	log := c.logger.With().Str("route", name).Logger()
	if retryAfter > 0 && (status == 429 || status == 503) {
		hold := min(retryAfter, c.cfg.MaxSlow)
		if err := c.cfg.Store.RouteSlow(ctx, name, hold); err != nil {
			log.Warn().Err(err).Msg("recording a Retry-After hold")
		} else {
			until := time.Now().Add(hold)
			c.apply(r, func(_ *view, slowUntil *time.Time) {
				if until.After(*slowUntil) {
					*slowUntil = until
				}
			})
		}
	}
	if r.cfg.Failures <= 0 {
		return
	}
	success := status >= 200 && status < 300
	failure := status == 0 || status == 408 || status == 429 || status >= 500
	switch {
	case success:
		r.mu.Lock()
		unsettled := r.unsettled
		r.mu.Unlock()
		if !unsettled {
			return
		}
		if err := c.cfg.Store.RouteSuccess(ctx, name); err != nil {
			log.Warn().Err(err).Msg("recording a success for the circuit breaker")
			return
		}
		r.mu.Lock()
		r.unsettled = false
		r.mu.Unlock()
		c.applyCircuit(r, webhook.CircuitClosed)
	case failure:
		r.mu.Lock()
		r.unsettled = true
		r.mu.Unlock()
		circuit, failures, err := c.cfg.Store.RouteFailure(ctx, name, r.cfg.Failures, r.cfg.Cooldown, c.cfg.MaxCooldown)
		if err != nil {
			log.Warn().Err(err).Msg("recording a failure for the circuit breaker")
			return
		}
		if circuit == webhook.CircuitOpen {
			if c.applyCircuit(r, webhook.CircuitOpen) {
				log.Warn().Int("consecutive_failures", failures).Msg("circuit opened: deliveries of the route wait in its queue")
			}
		}
	}
}

// applyCircuit sets route r's circuit as this dispatcher just stored it,
// without waiting for the next read, so its consumers stop (or go on)
// before the next message. It reports whether it changed.
func (c *Controller) applyCircuit(r *route, circuit string) bool {
	changed := false
	c.apply(r, func(v *view, _ *time.Time) {
		if v.circuit != circuit {
			v.circuit, v.owner, changed = circuit, false, true
		}
	})
	return changed
}
