package config

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLoadOrdering(t *testing.T) {
	t.Parallel()
	env := envMap(map[string]string{"ACME_SECRET": "x"})
	yaml := strings.Replace(validYAML, "    event_type: {json_path: event}\n",
		"    event_type: {json_path: event}\n    ordering: {resource: {json_path: data.id}, version: {header: X-Acme-Sequence}, allow_unsigned: true}\n", 1) +
		"    ordering: drop_stale\n"
	cfg, err := Load(writeConfig(t, yaml), env)
	require.NoError(t, err)
	require.Equal(t, Ordering{Resource: OrderingField{JSONPath: "data.id"}, Version: OrderingField{Header: "X-Acme-Sequence"}, AllowUnsigned: true}, cfg.Sources[0].Ordering)
	require.Equal(t, OrderingDropStale, cfg.Routes[0].Ordering)

	// drop_stale on a route fed by a source without ordering is valid:
	// that source's events are never stale.
	cfg, err = Load(writeConfig(t, validYAML+"    ordering: drop_stale\n"), env)
	require.NoError(t, err)
	require.True(t, cfg.Sources[0].Ordering.IsZero())

	cfg, err = Load(writeConfig(t, validYAML), env)
	require.NoError(t, err)
	require.Empty(t, cfg.Routes[0].Ordering, "none by default")

	// Issue 41: a resource alone (no version) orders a fifo route.
	yaml = strings.Replace(validYAML, "    event_type: {json_path: event}\n",
		"    event_type: {json_path: event}\n    ordering: {resource: {json_path: data.id}}\n", 1) +
		"    ordering: fifo\n    on_dead: skip\n"
	cfg, err = Load(writeConfig(t, yaml), env)
	require.NoError(t, err)
	require.Equal(t, Ordering{Resource: OrderingField{JSONPath: "data.id"}}, cfg.Sources[0].Ordering)
	require.Equal(t, OrderingFIFO, cfg.Routes[0].Ordering)
	require.Equal(t, OnDeadSkip, cfg.Routes[0].OnDead)
}

func TestLoadOrderingInvalid(t *testing.T) {
	t.Parallel()
	env := envMap(map[string]string{"ACME_SECRET": "x"})
	withSourceOrdering := func(o string) string {
		return strings.Replace(validYAML, "    event_type: {json_path: event}\n", "    event_type: {json_path: event}\n    ordering: "+o+"\n", 1)
	}
	tests := []struct {
		name, yaml, wantMsg string
	}{
		{"route ordering unknown", validYAML + "    ordering: drop_old\n", `routes[billing].ordering: "drop_old" is not one of: none, drop_stale, fifo`},
		{"on_dead without fifo", validYAML + "    on_dead: skip\n", `routes[billing].on_dead: only a route with ordering fifo has it`},
		{"on_dead unknown", validYAML + "    ordering: fifo\n    on_dead: drop\n", `routes[billing].on_dead: "drop" is not one of: block, skip`},
		{"resource missing", withSourceOrdering("{version: {json_path: created}}"), "sources[acme].ordering.resource: is required when ordering is set"},
		{"both header and path", withSourceOrdering("{resource: {json_path: data.id, header: X-Id}, version: {json_path: created}}"), "sources[acme].ordering.resource: set header or json_path, not both"},
		{"bad header name", withSourceOrdering("{resource: {header: \"X Id\"}, version: {json_path: created}}"), `sources[acme].ordering.resource.header: "X Id" is not a valid HTTP header name`},
		{"unknown key", withSourceOrdering("{resource: {path: data.id}, version: {json_path: created}}"), "path: unknown key"},
		// Issue 18, item 7: only signed material may order events.
		{"version from an unsigned header", withSourceOrdering("{resource: {json_path: data.id}, version: {header: X-Acme-Sequence}}"),
			"sources[acme].ordering.version: header X-Acme-Sequence is not signed by scheme hmac: a replayed event with a forged version would silence its resource"},
		{"resource from an unsigned header", withSourceOrdering("{resource: {header: X-Acme-Id}, version: {json_path: created}}"),
			"set sources[acme].ordering.allow_unsigned: true to accept that"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Load(writeConfig(t, tt.yaml), env)
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.wantMsg)
		})
	}
}

func TestPresetsFillOrdering(t *testing.T) {
	t.Parallel()
	yaml := strings.Replace(validYAML, "sources:\n", `sources:
  - name: st
    preset: stripe
    verify: {secrets: [s]}
  - name: own
    preset: stripe
    verify: {secrets: [s]}
    ordering: {resource: {json_path: data.object.customer}, version: {json_path: created}}
  - name: gh
    preset: github
    verify: {secrets: [s]}
`, 1)
	cfg, err := Load(writeConfig(t, yaml), envMap(map[string]string{"ACME_SECRET": "x"}))
	require.NoError(t, err)
	require.Equal(t, Ordering{Resource: OrderingField{JSONPath: "data.object.id"}, Version: OrderingField{JSONPath: "created"}}, cfg.Sources[0].Ordering)
	require.Equal(t, "data.object.customer", cfg.Sources[1].Ordering.Resource.JSONPath, "the source's own ordering wins")
	require.True(t, cfg.Sources[2].Ordering.IsZero(), "github events carry no creation time or sequence")

	// Every preset's ordering is complete and signed, or absent.
	for name, p := range presets {
		require.Empty(t, checkOrdering(name, p.scheme, p.ordering), name)
	}
}

// Issue 18, item 7: Shopify signs the body only, so the shopify preset
// orders by the resource's updated_at in the body, not by the unsigned
// X-Shopify-Triggered-At header.
func TestShopifyPresetOrdersBySignedBody(t *testing.T) {
	t.Parallel()
	yaml := strings.Replace(validYAML, "sources:\n", "sources:\n  - name: shop\n    preset: shopify\n    verify: {secrets: [s]}\n", 1)
	cfg, err := Load(writeConfig(t, yaml), envMap(map[string]string{"ACME_SECRET": "x"}))
	require.NoError(t, err)
	require.Equal(t, Ordering{Resource: OrderingField{JSONPath: "admin_graphql_api_id"}, Version: OrderingField{JSONPath: "updated_at"}}, cfg.Sources[0].Ordering)
}
