// Package routeset is the routes a receiver or a dispatcher serves, as
// they change at run time: those of config.yaml (declared: fixed for the
// process's life) and those made through hookrelay routes, the API or the
// console (stored in Postgres, with their signing secrets sealed by a
// Keyring). A Follower reads them at start and follows every change
// within a second or two (NOTIFY on the routes table, and a poll), and
// tells its watchers the old and the new Set.
package routeset

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/outgoing"
	"github.com/hookrelay/hookrelay/internal/rule"
	"github.com/hookrelay/hookrelay/internal/signature"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/topic"
	"github.com/rs/zerolog"
)

// Route is one route as a process serves it.
type Route struct {
	config.Route
	// Declared: a route of config.yaml.
	Declared bool
	// Version counts a run-time route's changes (1 when made); ChangedAt
	// is when its current version was stored (the database's clock).
	Version   int64
	ChangedAt time.Time
	// Retiring: deleted; no event is routed to it (Match leaves it out,
	// its queue is unbound), and the dispatchers finish its backlog as
	// Disposal says (store.DisposeDeliver, store.DisposeDeadLetter).
	Retiring bool
	Disposal string
	// Keys sign deliveries: the current secret's first; Previous signs
	// too until PreviousUntil (this process's clock).
	Keys          [][]byte
	Previous      []byte
	PreviousUntil time.Time
	// SecretFingerprint and PreviousFingerprint name a run-time route's
	// secrets.
	SecretFingerprint, PreviousFingerprint string
	// Broken says why this process cannot deliver a run-time route: its
	// signing secret or header values do not open with this process's
	// keys (no secrets.key, another key: KeyMissing), or its settings do
	// not read; nil when it can. Its Bindings are read all the same (they
	// are never sealed): its queue keeps them and receivers make its
	// pairs, and its messages wait in its queue, unconsumed here, for a
	// dispatcher that can open it. Of its other settings, those that read
	// are set, header values never.
	Broken error
	// FilterProgram and TransformProgram are the route's rules
	// (docs/rules.md) compiled, nil when it has none.
	FilterProgram    *rule.Filter
	TransformProgram *rule.Transform
	// KeyTemplate is an amqp route's routing key compiled, nil for an
	// http route.
	KeyTemplate *outgoing.KeyTemplate
}

// Guarded reports whether r is a team's route made at run time, whose
// destination must not be on the relay's own side (internal/netguard):
// checked when it is saved and again when each delivery connects. The
// routes of config.yaml and the platform team's are the operator's.
func (r *Route) Guarded() bool {
	return !r.Declared && r.Team != store.PlatformTeam
}

// Filtered reports whether the route's events come addressed to it, its
// queue bound to no pattern: it has a filter, or it is a team's route
// that binds the relay's own events (source hookrelay), which it takes
// only when they are about its team (Set.Route), so that no copy of
// another team's reaches its queue. (The platform's routes see every
// team's.)
func (r *Route) Filtered() bool {
	return r.Filter != "" || (r.Team != "" && r.Team != store.PlatformTeam && r.BindsRelayEvents())
}

// BindsRelayEvents reports whether one of r's bindings can match an event
// of the relay's own (its first word hookrelay, or a wildcard).
func (r *Route) BindsRelayEvents() bool {
	for _, b := range r.Bindings {
		first, _, _ := strings.Cut(b, ".")
		if first == store.RelaySource || first == "*" || first == "#" {
			return true
		}
	}
	return false
}

// Sees reports whether r takes an event about team's routes or jobs: the
// team's own routes do, and the platform's.
func (r *Route) Sees(team string) bool {
	own := r.Team
	if own == "" {
		own = store.PlatformTeam
	}
	return own == store.PlatformTeam || own == team
}

// Set is the routes at one moment, by name.
type Set struct {
	routes []*Route
	byName map[string]*Route
	// key identifies the stored state the set was built from.
	key string
}

func newSet(routes []*Route, key string) *Set {
	slices.SortFunc(routes, func(a, b *Route) int { return cmp.Compare(a.Name, b.Name) })
	s := &Set{routes: routes, byName: make(map[string]*Route, len(routes)), key: key}
	for _, r := range routes {
		s.byName[r.Name] = r
	}
	return s
}

// Declared returns a Set of cfg's routes only, their keys decoded.
func Declared(cfg *config.Config) (*Set, error) {
	routes, err := declared(cfg)
	if err != nil {
		return nil, err
	}
	return newSet(routes, ""), nil
}

