package ops

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/netguard"
	"github.com/hookrelay/hookrelay/internal/routeset"
	"github.com/hookrelay/hookrelay/internal/store"
)

// ErrConflict refuses a change the route's state does not allow: a route
// of config.yaml changed at run time, a deletion with a backlog, a change
// raced by another.
var ErrConflict = errors.New("conflict")

// ErrNoKey refuses to make or rotate a route's secret without
// secrets.key.
var ErrNoKey = routeset.ErrNoKey

// ErrDestinationRefused refuses a team's route whose url reaches the
// relay's own side (internal/netguard). It comes with ErrInvalidRequest;
// the API answers it 422 destination_refused.
var ErrDestinationRefused = errors.New("destination refused")

// lookupTimeout bounds the lookup of a team route's host name when the
// route is saved.
const lookupTimeout = 5 * time.Second

// What a deleted route's backlog comes to (RouteDelete's disposal).
const (
	DisposeDeliver    = store.DisposeDeliver
	DisposeDeadLetter = store.DisposeDeadLetter
)

// RouteAdminStore is what making, changing and deleting routes at run
// time needs from Postgres (*store.DB).
type RouteAdminStore interface {
	RouteGet(ctx context.Context, name string) (store.RouteRow, error)
	RouteCreate(ctx context.Context, r store.RouteRow, e *store.AuditEntry) error
	RouteUpdate(ctx context.Context, name string, version int64, spec []byte, e *store.AuditEntry) error
	RouteRotateSecret(ctx context.Context, name string, secret []byte, fingerprint string, overlap time.Duration, e *store.AuditEntry) (time.Time, error)
	RouteDelete(ctx context.Context, name, disposal string, e *store.AuditEntry) (int64, error)
	RouteReseal(ctx context.Context, reseal func(route string, sealed []byte) ([]byte, error),
		resealSpec func(route string, spec []byte) ([]byte, error), e *store.AuditEntry) (int, error)
	SourceList(ctx context.Context) ([]store.Owned, error)
}

// RouteInput is a route's settings as made or changed at run time. A
// field left out (nil) gets its default when the route is made, and keeps
// its value when it is changed; Headers given replace them all ({}
// clears them).
type RouteInput struct {
	// Team owns the route (made only): default the caller's team.
	Team            string            `json:"team,omitempty" doc:"The team that owns the route (on create; default the token's team)."`
	Kind            *string           `json:"kind,omitempty" doc:"http (POST each event to url; the default) or amqp (publish it to exchange on the broker at url)."`
	URL             *string           `json:"url,omitempty" doc:"The destination: an http:// or https:// URL; for kind amqp an amqp:// or amqps:// URL (its credentials are stored sealed)."`
	Exchange        *string           `json:"exchange,omitempty" doc:"Kind amqp: the exchange to publish to (it must exist on the destination broker)."`
	RoutingKey      *string           `json:"routing_key,omitempty" doc:"Kind amqp: the routing key, a template over the event: {source}, {event_type}, {event_id}, {body.PATH}. Default {source}.{event_type}."`
	Bindings        []string          `json:"bindings,omitempty" doc:"Topic patterns over <source>.<event_type>, e.g. acme.invoice.*"`
	Timeout         *string           `json:"timeout,omitempty" doc:"One attempt's time limit, with a unit (10s). Default 10s, at most 5m."`
	Concurrency     *int              `json:"concurrency,omitempty" doc:"Consumers per dispatcher (1-256). Default 1."`
	Headers         map[string]string `json:"headers,omitempty" doc:"Headers added to every delivery; given, they replace all ({} clears)."`
	NoRetryStatuses []int             `json:"no_retry_statuses,omitempty" doc:"Statuses that go straight to dead letters, like 410."`
	MaxAttempts     *int              `json:"max_attempts,omitempty" doc:"Attempts before dead-lettering. Default one per retry tier plus the first."`
	CircuitFailures *int              `json:"circuit_failures,omitempty" doc:"Consecutive failures that open the circuit; 0 turns it off. Default 10."`
	CircuitCooldown *string           `json:"circuit_cooldown,omitempty" doc:"How long the circuit stays open before a probe (1s-10m). Default 30s."`
	RateLimit       *float64          `json:"rate_limit,omitempty" doc:"Deliveries per second for the route; 0 for none. Default 0."`
	Burst           *int              `json:"burst,omitempty" doc:"Deliveries that may go at once after a quiet spell. Default 1."`
	Ordering        *string           `json:"ordering,omitempty" doc:"none, drop_stale or fifo (by each source's ordering resource: one event of a resource at a time, in the order accepted). Default none."`
	OnDead          *string           `json:"on_dead,omitempty" doc:"With ordering fifo: block (a dead event holds its resource until its dead letter is requeued) or skip (the next event goes). Default block; empty removes it."`
	SendTraceparent *bool             `json:"send_traceparent,omitempty" doc:"Send the trace context (traceparent) to the destination when tracing. Default true."`
	// Rules (docs/rules.md): "" removes one.
	Filter           *string `json:"filter,omitempty" doc:"A CEL expression over the event (body, headers, source, event_type, received_at): the route takes an event only when it yields true. Empty removes it."`
	Transform        *string `json:"transform,omitempty" doc:"A CEL expression that yields the body to deliver (a map or list as JSON, a string as is). Empty removes it: the event's body as received."`
	TransformHeaders *string `json:"transform_headers,omitempty" doc:"A CEL expression that yields a map of headers to add to each delivery. Empty removes it."`
}

