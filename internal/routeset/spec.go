package routeset

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/hookrelay/hookrelay/internal/config"
)

// Spec is a run-time route's settings as stored (routes.spec), every one
// given: config.RouteDefaults filled what its maker left out.
type Spec struct {
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
}

// SpecOf returns r's settings as a Spec.
func SpecOf(r config.Route) Spec {
	return Spec{
		URL: r.URL, Bindings: slices.Clone(r.Bindings), Timeout: config.FormatDuration(r.Timeout), Concurrency: r.Concurrency,
		Headers: maps.Clone(r.Headers), NoRetryStatuses: slices.Clone(r.NoRetryStatuses), MaxAttempts: r.MaxAttempts,
		CircuitFailures: r.Circuit.Failures, CircuitCooldown: config.FormatDuration(r.Circuit.Cooldown),
		RateLimit: r.RateLimit, Burst: r.Burst, Ordering: r.Ordering,
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
		Name: name, Team: team, URL: s.URL, Bindings: slices.Clone(s.Bindings), Timeout: timeout, Concurrency: s.Concurrency,
		Headers: maps.Clone(s.Headers), NoRetryStatuses: slices.Clone(s.NoRetryStatuses), MaxAttempts: s.MaxAttempts,
		Circuit: config.Circuit{Failures: s.CircuitFailures, Cooldown: cooldown}, RateLimit: s.RateLimit, Burst: s.Burst, Ordering: s.Ordering,
	}, nil
}

// DecodeSpec reads a stored spec.
func DecodeSpec(raw []byte) (Spec, error) {
	var s Spec
	if err := json.Unmarshal(raw, &s); err != nil {
		return s, fmt.Errorf("reading the route's stored settings: %w", err)
	}
	return s, nil
}
