package routeset

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"slices"

	"github.com/hookrelay/hookrelay/internal/config"
)

// Spec is a run-time route's settings as stored (routes.spec), every one
// given: config.RouteDefaults filled what its maker left out.
type Spec struct {
	// Kind is http ("" too) or amqp; Exchange and RoutingKey an amqp
	// route's.
	Kind       string `json:"kind,omitempty"`
	Exchange   string `json:"exchange,omitempty"`
	RoutingKey string `json:"routing_key,omitempty"`
	// URL is the destination; one with credentials (an amqp route's
	// broker login) is stored without them, and whole in SealedURL.
	URL             string            `json:"url"`
	Bindings        []string          `json:"bindings"`
	Timeout         string            `json:"timeout"`
	Concurrency     int               `json:"concurrency"`
	Headers         map[string]string `json:"headers,omitempty"`
	NoRetryStatuses []int             `json:"no_retry_statuses,omitempty"`
	MaxAttempts     int               `json:"max_attempts"`
	CircuitFailures int               `json:"circuit_failures"`
	CircuitCooldown string            `json:"circuit_cooldown"`
	RateLimit       float64           `json:"rate_limit,omitempty"`
	Burst           int               `json:"burst"`
	Ordering        string            `json:"ordering,omitempty"`
	// OnDead is what a fifo route does with a dead event's resource:
	// block ("" too) or skip.
	OnDead string `json:"on_dead,omitempty"`
	// SendTraceparent false keeps the trace context out of the requests;
	// nil is true.
	SendTraceparent *bool `json:"send_traceparent,omitempty"`
	// Filter, Transform and TransformHeaders are the route's rules
	// (docs/rules.md), "" for none.
	Filter           string `json:"filter,omitempty"`
	Transform        string `json:"transform,omitempty"`
	TransformHeaders string `json:"transform_headers,omitempty"`
	// SealedHeaders are the header values as stored, each sealed like the
	// signing secret (a header may carry a token); Headers is empty then.
	SealedHeaders map[string][]byte `json:"sealed_headers,omitempty" hidden:"true"`
	// SealedURL is the URL with its credentials, sealed like the
	// signing secret; URL then has none.
	SealedURL []byte `json:"sealed_url,omitempty" hidden:"true"`
}

// urlAAD binds a sealed URL to its route.
func urlAAD(route string) string { return route + "#url" }

// withoutUser returns raw without its credentials, and whether it had
// any.
func withoutUser(raw string) (string, bool) {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw, false
	}
	u.User = nil
	return u.String(), true
}

// headerAAD binds a sealed header value to its route and name.
func headerAAD(route, name string) string { return route + "#header:" + name }

// Seal returns s as stored for route: its header values sealed with k.
func (s Spec) Seal(k *Keyring, route string) (Spec, error) {
	if shown, had := withoutUser(s.URL); had {
		sealed, err := k.Seal(urlAAD(route), []byte(s.URL))
		if err != nil {
			return s, err
		}
		s.URL, s.SealedURL = shown, sealed
	}
	if len(s.Headers) == 0 {
		return s, nil
	}
	s.SealedHeaders = make(map[string][]byte, len(s.Headers))
	for name, v := range s.Headers {
		sealed, err := k.Seal(headerAAD(route, name), []byte(v))
		if err != nil {
			return s, err
		}
		s.SealedHeaders[name] = sealed
	}
	s.Headers = nil
	return s, nil
}

// Open returns a stored spec of route with its header values opened.
func (s Spec) Open(k *Keyring, route string) (Spec, error) {
	if len(s.SealedURL) > 0 {
		v, err := k.Open(urlAAD(route), s.SealedURL)
		if err != nil {
			return s, fmt.Errorf("url: %w", err)
		}
		s.URL, s.SealedURL = string(v), nil
	}
	if len(s.SealedHeaders) == 0 {
		return s, nil
	}
	s.Headers = make(map[string]string, len(s.SealedHeaders))
	for name, sealed := range s.SealedHeaders {
		v, err := k.Open(headerAAD(route, name), sealed)
		if err != nil {
			return s, fmt.Errorf("header %s: %w", name, err)
		}
		s.Headers[name] = string(v)
	}
	s.SealedHeaders = nil
	return s, nil
}