// apply sets r's settings that in gives.
func (in RouteInput) apply(r *config.Route) error {
	dur := func(key string, s *string, to *time.Duration) error {
		if s == nil {
			return nil
		}
		d, err := config.ParseDuration(*s)
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrInvalidRequest, key, err)
		}
		*to = d
		return nil
	}
	if err := dur("timeout", in.Timeout, &r.Timeout); err != nil {
		return err
	}
	if err := dur("circuit_cooldown", in.CircuitCooldown, &r.Circuit.Cooldown); err != nil {
		return err
	}
	set := func(to *int, from *int) {
		if from != nil {
			*to = *from
		}
	}
	if in.URL != nil {
		r.URL = *in.URL
	}
	if in.Kind != nil {
		r.Kind = *in.Kind
	}
	if in.Exchange != nil {
		r.Exchange = *in.Exchange
	}
	if in.RoutingKey != nil {
		r.RoutingKey = *in.RoutingKey
	}
	if in.Bindings != nil {
		r.Bindings = slices.Clone(in.Bindings)
	}
	if in.Headers != nil {
		r.Headers = in.Headers
	}
	if in.NoRetryStatuses != nil {
		r.NoRetryStatuses = slices.Clone(in.NoRetryStatuses)
	}
	set(&r.Concurrency, in.Concurrency)
	set(&r.MaxAttempts, in.MaxAttempts)
	set(&r.Circuit.Failures, in.CircuitFailures)
	set(&r.Burst, in.Burst)
	if in.RateLimit != nil {
		r.RateLimit = *in.RateLimit
	}
	if in.Ordering != nil {
		r.Ordering = *in.Ordering
	}
	if in.OnDead != nil {
		r.OnDead = *in.OnDead
	}
	if in.SendTraceparent != nil {
		v := *in.SendTraceparent
		r.SendTraceparent = &v
	}
	if in.Filter != nil {
		r.Filter = *in.Filter
	}
	if in.Transform != nil {
		r.Transform = *in.Transform
	}
	if in.TransformHeaders != nil {
		r.TransformHeaders = *in.TransformHeaders
	}
	return nil
}

// RouteDetail is one route: its settings, how it stands and its secrets'
// fingerprints (never a secret).
type RouteDetail struct {
	Name string `json:"name"`
	Team string `json:"team"`
	// Declared: a route of config.yaml, read-only at run time.
	Declared bool  `json:"declared"`
	Version  int64 `json:"version,omitempty"`
	// Settings; header values, and the URL's credentials and query, are
	// not shown (they may carry a token).
	Settings            routeset.Spec `json:"settings"`
	SecretFingerprint   string        `json:"secret_fingerprint,omitempty"`
	PreviousFingerprint string        `json:"previous_fingerprint,omitempty"`
	PreviousUntil       *time.Time    `json:"previous_until,omitempty"`
	Deleted             bool          `json:"deleted,omitempty"`
	Disposal            string        `json:"disposal,omitempty"`
}

// RouteCreated is a route just made, with its signing secret: shown this
// once, stored sealed.
type RouteCreated struct {
	Route  RouteDetail `json:"route"`
	Secret string      `json:"secret" doc:"The route's signing secret (whsec_...): shown once; give it to the destination."`
}

