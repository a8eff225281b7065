package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRouteControlsDefaultsAndSettings(t *testing.T) {
	t.Parallel()
	env := envMap(map[string]string{"ACME_SECRET": "x"})
	cfg, err := Load(writeConfig(t, validYAML), env)
	require.NoError(t, err)
	r := cfg.Routes[0]
	require.Equal(t, Circuit{Failures: 10, Cooldown: 30 * time.Second}, r.Circuit, "breaker on by default")
	require.Zero(t, r.RateLimit, "no rate limit by default")
	require.Equal(t, 1, r.Burst)

	cfg, err = Load(writeConfig(t, validYAML+"    circuit: {failures: 3}\n    rate_limit: 20.5\n    burst: 5\n"), env)
	require.NoError(t, err)
	r = cfg.Routes[0]
	require.Equal(t, Circuit{Failures: 3, Cooldown: 30 * time.Second}, r.Circuit, "a partial circuit keeps the other default")
	require.Equal(t, 20.5, r.RateLimit)
	require.Equal(t, 5, r.Burst)

	cfg, err = Load(writeConfig(t, validYAML+"    circuit: {failures: 0}\n"), env)
	require.NoError(t, err)
	require.Zero(t, cfg.Routes[0].Circuit.Failures, "0 turns the breaker off")
}

func TestRouteControlsInvalid(t *testing.T) {
	t.Parallel()
	env := envMap(map[string]string{"ACME_SECRET": "x"})
	for _, tc := range []struct{ add, want string }{
		{"    circuit: {cooldown: 30}\n", `routes[billing].circuit.cooldown: duration 30 has no unit`},
		{"    circuit: {cooldown: 500ms}\n", `routes[billing].circuit.cooldown: 500ms is less than 1s`},
		{"    circuit: {cooldown: 11m}\n", `routes[billing].circuit.cooldown: 11m0s is more than 10m`},
		{"    circuit: {failures: -1}\n", `routes[billing].circuit.failures: -1 is less than 0`},
		{"    circuit: {failures: 3, window: 1m}\n", `circuit.window`},
		{"    circuit: 5\n", `routes[billing].circuit: must be a mapping`},
		{"    rate_limit: -1\n", `routes[billing].rate_limit: -1 is less than 0`},
		{"    burst: 0\n", `routes[billing].burst: 0 is less than 1`},
	} {
		_, err := Load(writeConfig(t, validYAML+tc.add), env)
		require.Error(t, err, tc.add)
		require.Contains(t, err.Error(), tc.want, tc.add)
	}
}

// A rate so slow that a consumer's message waits past the 11 minutes a
// held message may wait is never delivered: each consumer takes a message,
// waits its turn, gives it back at the bound, and the message walks toward
// dispatcher.delivery_limit. Such a rate is refused at load, naming the
// least that works for the route's concurrency.
func TestRateLimitTooSlowForTheConsumers(t *testing.T) {
	t.Parallel()
	env := envMap(map[string]string{"ACME_SECRET": "x"})
	for _, tc := range []struct{ add, want string }{
		{"    rate_limit: 0.001\n", `routes[billing].rate_limit: 0.001/s with concurrency 1`},
		{"    rate_limit: 0.01\n    concurrency: 8\n", `set at least 0.0133`},
	} {
		_, err := Load(writeConfig(t, validYAML+tc.add), env)
		require.Error(t, err, tc.add)
		require.Contains(t, err.Error(), tc.want, tc.add)
	}
	for _, ok := range []string{
		"    rate_limit: 0.002\n",                   // one consumer: 500s for its turn
		"    rate_limit: 0.1\n    concurrency: 8\n", // 80s
	} {
		_, err := Load(writeConfig(t, validYAML+ok), env)
		require.NoError(t, err, ok)
	}
}