// ResealSpec returns raw, a run-time route's stored settings, with each
// sealed header value sealed again with k's current key (a key rotation,
// like Keyring.Reseal for the signing secret); raw as it is when it has
// none. Every other field is kept as stored, known to this version or
// not.
func ResealSpec(k *Keyring, route string, raw []byte) ([]byte, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, fmt.Errorf("reading the route's stored settings: %w", err)
	}
	if urlRaw, ok := fields["sealed_url"]; ok {
		var sealed []byte
		if err := json.Unmarshal(urlRaw, &sealed); err != nil {
			return nil, fmt.Errorf("reading the route's sealed url: %w", err)
		}
		again, err := k.Reseal(urlAAD(route), sealed)
		if err != nil {
			return nil, fmt.Errorf("url: %w", err)
		}
		if fields["sealed_url"], err = json.Marshal(again); err != nil {
			return nil, err
		}
		raw, err = json.Marshal(fields)
		if err != nil {
			return nil, err
		}
	}
	sealedRaw, ok := fields["sealed_headers"]
	if !ok {
		return raw, nil
	}
	var sealed map[string][]byte
	if err := json.Unmarshal(sealedRaw, &sealed); err != nil {
		return nil, fmt.Errorf("reading the route's sealed headers: %w", err)
	}
	if len(sealed) == 0 {
		return raw, nil
	}
	for name, v := range sealed {
		again, err := k.Reseal(headerAAD(route, name), v)
		if err != nil {
			return nil, fmt.Errorf("header %s: %w", name, err)
		}
		sealed[name] = again
	}
	b, err := json.Marshal(sealed)
	if err != nil {
		return nil, err
	}
	fields["sealed_headers"] = b
	return json.Marshal(fields)
}

// Shown returns a stored spec as listings show it: header names only.
func (s Spec) Shown() Spec {
	if len(s.SealedHeaders) > 0 {
		s.Headers = make(map[string]string, len(s.SealedHeaders))
		for name := range s.SealedHeaders {
			s.Headers[name] = "(set)"
		}
		s.SealedHeaders = nil
	}
	s.SealedURL = nil
	return s
}

// SpecOf returns r's settings as a Spec.
func SpecOf(r config.Route) Spec {
	return Spec{
		Kind: r.Kind, Exchange: r.Exchange, RoutingKey: r.RoutingKey,
		URL: r.URL, Bindings: slices.Clone(r.Bindings), Timeout: config.FormatDuration(r.Timeout), Concurrency: r.Concurrency,
		Headers: maps.Clone(r.Headers), NoRetryStatuses: slices.Clone(r.NoRetryStatuses), MaxAttempts: r.MaxAttempts,
		CircuitFailures: r.Circuit.Failures, CircuitCooldown: config.FormatDuration(r.Circuit.Cooldown),
		RateLimit: r.RateLimit, Burst: r.Burst, Ordering: r.Ordering, OnDead: r.OnDead, SendTraceparent: r.SendTraceparent,
		Filter: r.Filter, Transform: r.Transform, TransformHeaders: r.TransformHeaders,
	}
}

// Route returns the route name of team with s's settings.
func (s Spec) Route(name, team string) (config.Route, error) {
	timeout, err := config.ParseDuration(s.Timeout)
	if err != nil {
		return config.Route{}, fmt.Errorf("timeout: %w", err)
	}
	cooldown, err := config.ParseDuration(s.CircuitCooldown)
	if err != nil {
		return config.Route{}, fmt.Errorf("circuit_cooldown: %w", err)
	}
	return config.Route{
		Name: name, Team: team, Kind: s.Kind, Exchange: s.Exchange, RoutingKey: s.RoutingKey, URL: s.URL, Bindings: slices.Clone(s.Bindings), Timeout: timeout, Concurrency: s.Concurrency,
		Headers: maps.Clone(s.Headers), NoRetryStatuses: slices.Clone(s.NoRetryStatuses), MaxAttempts: s.MaxAttempts,
		Circuit: config.Circuit{Failures: s.CircuitFailures, Cooldown: cooldown}, RateLimit: s.RateLimit, Burst: s.Burst, Ordering: s.Ordering, OnDead: s.OnDead,
		SendTraceparent: s.SendTraceparent, Filter: s.Filter, Transform: s.Transform, TransformHeaders: s.TransformHeaders,
	}, nil
}

// DecodeBindings reads the bindings of a stored spec alone: they are
// never sealed, so a process reads them whatever its keys, and whatever
// else of the spec it cannot read.
func DecodeBindings(raw []byte) ([]string, error) {
	var s struct {
		Bindings []string `json:"bindings"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("reading the route's stored bindings: %w", err)
	}
	return s.Bindings, nil
}

// DecodeSpec reads a stored spec.
func DecodeSpec(raw []byte) (Spec, error) {
	var s Spec
	if err := json.Unmarshal(raw, &s); err != nil {
		return s, fmt.Errorf("reading the route's stored settings: %w", err)
	}
	return s, nil
}