// SecretRotated is a route's new signing secret, shown once; the previous
// one still signs until PreviousUntil.
type SecretRotated struct {
	Route         string     `json:"route"`
	Secret        string     `json:"secret"`
	Fingerprint   string     `json:"fingerprint"`
	PreviousUntil *time.Time `json:"previous_until,omitempty"`
}

// RouteDeleted reports a deletion: the backlog the dispatchers finish as
// Disposal says before the route goes.
type RouteDeleted struct {
	Route       string `json:"route"`
	Undelivered int64  `json:"undelivered"`
	Disposal    string `json:"disposal"`
}

// detail builds a RouteDetail of r, header values hidden.
func detail(r *routeset.Route) *RouteDetail {
	spec := routeset.SpecOf(r.Route)
	for k := range spec.Headers {
		spec.Headers[k] = "(set)"
	}
	spec.URL = shownURL(spec.URL)
	if spec.Bindings == nil {
		spec.Bindings = []string{}
	}
	d := &RouteDetail{Name: r.Name, Team: cmp.Or(r.Team, PlatformTeam), Declared: r.Declared, Version: r.Version, Settings: spec,
		SecretFingerprint: r.SecretFingerprint, PreviousFingerprint: r.PreviousFingerprint, Deleted: r.Retiring, Disposal: r.Disposal}
	if r.PreviousFingerprint != "" && !r.PreviousUntil.IsZero() {
		t := r.PreviousUntil
		d.PreviousUntil = &t
	}
	return d
}

// shownURL is a destination as listings show it: without credentials,
// query or fragment (either may carry a token).
func shownURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(invalid url)"
	}
	hidden := u.User != nil || u.RawQuery != ""
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	if hidden {
		return u.String() + " (credentials or query not shown)"
	}
	return u.String()
}

// RouteGet returns route name as ctx's team sees it.
func (s *Service) RouteGet(ctx context.Context, name string) (*RouteDetail, error) {
	if err := s.requireRoute(ctx, name); err != nil {
		return nil, err
	}
	if r := s.RoutesNow().Get(name); r != nil && r.Declared {
		return detail(r), nil
	}
	// A run-time route as stored: this process's routes may be a second
	// behind.
	row, err := s.Store.RouteGet(ctx, name)
	if err != nil {
		return nil, s.routeErr(err)
	}
	r, err := fromRow(nil, row)
	if err != nil {
		return nil, err
	}
	return detail(&routeset.Route{Route: r, Version: row.Version, Retiring: row.Deleted(), Disposal: row.Disposal,
		SecretFingerprint: row.SecretFingerprint, PreviousFingerprint: row.PreviousFingerprint, PreviousUntil: row.PreviousUntil}), nil
}

// fromRow builds the route of a stored run-time route, its header
// values opened with k; with k nil, as listings show it (header names
// only).
func fromRow(k *routeset.Keyring, row store.RouteRow) (config.Route, error) {
	spec, err := routeset.DecodeSpec(row.Spec)
	if err != nil {
		return config.Route{}, err
	}
	if k == nil {
		spec = spec.Shown()
	} else if spec, err = spec.Open(k, row.Name); err != nil {
		return config.Route{}, err
	}
	return spec.Route(row.Name, row.Team)
}

// stored is r's settings as stored: header values sealed with k.
func stored(k *routeset.Keyring, r config.Route) ([]byte, error) {
	spec, err := routeset.SpecOf(r).Seal(k, r.Name)
	if err != nil {
		return nil, err
	}
	return json.Marshal(spec)
}

// sourcesNote says where sources and their subscribers come from.
const sourcesNote = "a source admits its owner's team and the teams listed in its subscribers; " +
	"sources are the config's, stored when a receiver or dispatcher starts"