func declared(cfg *config.Config) ([]*Route, error) {
	var out []*Route
	for i, r := range cfg.Routes {
		var keys [][]byte
		for _, secret := range append([]string{r.SigningSecret}, r.SigningSecrets...) {
			if secret == "" {
				continue
			}
			key, err := signature.DecodeStandardSecret(secret)
			if err != nil {
				return nil, &config.Error{Problems: []string{"routes[" + itoa(i) + "].signing_secret: " + err.Error()}}
			}
			keys = append(keys, key)
		}
		route := &Route{Route: r, Declared: true, Keys: keys}
		if err := compileRules(route, cfg.RuleLimits()); err != nil {
			return nil, &config.Error{Problems: []string{"routes[" + r.Name + "]." + err.Error()}}
		}
		out = append(out, route)
	}
	return out, nil
}

// All returns every route, retiring ones included, by name.
func (s *Set) All() []*Route { return s.routes }

// Get returns the route name, nil when the set has none (or is nil).
func (s *Set) Get(name string) *Route {
	if s == nil {
		return nil
	}
	return s.byName[name]
}

// Names returns every route's name, retiring ones included.
func (s *Set) Names() []string {
	if s == nil {
		return nil
	}
	out := make([]string, len(s.routes))
	for i, r := range s.routes {
		out[i] = r.Name
	}
	return out
}

// Match names the routes whose bindings match a routing key, as the topic
// exchange routes it: retiring routes take no new event.
func (s *Set) Match(key string) []string {
	var out []string
	for _, r := range s.routes {
		if r.Retiring {
			continue
		}
		for _, b := range r.Bindings {
			if topic.Match(b, key) {
				out = append(out, r.Name)
				break
			}
		}
	}
	return out
}

// Store is what a Follower reads.
type Store interface {
	RouteRows(ctx context.Context) ([]store.RouteRow, time.Time, error)
	Listen(ctx context.Context, channel string, wake chan<- struct{}, logger zerolog.Logger) error
}

// WatchFunc is told of a change: old and new sets. It runs on the
// Follower's goroutine, one change at a time, in order.
type WatchFunc func(ctx context.Context, old, new *Set)

// Follower follows the routes.
type Follower struct {
	cfg     *config.Config
	store   Store
	keyring *Keyring
	logger  zerolog.Logger
	poll    time.Duration

	cur      atomic.Pointer[Set]
	mu       sync.Mutex
	watchers []WatchFunc
}

// NewFollower returns a Follower of cfg's declared routes and those of st,
// whose secrets keyring opens.
func NewFollower(cfg *config.Config, st Store, keyring *Keyring, logger zerolog.Logger) *Follower {
	return &Follower{cfg: cfg, store: st, keyring: keyring, poll: time.Second,
		logger: logger.With().Str("component", "routes").Logger()}
}

// Load reads the routes once; call it before Current, Watch and Run.
func (f *Follower) Load(ctx context.Context) error {
	s, err := f.read(ctx)
	if err != nil {
		return err
	}
	f.cur.Store(s)
	f.logBroken(nil, s)
	return nil
}

// logBroken logs, at error, each route of s this process cannot deliver
// that old did not have so (new, changed, or broken for another reason).
func (f *Follower) logBroken(old, s *Set) {
	for _, r := range s.All() {
		if r.Broken == nil {
			continue
		}
		if o := old.Get(r.Name); o != nil && o.Version == r.Version && o.Broken != nil && o.Broken.Error() == r.Broken.Error() {
			continue
		}
		f.logger.Error().Err(r.Broken).Str("route", r.Name).Int64("version", r.Version).Strs("bindings", r.Bindings).
			Msg("route made at run time cannot be opened by this process: it is not delivered here, its messages wait in its queue; its bindings and pairs stay")
	}
}

// Current returns the latest set.
func (f *Follower) Current() *Set { return f.cur.Load() }

// Watch adds fn to the watchers.
func (f *Follower) Watch(fn WatchFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.watchers = append(f.watchers, fn)
}

// Run follows the routes until ctx is done, then returns nil: at each
// notification and every second. A failed read is logged and tried again;
// the last set stays meanwhile.
func (f *Follower) Run(ctx context.Context) error {
	wake := make(chan struct{}, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := f.store.Listen(ctx, store.RoutesChannel, wake, f.logger); err != nil && ctx.Err() == nil {
			f.logger.Error().Err(err).Msg("listening for route changes stopped; polling only")
		}
	}()
	defer wg.Wait()
	t := time.NewTicker(f.poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-t.C:
		}
		if err := f.Refresh(ctx); err != nil && ctx.Err() == nil {
			f.logger.Warn().Err(err).Msg("reading routes; keeping the last ones")
		}
	}
}

