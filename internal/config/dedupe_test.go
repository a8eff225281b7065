package config

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// dedupe_body is on for the presets whose signature covers only the body and
// whose key and type come from unsigned headers; off for every other source;
// and an explicit value wins.
func TestDedupeBodyDefaults(t *testing.T) {
	t.Parallel()
	yaml := strings.Replace(validYAML, "sources:\n", `sources:
  - {name: gh, preset: github, verify: {secrets: [s]}}
  - {name: shop, preset: shopify, verify: {secrets: [s]}}
  - {name: gh-off, preset: github, verify: {secrets: [s]}, dedupe_body: false}
  - {name: stripe, preset: stripe, verify: {secrets: [s]}}
  - {name: custom-on, verify: {scheme: github, secrets: [s]}, event_type: {header: X-GitHub-Event}, dedupe_body: true}
`, 1)
	cfg, err := Load(writeConfig(t, yaml), envMap(map[string]string{"ACME_SECRET": "x"}))
	require.NoError(t, err)
	got := map[string]bool{}
	for _, s := range cfg.Sources {
		got[s.Name] = s.DedupesBody()
	}
	require.Equal(t, map[string]bool{
		"gh": true, "shop": true, "gh-off": false, "stripe": false, "custom-on": true, "acme": false,
	}, got)
}