// checkSubscriptions refuses bindings of team's route to sources whose
// owners do not let team subscribe (sources[].subscribers). A pattern
// whose first word is a wildcard spans every source: the platform's only.
func (s *Service) checkSubscriptions(ctx context.Context, team string, bindings []string) error {
	if team == PlatformTeam {
		return nil
	}
	// Every source's owner and subscribers, whatever the caller's team
	// sees: the check is the relay's, not a listing.
	sources, err := s.Store.SourceList(WithTeam(ctx, PlatformTeam))
	if err != nil {
		return err
	}
	for _, b := range bindings {
		first, _, _ := strings.Cut(b, ".")
		if first == "*" || first == "#" {
			return fmt.Errorf("%w: bindings: %q spans every source; a team's route names its source (the first word)", ErrInvalidRequest, b)
		}
		i := slices.IndexFunc(sources, func(o store.Owned) bool { return o.Name == first })
		admits := i >= 0 && (sources[i].Team == team || slices.Contains(sources[i].Subscribers, team) || slices.Contains(sources[i].Subscribers, "*"))
		switch {
		case admits:
		case !Platform(ctx):
			// A team's token learns nothing of the sources it may not
			// use: one that does not admit it answers as one there is not.
			return fmt.Errorf("%w: bindings: %q: there is no source %q that admits team %s (%s)", ErrInvalidRequest, b, first, team, sourcesNote)
		case i < 0:
			return fmt.Errorf("%w: bindings: %q: there is no source %q (%s)", ErrInvalidRequest, b, first, sourcesNote)
		default:
			return fmt.Errorf("%w: bindings: %q: source %q does not admit team %s (%s)", ErrInvalidRequest, b, first, team, sourcesNote)
		}
	}
	return nil
}

// checked validates r by the config's rules, as ErrInvalidRequest.
func (s *Service) checked(r config.Route) error {
	if err := s.Config.CheckRoute(r); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	}
	return nil
}

// checkDestination refuses a team's route whose url is on the relay's
// side (loopback, private, link-local, ...; team_routes.allowed_networks
// aside): a literal address, or a name that resolves to one now. The
// dispatchers check each address again when they connect, which also
// covers a name that resolves elsewhere later, or does not resolve now.
// The platform's own routes are the operator's, as config.yaml's are.
func (s *Service) checkDestination(ctx context.Context, r config.Route) error {
	if r.Team == PlatformTeam {
		return nil
	}
	u, err := url.Parse(r.URL)
	if err != nil {
		return fmt.Errorf("%w: url: must be an http://, https:// (or, kind amqp, amqp://) URL with a host", ErrInvalidRequest)
	}
	lookup := net.DefaultResolver.LookupNetIP
	if s.Resolver != nil {
		lookup = s.Resolver.LookupNetIP
	}
	guard := s.Guard
	if guard == nil {
		guard = netguard.New(s.Config.AllowedNetworks())
	}
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	err = guard.CheckHost(ctx, u.Hostname(), lookup)
	var refused *netguard.RefusedError
	if errors.As(err, &refused) {
		return fmt.Errorf("%w: url: %w: %s; a team's route reaches public addresses only, and the networks of team_routes.allowed_networks",
			ErrInvalidRequest, ErrDestinationRefused, refused.Detail())
	}
	return err
}

// RouteCreate makes route name for ctx's team (or in.Team, for the
// platform) with a new signing secret, shown once in the answer.
func (s *Service) RouteCreate(ctx context.Context, name string, in RouteInput) (*RouteCreated, error) {
	team := cmp.Or(in.Team, OwnTeam(ctx))
	if prefix, _, ok := strings.Cut(name, ":"); ok && in.Team == "" {
		team = prefix // TEAM:NAME names its team
	}
	if !Platform(ctx) && team != OwnTeam(ctx) {
		return nil, fmt.Errorf("%w: a team's token makes routes for its own team", ErrForbidden)
	}
	r := config.Route{Name: name, Team: team}
	if err := in.apply(&r); err != nil {
		return nil, err
	}
	s.Config.RouteDefaults(&r)
	if in.CircuitFailures == nil {
		r.Circuit.Failures = 10
	}
	if err := s.checked(r); err != nil {
		return nil, err
	}
	if Platform(ctx) && team != PlatformTeam {
		teams, err := s.Store.TeamList(ctx)
		if err != nil {
			return nil, err
		}
		if !slices.ContainsFunc(teams, func(t store.Team) bool { return t.Name == team }) {
			return nil, s.routeErr(fmt.Errorf("team %q: %w", team, store.ErrNoTeam))
		}
	}
	if err := checkRouteName(name, team); err != nil {
		return nil, err
	}
	if err := s.checkSubscriptions(ctx, team, r.Bindings); err != nil {
		return nil, err
	}
	if err := s.checkDestination(ctx, r); err != nil {
		return nil, err
	}
	whsec, sealed, fp, err := s.newSecret(name)
	if err != nil {
		return nil, err
	}
	spec, err := stored(s.Keyring, r)
	if err != nil {
		return nil, err
	}
	e, err := entry(ctx, ActionRouteCreate, name, map[string]any{"team": team, "bindings": r.Bindings})
	if err != nil {
		return nil, err
	}
	if err := s.Store.RouteCreate(ctx, store.RouteRow{Name: name, Team: team, Spec: spec, Secret: sealed, SecretFingerprint: fp}, e); err != nil {
		return nil, s.routeErr(err)
	}
	return &RouteCreated{Secret: whsec, Route: *detail(&routeset.Route{Route: r, Version: 1, SecretFingerprint: fp})}, nil
}

