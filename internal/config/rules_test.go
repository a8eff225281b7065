package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Issue 39: a route's filter and transformation are compiled when the
// config loads; one that does not compile stops the load, naming the
// route, the key, and the line and column; the limits have defaults and
// are refused out of range or without a unit.
func TestRouteRulesAreCompiledAtLoad(t *testing.T) {
	t.Parallel()
	env := envMap(map[string]string{"ACME_SECRET": "x"})
	cfg, err := Load(writeConfig(t, validYAML+"    filter: 'body.amount > 10'\n    transform: '{\"id\": body.id}'\n    transform_headers: '{\"x-a\": source}'\n"), env)
	require.NoError(t, err)
	require.Equal(t, "body.amount > 10", cfg.Routes[0].Filter)
	require.Equal(t, Rules{CostLimit: 50_000, MaxOutputBytes: 1 << 20, Timeout: time.Second}, cfg.Rules)

	for _, tt := range []struct{ name, yaml, want string }{
		{"an undeclared name", "    filter: \"body.amount > 1 &&\\n  bdy.x\"\n", "routes[billing].filter: 2:3: undeclared reference to 'bdy'"},
		{"not a bool", "    filter: 'source'\n", "routes[billing].filter: 1:1: the expression yields string; it must yield bool"},
		{"a syntax error", "    transform: '{\"id\": '\n", "routes[billing].transform: 1:8: Syntax error"},
		{"headers not a map", "    transform_headers: '[1]'\n", "routes[billing].transform_headers: 1:1: the expression yields list(int); it must yield map(string, string)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Load(writeConfig(t, validYAML+tt.yaml), env)
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.want)
		})
	}
	for _, tt := range []struct{ yaml, want string }{
		{"rules: {cost_limit: 10}\n", "rules.cost_limit"},
		{"rules: {timeout: 5}\n", "rules.timeout"},
		{"rules: {max_output_bytes: 100}\n", "rules.max_output_bytes"},
	} {
		_, err := Load(writeConfig(t, validYAML+tt.yaml), env)
		require.ErrorContains(t, err, tt.want, tt.yaml)
	}
}