// Refresh reads the routes now and tells the watchers when they changed.
func (f *Follower) Refresh(ctx context.Context) error {
	s, err := f.read(ctx)
	if err != nil {
		return err
	}
	old := f.cur.Load()
	if old != nil && old.key == s.key {
		return nil
	}
	f.cur.Store(s)
	f.logBroken(old, s)
	f.mu.Lock()
	watchers := slices.Clone(f.watchers)
	f.mu.Unlock()
	for _, w := range watchers {
		w(ctx, old, s)
	}
	return nil
}

// read builds the set from the config and the stored run-time routes.
func (f *Follower) read(ctx context.Context) (*Set, error) {
	routes, err := declared(f.cfg)
	if err != nil {
		return nil, err
	}
	rows, dbNow, err := f.store.RouteRows(ctx)
	if err != nil {
		return nil, err
	}
	local := time.Now()
	var key []byte
	for _, row := range rows {
		if row.Declared || !row.RetiredAt.IsZero() {
			continue
		}
		key = append(key, row.Name...)
		key = append(key, ':')
		key = append(key, itoa(int(row.Version))...)
		key = append(key, ';')
		r, err := f.route(row, local, dbNow)
		if err != nil {
			return nil, err
		}
		routes = append(routes, r)
	}
	return newSet(routes, string(key)), nil
}

// route builds a run-time route from its row; one this process cannot
// deliver says why in Broken, its bindings read all the same. A route
// whose bindings do not read is an error: with them unknown, no process
// may touch its queue's bindings or decide its pairs (routes.spec is
// jsonb, and every version stores bindings as a list of strings, so only
// a row altered by hand gets here).
func (f *Follower) route(row store.RouteRow, local, dbNow time.Time) (*Route, error) {
	r := &Route{Declared: false, Version: row.Version, ChangedAt: row.UpdatedAt, Retiring: row.Deleted(), Disposal: row.Disposal,
		SecretFingerprint: row.SecretFingerprint, PreviousFingerprint: row.PreviousFingerprint}
	bindings, err := DecodeBindings(row.Spec)
	if err != nil {
		return nil, fmt.Errorf("route %q: %w", row.Name, err)
	}
	broken := func(err error) (*Route, error) {
		// What reads of the settings, header values left out, so the
		// listings show the route as it is; the bindings in any case.
		if spec, serr := DecodeSpec(row.Spec); serr == nil {
			spec.Headers, spec.SealedHeaders = nil, nil
			if shown, serr := spec.Route(row.Name, row.Team); serr == nil {
				r.Route = shown
			}
		}
		r.Name, r.Team, r.Bindings = row.Name, row.Team, bindings
		r.Broken = err
		return r, nil
	}
	spec, err := DecodeSpec(row.Spec)
	if err == nil {
		spec, err = spec.Open(f.keyring, row.Name)
	}
	if err == nil {
		r.Route, err = spec.Route(row.Name, row.Team)
	}
	if err == nil {
		err = compileRules(r, f.cfg.RuleLimits())
	}
	if err != nil {
		return broken(err)
	}
	key, err := f.keyring.Open(row.Name, row.Secret)
	if err != nil {
		return broken(fmt.Errorf("signing secret: %w", err))
	}
	r.Keys = [][]byte{key}
	if row.PreviousSecret != nil && row.PreviousUntil.After(dbNow) {
		prev, err := f.keyring.Open(row.Name, row.PreviousSecret)
		if err != nil {
			return broken(fmt.Errorf("previous signing secret: %w", err))
		}
		r.Previous, r.PreviousUntil = prev, local.Add(row.PreviousUntil.Sub(dbNow))
	}
	return r, nil
}

func itoa(i int) string { return strconv.Itoa(i) }

// Of returns a Set of routes as given (declared, no keys): for a process
// that only reads them, and for tests.
func Of(routes ...config.Route) *Set {
	list := make([]*Route, len(routes))
	for i, r := range routes {
		list[i] = &Route{Route: r, Declared: true}
		if err := compileRules(list[i], rule.Limits{}); err != nil {
			list[i].Broken = err
		}
	}
	return newSet(list, "")
}