// checkRouteName refuses a name outside team's namespace. A route of a
// team other than the platform is named TEAM:NAME (payments:ledger), so
// its name can meet neither a route of config.yaml (whose names have no
// colon), which the platform may add at any time and which would then be
// refused at every start, nor another team's, whose taking a name would
// answer 409 and tell of it. The platform's run-time routes take plain
// names, as the config's do.
func checkRouteName(name, team string) error {
	prefix, _, namespaced := strings.Cut(name, ":")
	switch {
	case team == PlatformTeam && namespaced:
		return fmt.Errorf("%w: name: %q: a route of the platform team has no TEAM: prefix", ErrInvalidRequest, name)
	case team != PlatformTeam && (!namespaced || prefix != team):
		return fmt.Errorf("%w: name: %q: a route of team %s is named %s:NAME (%s:ledger), so that it never meets a route of config.yaml or of another team",
			ErrInvalidRequest, name, team, team, team)
	}
	return nil
}

// newSecret makes route's signing secret: as shown once (whsec_...),
// sealed for storage, and its fingerprint.
func (s *Service) newSecret(route string) (whsec string, sealed []byte, fingerprint string, err error) {
	if !s.Keyring.Usable() {
		return "", nil, "", ErrNoKey
	}
	whsec, raw, err := routeset.NewSecret()
	if err != nil {
		return "", nil, "", err
	}
	if sealed, err = s.Keyring.Seal(route, raw); err != nil {
		return "", nil, "", err
	}
	return whsec, sealed, routeset.Fingerprint(raw), nil
}

// RouteUpdate changes the settings in gives of run-time route name.
func (s *Service) RouteUpdate(ctx context.Context, name string, in RouteInput) (*RouteDetail, error) {
	if err := s.requireRuntime(ctx, name); err != nil {
		return nil, err
	}
	if in.Team != "" {
		return nil, fmt.Errorf("%w: team: a route's team does not change", ErrInvalidRequest)
	}
	for range 3 { // another change in between: read it and apply in again
		row, err := s.Store.RouteGet(ctx, name)
		if err != nil {
			return nil, s.routeErr(err)
		}
		if row.Declared {
			return nil, s.routeErr(fmt.Errorf("route %q: %w", name, store.ErrDeclared))
		}
		r, err := fromRow(s.Keyring, row)
		if err != nil {
			return nil, err
		}
		if err := in.apply(&r); err != nil {
			return nil, err
		}
		if err := s.checked(r); err != nil {
			return nil, err
		}
		if err := s.checkSubscriptions(ctx, row.Team, r.Bindings); err != nil {
			return nil, err
		}
		if err := s.checkDestination(ctx, r); err != nil {
			return nil, err
		}
		spec, err := stored(s.Keyring, r)
		if err != nil {
			return nil, err
		}
		// The audit row's args: the fields given, as the API takes them,
		// with what the route view hides hidden (any viewer reads the log).
		raw, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		args := map[string]any{}
		if err := json.Unmarshal(raw, &args); err != nil {
			return nil, err
		}
		delete(args, "headers") // values may carry a token
		if in.Headers != nil {
			args["headers"] = slices.Sorted(maps.Keys(in.Headers))
		}
		if in.URL != nil { // as the route view shows it: its credentials and query may carry a token
			args["url"] = shownURL(*in.URL)
		}
		e, err := entry(ctx, ActionRouteUpdate, name, args)
		if err != nil {
			return nil, err
		}
		err = s.Store.RouteUpdate(ctx, name, row.Version, spec, e)
		if errors.Is(err, store.ErrChanged) {
			continue
		}
		if err != nil {
			return nil, s.routeErr(err)
		}
		return detail(&routeset.Route{Route: r, Version: row.Version + 1, SecretFingerprint: row.SecretFingerprint,
			PreviousFingerprint: row.PreviousFingerprint, PreviousUntil: row.PreviousUntil}), nil
	}
	return nil, fmt.Errorf("%w: route %q kept changing under this update; try again", ErrConflict, name)
}

