package app

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/control"
	"github.com/hookrelay/hookrelay/internal/deliver"
	"github.com/hookrelay/hookrelay/internal/routeset"
	"github.com/hookrelay/hookrelay/internal/rule"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/topic"
	"github.com/prometheus/client_golang/prometheus"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"
)

// newFollower returns the routes' follower of a receiver or a dispatcher,
// loaded: cfg's routes and those made at run time.
func newFollower(ctx context.Context, cfg *config.Config, db *store.DB, logger zerolog.Logger) (*routeset.Follower, error) {
	keyring, err := routeset.NewKeyring(cfg.Secrets.Key, cfg.Secrets.PreviousKeys)
	if err != nil {
		return nil, err
	}
	f := routeset.NewFollower(cfg, db, keyring, logger)
	if err := f.Load(ctx); err != nil {
		return nil, err
	}
	if err := requireKeys(f.Current()); err != nil {
		return nil, err
	}
	return f, nil
}

// requireKeys refuses to start a process that can never open a route made
// at run time: its secrets.key and secrets.previous_keys, fixed for its
// life, lack the key that sealed the route's signing secret or header
// values (no key at all, or others). Such a process would make the
// route's pairs and keep its bindings, but a dispatcher could not deliver
// it and an admin API would seal new routes with a key the others lack;
// refused at start, the deploy stops where it is, the processes running
// keep serving. A route this process cannot read for another reason (its
// stored data altered: no key can open it) does not stop it: it is
// logged, counted (hookrelay_route_unopened) and shown as unopened, and
// waits.
func requireKeys(set *routeset.Set) error {
	var problems []string
	for _, r := range set.All() {
		if r.Broken != nil && routeset.KeyMissing(r.Broken) {
			problems = append(problems, fmt.Sprintf("route %s: %v", r.Name, r.Broken))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("secrets.key: this process cannot open routes made at run time (%s); every receiver and dispatcher needs the key that sealed them: "+
		"set secrets.key (HOOKRELAY_SECRETS_KEY) and secrets.previous_keys as on the processes that made them, and during a key rotation keep the old key "+
		"in secrets.previous_keys until hookrelay routes reseal has run", strings.Join(problems, "; "))
}

// unopenedCollector exports hookrelay_route_unopened: 1 for each route
// made at run time that this process cannot open (routeset.Route.Broken),
// 0 for the others, as its follower has them at each scrape.
type unopenedCollector struct {
	follower *routeset.Follower
	desc     *prometheus.Desc
}

func newUnopenedCollector(f *routeset.Follower) *unopenedCollector {
	return &unopenedCollector{follower: f, desc: prometheus.NewDesc("hookrelay_route_unopened",
		"1 for a route made at run time whose signing secret or header values this process cannot open (no secrets.key, another key, or altered data): "+
			"a dispatcher does not consume it, its messages wait in its queue; its bindings and pairs stay. 0 for the other run-time routes.",
		[]string{"route"}, nil)}
}

func (c *unopenedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *unopenedCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.follower.Current().All() {
		if r.Declared {
			continue
		}
		v := 0.0
		if r.Broken != nil {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, r.Name)
	}
}

// topologyOf is the RabbitMQ topology of set's routes: the config's
// exchanges and tiers, and every route's queues and bindings (a retiring
// route's queue without them: it takes no new event).
func topologyOf(cfg *config.Config, set *routeset.Set) amqp.Topology {
	tc := amqp.TopologyConfig{Prefix: cfg.AMQP.Prefix, RetryDelays: cfg.Retry.Backoff, DeliveryLimit: cfg.Dispatcher.DeliveryLimit}
	for _, r := range set.All() {
		tc.Routes = append(tc.Routes, amqp.RouteConfig{Name: r.Name, Bindings: bindingsOf(r), Filtered: r.Filtered()})
	}
	return amqp.BuildTopology(tc)
}

// bindingsOf are the patterns route r is bound with (its queue's, or its
// sink's when it has a filter): none once it is retiring.
func bindingsOf(r *routeset.Route) []string {
	if r == nil || r.Retiring {
		return nil
	}
	return r.Bindings
}

// boundTo are the patterns of r on its queue: a route with a filter binds
// none (the sink takes its patterns, sinkPatterns).
func boundTo(r *routeset.Route) (queue, sink []string) {
	if r != nil && r.Filtered() {
		return nil, bindingsOf(r)
	}
	return bindingsOf(r), nil
}

// sinkPatterns are the patterns the sink is bound with: every filtered
// route's (not retiring) of set, once each, sorted.
func sinkPatterns(set *routeset.Set) []string {
	if set == nil {
		return nil
	}
	var out []string
	for _, r := range set.All() {
		if _, sink := boundTo(r); len(sink) > 0 {
			out = append(out, sink...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// routeEngine is a dispatcher's delivery parts that follow the routes: the
// handler's routes, the controls, the consumer groups, the reconciler's
// list and the queues' bindings.
type routeEngine struct {
	cfg       *config.Config
	names     amqp.Names
	handler   *deliver.Handler
	controls  *control.Controller
	consumers *amqp.Consumers
	db        *store.DB
	mgmt      *amqp.Management
	follower  *routeset.Follower
	// destinations are the brokers of amqp routes: a connection no route
	// uses any more is closed.
	destinations *amqp.Destinations
	logger       zerolog.Logger
}

// deliverRoutes are set's routes a dispatcher delivers: every route that
// is not broken.
func deliverRoutes(set *routeset.Set) []deliver.Route {
	var out []deliver.Route
	for _, r := range set.All() {
		if r.Broken != nil {
			continue
		}
		noRetry := map[int]bool{}
		for _, s := range r.NoRetryStatuses {
			noRetry[s] = true
		}
		out = append(out, deliver.Route{
			Name: r.Name, URL: r.URL, Timeout: r.Timeout, Headers: r.Headers, NoRetry: noRetry,
			MaxAttempts: r.MaxAttempts, SigningKeys: r.Keys, PreviousKey: r.Previous, PreviousUntil: r.PreviousUntil,
			DropStale: r.Ordering == config.OrderingDropStale, InOrder: inOrder(r),
			// A deleted route finishing its backlog: a dead head must not
			// hold the rest, or it never retires.
			SkipDead:      r.OnDead == config.OnDeadSkip || r.Retiring,
			NoTraceparent: !r.SendsTraceparent(), DeadLetterAll: r.Retiring && r.Disposal == store.DisposeDeadLetter,
			Guarded:  r.Guarded(),
			Filtered: r.Filtered(), Transform: r.TransformProgram, Version: r.Version,
			Exchange: exchangeOf(r),
		})
	}
	return out
}

// exchangeOf is where an amqp route publishes, nil for an http route.
func exchangeOf(r *routeset.Route) *deliver.Exchange {
	if !r.IsAMQP() {
		return nil
	}
	return &deliver.Exchange{Name: r.Exchange, Key: r.KeyTemplate}
}

// destinationURLs are the brokers set's amqp routes publish to.
func destinationURLs(set *routeset.Set) map[string]bool {
	in := map[string]bool{}
	for _, r := range set.All() {
		if r.IsAMQP() {
			in[r.URL] = true
		}
	}
	return in
}

// inOrder says whether the dispatchers deliver r in order per resource:
// ordering fifo, unless it is deleted with its backlog going to its dead
// letters (each event goes there as it comes).
func inOrder(r *routeset.Route) bool {
	return r.Ordering == config.OrderingFIFO && !(r.Retiring && r.Disposal == store.DisposeDeadLetter)
}

// unparkUnordered makes the parked pairs of set's routes that are not
// delivered in order due again (store.LanesUnpark): a route whose ordering
// was fifo left them, and no record of it wakes them now.
func unparkUnordered(ctx context.Context, db *store.DB, set *routeset.Set, logger zerolog.Logger) {
	var names []string
	for _, r := range set.All() {
		if r.Broken == nil && !inOrder(r) {
			names = append(names, r.Name)
		}
	}
	n, err := db.LanesUnpark(ctx, names)
	if err != nil {
		logger.Error().Err(err).Msg("making the waiting deliveries of routes no longer in order due; the next change of the routes, or the next start, tries again")
		return
	}
	if n > 0 {
		logger.Info().Int64("deliveries", n).Msg("routes no longer in order: their waiting deliveries are due again, for the reconciler")
	}
}

// controlRoutes are set's routes as the controls take them.
func controlRoutes(cfg *config.Config, set *routeset.Set) []control.Route {
	var out []control.Route
	for _, r := range set.All() {
		if r.Broken != nil {
			continue
		}
		out = append(out, control.Route{
			Name: r.Name, Failures: r.Circuit.Failures, Cooldown: r.Circuit.Cooldown, RateLimit: r.RateLimit, Burst: r.Burst,
			// A probe delivery: its POST, its claim and record.
			ProbeBusy: r.Timeout + cfg.Dispatcher.LeaseMargin,
		})
	}
	return out
}

// apply follows a change of the routes: the queues of new routes and their
// bindings first (so their consumers find them), the handler's and the
// controls' routes, then the consumers. A failure is logged: the
// follower's next change, or the next start, applies the routes again.
func (e *routeEngine) apply(ctx context.Context, old, set *routeset.Set) {
	if err := e.applyTopology(old, set); err != nil {
		e.logger.Error().Err(err).Msg("applying the routes' queues and bindings")
	}
	if err := e.handler.SetRoutes(deliverRoutes(set)); err != nil {
		e.logger.Error().Err(err).Msg("applying the routes to deliveries")
		return
	}
	if e.destinations != nil {
		e.destinations.Forget(destinationURLs(set))
	}
	if err := e.controls.SetRoutes(ctx, controlRoutes(e.cfg, set)); err != nil {
		e.logger.Error().Err(err).Msg("applying the routes' controls")
		return
	}
	e.consumers.SetGroups(consumerGroups(e.cfg, set, e.names, e.handler, e.controls))
	unparkUnordered(ctx, e.db, set, e.logger)
	for _, r := range set.All() {
		if o := old.Get(r.Name); o == nil || o.Version != r.Version || o.Retiring != r.Retiring {
			ev := e.logger.Info().Str("route", r.Name).Int64("version", r.Version).Strs("bindings", bindingsOf(r))
			switch {
			case r.Broken != nil:
				// The follower logged why; its bindings were applied.
			case r.Retiring:
				ev.Str("disposal", r.Disposal).Msg("route deleted: finishing its backlog")
			default:
				ev.Msg("route applied")
			}
		}
	}
	for _, name := range old.Names() {
		if set.Get(name) == nil {
			e.logger.Info().Str("route", name).Msg("route retired: no longer consumed")
		}
	}
}

// applyTopology declares the queues and bindings of set's run-time routes
// and removes the bindings old had that they no longer have.
func (e *routeEngine) applyTopology(old, set *routeset.Set) error {
	var declare, unbind amqp.Topology
	for _, r := range set.All() {
		if r.Declared {
			continue
		}
		rt := e.names.RouteTopology(amqp.RouteConfig{Name: r.Name, Bindings: bindingsOf(r), Filtered: r.Filtered()})
		declare.Queues = append(declare.Queues, rt.Queues...)
		declare.Bindings = append(declare.Bindings, rt.Bindings...)
		wantQueue, _ := boundTo(r)
		hadQueue, _ := boundTo(old.Get(r.Name))
		if r.Retiring {
			// Its last bindings, whatever old had: a route put back to
			// retiring (RouteUnretireLate) was in no set before, and its
			// queue may hold bindings a process whose routes lagged
			// declared again.
			hadQueue = append(slices.Clone(hadQueue), r.Bindings...)
		}
		unbind.Bindings = append(unbind.Bindings, e.stale(e.names.RouteQueue(r.Name), hadQueue, wantQueue)...)
	}
	// The sink's patterns: those of every filtered route, run-time or
	// declared, once each.
	sink := e.names.SinkTopology(sinkPatterns(set))
	declare.Queues = append(declare.Queues, sink.Queues...)
	declare.Bindings = append(declare.Bindings, sink.Bindings...)
	unbind.Bindings = append(unbind.Bindings, e.stale(e.names.Sink(), sinkPatterns(old), sinkPatterns(set))...)
	return e.consumers.Apply(func(ch *amqp091.Channel) error {
		if err := declare.Declare(ch); err != nil {
			return err
		}
		return unbind.Unbind(ch)
	})
}

// stale are the bindings of queue in had that want has not.
func (e *routeEngine) stale(queue string, had, want []string) []amqp.Binding {
	var out []amqp.Binding
	for _, p := range had {
		if !slices.Contains(want, p) {
			out = append(out, amqp.Binding{Exchange: e.names.Events(), Queue: queue, RoutingKey: p})
		}
	}
	return out
}

// unbindStale removes, on ch, the bindings the broker holds for the
// current run-time routes that they do not have: patterns removed while
// no dispatcher ran, or while this one was disconnected. The consumers
// run it on every connect, after declaring the topology; a management API
// that does not answer leaves it to the next connect.
func (e *routeEngine) unbindStale(ctx context.Context, ch *amqp091.Channel) error {
	var unbind amqp.Topology
	for _, r := range e.follower.Current().All() {
		if r.Declared && !r.Filtered() {
			// A route of config.yaml keeps what the operator bound; one
			// given a filter loses its queue's patterns (its sink has them).
			continue
		}
		want, _ := boundTo(r)
		q := e.names.RouteQueue(r.Name)
		had, err := e.mgmt.Bindings(ctx, e.names.Events(), q)
		if err != nil {
			// The management API is not needed to consume: go on, and
			// look again at the next connect.
			e.logger.Warn().Err(err).Str("route", r.Name).Str("queue", q).Msg("reading a route's bindings to remove stale ones; consuming anyway")
			continue
		}
		unbind.Bindings = append(unbind.Bindings, e.stale(q, had, want)...)
	}
	// The sink: patterns of filters removed while no dispatcher ran.
	if had, err := e.mgmt.Bindings(ctx, e.names.Events(), e.names.Sink()); err != nil {
		e.logger.Warn().Err(err).Str("queue", e.names.Sink()).Msg("reading the sink's bindings to remove stale ones; consuming anyway")
	} else {
		unbind.Bindings = append(unbind.Bindings, e.stale(e.names.Sink(), had, sinkPatterns(e.follower.Current()))...)
	}
	return unbind.Unbind(ch)
}

// retireGrace is how long after its deletion a route may retire: every
// receiver has followed the deletion (within a second or two) and routes
// no event to it.
const retireGrace = 5 * time.Second

// sweepInterval is how often a dispatcher looks for what a retired route
// left behind (sweep).
const sweepInterval = 10 * time.Second

// lateWithin is how long after its retirement a route's late pairs are
// looked for: far longer than any statement of an ingest can be stalled.
const lateWithin = time.Hour

// orphanWithin is how long after its retirement a route's queue is looked
// for (one passive declare a sweep each): a process whose routes lag longer
// than a day has been cut off from Postgres for as long, and is restarted
// long before.
const orphanWithin = 24 * time.Hour

// retire retires, every poll, the deleted routes whose backlog is done:
// marked retired (every dispatcher stops consuming its queue), and, a
// grace later, its queue deleted (what it still holds are copies of
// pairs already final). Its dead-letter queue stays for the operator.
// Every sweepInterval it sweeps what retired routes left behind.
func (e *routeEngine) retire(ctx context.Context) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	retired := map[string]time.Time{}
	orphans := map[string]time.Time{}
	var swept time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if time.Since(swept) >= sweepInterval {
			swept = time.Now()
			e.sweep(ctx, orphans)
		}
		for name, at := range retired {
			if time.Since(at) < retireGrace {
				continue
			}
			deleted, err := e.deleteRetiredQueue(ctx, name)
			if err != nil {
				e.logger.Warn().Err(err).Str("route", name).Msg("deleting a retired route's queue; trying again")
				continue
			}
			delete(retired, name)
			if !deleted {
				// Put back to retiring by a sweep (late pairs) within its
				// grace: its queue holds their copies.
				continue
			}
			e.logger.Info().Str("route", name).Str("queue", e.names.RouteQueue(name)).Msg("retired route's queue deleted; its dead letters stay")
		}
		for _, r := range e.follower.Current().All() {
			if !r.Retiring {
				continue
			}
			done, err := e.retireOne(ctx, r.Name)
			if err != nil {
				if ctx.Err() == nil {
					e.logger.Warn().Err(err).Str("route", r.Name).Msg("retiring a deleted route; trying again")
				}
				continue
			}
			if _, seen := retired[r.Name]; done && !seen {
				retired[r.Name] = time.Now()
				e.logger.Info().Str("route", r.Name).Msg("deleted route retired: nothing of it is undelivered")
			}
		}
	}
}

// sweep repairs what a retired route can leave behind (issue 38,
// reliability 6), neither of which anything else would ever undo:
//
//   - a pair committed after its route retired (an ingest that matched
//     the route before its deletion and committed past the retirement
//     grace, or a receiver whose routes lagged): the route is put back to
//     retiring and the pair sent again, so the dispatchers finish it as
//     the route's disposal says (store.RouteUnretireLate);
//   - its queue declared again, bindings and all, after it was deleted,
//     by a process whose routes lagged (reading them failed) when it
//     (re)connected to the broker: events routed there would pile up for
//     ever, since a route's name is never reused. A queue of a route
//     retired for a while (less than orphanWithin) is deleted once this
//     dispatcher has seen it at two sweeps (never one just declared: RabbitMQ 3.10 can crash a
//     dead-lettering quorum queue deleted while it starts). What it holds
//     has no pair to deliver: a late pair puts its route back to
//     retiring first.
//
// A failure is logged; the next sweep tries again. orphans keeps when each
// such queue was first seen.
func (e *routeEngine) sweep(ctx context.Context, orphans map[string]time.Time) {
	late, err := e.db.RouteUnretireLate(ctx, lateWithin)
	if err != nil && ctx.Err() == nil {
		e.logger.Warn().Err(err).Msg("looking for pairs committed after their route retired; trying again")
	}
	for _, l := range late {
		e.logger.Warn().Str("route", l.Route).Int("resent", l.Resent).
			Msg("deleted route had pairs committed after it retired: retiring again until they are done as its disposal says; their copies sent again")
	}
	gone, err := e.db.RoutesRetiredWithin(ctx, orphanWithin, retireGrace+sweepInterval)
	if err != nil {
		if ctx.Err() == nil {
			e.logger.Warn().Err(err).Msg("reading retired routes; trying again")
		}
		return
	}
	gone = slices.DeleteFunc(gone, func(name string) bool {
		exists, err := e.queueExists(e.names.RouteQueue(name))
		if err != nil && ctx.Err() == nil {
			e.logger.Warn().Err(err).Str("route", name).Msg("looking for the queue of a retired route; trying again")
		}
		return err != nil || !exists
	})
	now := time.Now()
	for name := range orphans {
		if !slices.Contains(gone, name) {
			delete(orphans, name)
		}
	}
	for _, name := range gone {
		first, seen := orphans[name]
		if !seen {
			orphans[name] = now
			continue
		}
		if now.Sub(first) < sweepInterval {
			continue
		}
		queue := e.names.RouteQueue(name)
		deleted, err := e.deleteRetiredQueue(ctx, name)
		if err != nil {
			e.logger.Warn().Err(err).Str("route", name).Msg("deleting the queue a retired route was given again; trying again")
			continue
		}
		delete(orphans, name)
		if !deleted {
			continue // put back to retiring: its queue is its own again
		}
		e.logger.Warn().Str("route", name).Str("queue", queue).
			Msg("retired route's queue was declared again by a process whose routes lagged: deleted again, with its bindings")
	}
}

// deleteRetiredQueue deletes the queue of the retired route name, only
// while it is retired (store.RouteWhileRetired): a sweep of any dispatcher
// may have put it back to retiring, late pairs' copies on their way to that
// queue. It reports whether it deleted.
func (e *routeEngine) deleteRetiredQueue(ctx context.Context, name string) (bool, error) {
	return e.db.RouteWhileRetired(ctx, name, func() error {
		return e.consumers.Apply(func(ch *amqp091.Channel) error {
			_, err := ch.QueueDelete(e.names.RouteQueue(name), false, false, false)
			return err
		})
	})
}

// queueExists says whether queue is declared (a passive declare on a
// channel of its own, which a missing queue closes); false too while the
// dispatcher is not connected.
func (e *routeEngine) queueExists(queue string) (bool, error) {
	exists := false
	err := e.consumers.Apply(func(ch *amqp091.Channel) error {
		_, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		var aerr *amqp091.Error
		if errors.As(err, &aerr) && aerr.Code == amqp091.NotFound {
			return nil
		}
		exists = err == nil
		return err
	})
	return exists, err
}

// retireOne marks the deleted route retired once it may retire, and says
// whether it did.
func (e *routeEngine) retireOne(ctx context.Context, name string) (bool, error) {
	ok, err := e.db.RouteRetiring(ctx, name, retireGrace)
	if err != nil || !ok {
		return false, err
	}
	return true, e.db.RouteRetired(ctx, name)
}

// backfillAgain is when a receiver backfills a route's change again: once
// every request that matched with the routes before is stored or refused
// (ingest's store timeout, 5s, and a margin).
const backfillAgain = 10 * time.Second

// pairBackfill makes, in a receiver, the pairs of a route made or given
// patterns for the events the receiver accepted before it followed the
// change (issue 38, reliability 6c). Matched with the routes it had, such
// an event got no pair, while a dispatcher that followed sooner may have
// bound the route's queue, so the broker routes its message there: without
// a pair, nothing could send it again were it lost, and a purge could drop
// its day under it. Each change is backfilled when followed, and again
// once every request that matched with the routes before has been stored
// (backfillAgain later).
type pairBackfill struct {
	db     *store.DB
	routes func() *routeset.Set
	again  time.Duration
	logger zerolog.Logger

	mu   sync.Mutex
	jobs []backfillJob
	wake chan struct{}
}

// backfillJob is one change to backfill: route's patterns, for the events
// received from since until the receiver followed the change (until),
// taken by the filter of the route as followed (filter, nil for none).
type backfillJob struct {
	route    string
	patterns []string
	filter   *rule.Filter
	since    time.Time
	until    time.Time
	due      time.Time
	last     bool
}

func newPairBackfill(db *store.DB, routes func() *routeset.Set, again time.Duration, logger zerolog.Logger) *pairBackfill {
	return &pairBackfill{db: db, routes: routes, again: again, logger: logger.With().Str("component", "routes").Logger(), wake: make(chan struct{}, 1)}
}

// watch is the follower's watcher: it queues each run-time route of set
// that has patterns old had not (a new route: all of them).
func (b *pairBackfill) watch(_ context.Context, old, set *routeset.Set) {
	now := time.Now()
	b.mu.Lock()
	for _, r := range set.All() {
		if r.Declared || r.Retiring {
			continue
		}
		var had []string
		if o := old.Get(r.Name); o != nil && !o.Retiring {
			had = o.Bindings
		}
		var added []string
		for _, p := range r.Bindings {
			if !slices.Contains(had, p) {
				added = append(added, p)
			}
		}
		if len(added) > 0 {
			b.jobs = append(b.jobs, backfillJob{route: r.Name, patterns: added, filter: r.FilterProgram, since: r.ChangedAt, until: now, due: now})
		}
	}
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// Run backfills the queued changes until ctx is done, then returns nil. A
// failed backfill is logged and tried again a second later.
func (b *pairBackfill) Run(ctx context.Context) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-b.wake:
		}
		b.runDue(ctx, time.Now())
	}
}

// runDue backfills the changes due at now; each runs again once after
// b.again, and one that failed a second later.
func (b *pairBackfill) runDue(ctx context.Context, now time.Time) {
	b.mu.Lock()
	var due []backfillJob
	rest := b.jobs[:0]
	for _, j := range b.jobs {
		if j.due.After(now) {
			rest = append(rest, j)
		} else {
			due = append(due, j)
		}
	}
	b.jobs = rest
	b.mu.Unlock()
	var next []backfillJob
	for _, j := range due {
		// The patterns the route has now: one removed since (or the
		// route deleted) takes no more pairs.
		r := b.routes().Get(j.route)
		if r == nil || r.Retiring {
			continue
		}
		j.patterns = slices.DeleteFunc(j.patterns, func(p string) bool { return !slices.Contains(r.Bindings, p) })
		if len(j.patterns) == 0 {
			continue
		}
		n, err := b.db.DeliveryBackfill(ctx, j.route, j.since, j.until, j.filter != nil, func(ev store.BackfillEvent) bool {
			key := ev.Source + "." + ev.EventType
			if !slices.ContainsFunc(j.patterns, func(p string) bool { return topic.Match(p, key) }) {
				return false
			}
			if j.filter == nil {
				return true
			}
			// As ingest judges it: an error makes no pair either.
			ok, err := j.filter.Match(ctx, rule.Input{Body: rule.ParseBody(ev.Body), Headers: rule.HeadersOf(ev.Headers),
				Source: ev.Source, EventType: ev.EventType, ReceivedAt: ev.ReceivedAt})
			return err == nil && ok
		})
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			b.logger.Warn().Err(err).Str("route", j.route).Msg("making the pairs of events accepted before this receiver followed a route's change; trying again")
			j.due = now.Add(time.Second)
			next = append(next, j)
			continue
		case n > 0:
			b.logger.Info().Str("route", j.route).Int("pairs", n).Strs("patterns", j.patterns).
				Msg("pairs made for events accepted before this receiver followed the route's change")
		}
		if !j.last {
			j.due, j.last = now.Add(b.again), true
			next = append(next, j)
		}
	}
	b.mu.Lock()
	b.jobs = append(b.jobs, next...)
	b.mu.Unlock()
}