// RouteRotateSecret gives run-time route name a new signing secret, shown
// once; the previous one still signs for overlap (nil: secrets.overlap).
func (s *Service) RouteRotateSecret(ctx context.Context, name string, overlap *time.Duration) (*SecretRotated, error) {
	if err := s.requireRuntime(ctx, name); err != nil {
		return nil, err
	}
	d := s.Config.Secrets.Overlap
	if overlap != nil {
		d = *overlap
	}
	if d < 0 || d > 720*time.Hour {
		return nil, fmt.Errorf("%w: overlap: %s is not between 0s and 720h", ErrInvalidRequest, d)
	}
	whsec, sealed, fp, err := s.newSecret(name)
	if err != nil {
		return nil, err
	}
	e, err := entry(ctx, ActionRouteRotateSecret, name, map[string]any{"overlap": config.FormatDuration(d)})
	if err != nil {
		return nil, err
	}
	until, err := s.Store.RouteRotateSecret(ctx, name, sealed, fp, d, e)
	if err != nil {
		return nil, s.routeErr(err)
	}
	out := &SecretRotated{Route: name, Secret: whsec, Fingerprint: fp}
	if d > 0 {
		out.PreviousUntil = &until
	}
	return out, nil
}

// RouteDelete deletes run-time route name. With undelivered work it is
// refused unless disposal says what to do with it: store.DisposeDeliver
// (the dispatchers deliver it first) or store.DisposeDeadLetter (they
// move it to the route's dead letters). Either way the route takes no
// new event, and goes once its backlog is done; its dead letters stay.
func (s *Service) RouteDelete(ctx context.Context, name, disposal string) (*RouteDeleted, error) {
	if err := s.requireRuntime(ctx, name); err != nil {
		return nil, err
	}
	if disposal != "" && disposal != store.DisposeDeliver && disposal != store.DisposeDeadLetter {
		return nil, fmt.Errorf("%w: disposal: %q is not deliver or dead_letter", ErrInvalidRequest, disposal)
	}
	e, err := entry(ctx, ActionRouteDelete, name, map[string]any{"disposal": disposal})
	if err != nil {
		return nil, err
	}
	n, err := s.Store.RouteDelete(ctx, name, disposal, e)
	if err != nil {
		return nil, s.routeErr(err)
	}
	return &RouteDeleted{Route: name, Undelivered: n, Disposal: cmp.Or(disposal, store.DisposeDeadLetter)}, nil
}

// RouteReseal seals every run-time route's secrets with secrets.key (a
// key rotation: the old key in secrets.previous_keys until this ran): its
// signing secrets and its header values.
func (s *Service) RouteReseal(ctx context.Context) (int, error) {
	if err := requirePlatform(ctx, "reseal route secrets"); err != nil {
		return 0, err
	}
	e, err := entry(ctx, ActionRouteReseal, "", nil)
	if err != nil {
		return 0, err
	}
	return s.Store.RouteReseal(ctx, s.Keyring.Reseal, func(route string, spec []byte) ([]byte, error) {
		return routeset.ResealSpec(s.Keyring, route, spec)
	}, e)
}

// requireRuntime is requireRoute for a change of a run-time route: a
// route of the config is refused as such.
func (s *Service) requireRuntime(ctx context.Context, name string) error {
	if err := s.requireRoute(ctx, name); err != nil {
		return err
	}
	if r := s.RoutesNow().Get(name); r != nil && r.Declared {
		return s.routeErr(fmt.Errorf("route %q: %w", name, store.ErrDeclared))
	}
	return nil
}

// routeErr words the store's refusals of a route change.
func (s *Service) routeErr(err error) error {
	var backlog *store.BacklogError
	switch {
	case errors.Is(err, store.ErrDeclared):
		return fmt.Errorf("%w: %v", ErrConflict, err)
	case errors.As(err, &backlog):
		return fmt.Errorf("%w: %v: deliver them first (--drain; disposal deliver) or move them to its dead letters (--dead-letter; disposal dead_letter)",
			ErrConflict, err)
	case errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("%w: %v", ErrUnknownRoute, err)
	case errors.Is(err, store.ErrNoTeam):
		return fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	}
	return err
}
