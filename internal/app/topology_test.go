package app_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"sort"
	"testing"

	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/stretchr/testify/require"
)

// The committed definitions file must be what the code declares for the
// default config; `make topology` regenerates it.
func TestDefinitionsFileIsCurrent(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load("../../config.yaml", func(k string) (string, bool) {
		switch k {
		case "HOOKRELAY_DEMO_SECRET":
			return "unused", true
		case "BILLING_SIGNING_SECRET":
			return "whsec_ZGVtby1zaWduaW5nLXNlY3JldC0xMjM0NTY3ODkw", true
		}
		return "", false
	})
	require.NoError(t, err)
	want, err := app.Topology(cfg).Definitions()
	require.NoError(t, err)
	got, err := os.ReadFile("../../topology/definitions.json")
	require.NoError(t, err)
	require.Equal(t, string(want), string(got), "topology/definitions.json is stale: run `make topology`")
}

// Importing the definitions file and then declaring the same topology from
// code must agree: a differing argument makes the declaration fail with 406,
// and the bindings the broker reports must be exactly the code's.
func TestDefinitionsImportMatchesDeclaration(t *testing.T) {
	t.Parallel()
	conn := amqptest.Dial(t)
	amqptest.RequireManagement(t)
	prefix := amqptest.Prefix(t)
	cfg := &config.Config{
		AMQP: config.AMQP{Prefix: prefix},
		Routes: []config.Route{
			{Name: "billing", Bindings: []string{"stripe.invoice.*", "stripe.payment_intent.#"}},
			{Name: "crm", Bindings: []string{"*.customer.*"}},
		},
	}
	topo := app.Topology(cfg)
	amqptest.DeleteTopology(t, topo)
	defs, err := topo.Definitions()
	require.NoError(t, err)

	resp, err := http.Post(testenv.ManagementURL()+"/api/definitions", "application/json", bytes.NewReader(defs))
	require.NoError(t, err)
	resp.Body.Close()
	require.Less(t, resp.StatusCode, 300, "import: %s", resp.Status)

	require.NoError(t, topo.Declare(amqptest.Channel(t, conn)), "code and definitions file disagree")

	for _, q := range topo.Queues {
		var got []string
		for _, b := range listBindings(t, q.Name) {
			got = append(got, b.Source+" "+b.RoutingKey)
		}
		var want []string
		for _, b := range topo.Bindings {
			if b.Queue == q.Name {
				want = append(want, b.Exchange+" "+b.RoutingKey)
			}
		}
		sort.Strings(got)
		sort.Strings(want)
		require.Equal(t, want, got, "bindings of %s", q.Name)
	}
}

type mgmtBinding struct {
	Source     string `json:"source"`
	RoutingKey string `json:"routing_key"`
}

// listBindings returns the queue's bindings except the default exchange's.
func listBindings(t *testing.T, queue string) []mgmtBinding {
	t.Helper()
	resp, err := http.Get(testenv.ManagementURL() + "/api/queues/%2F/" + url.PathEscape(queue) + "/bindings")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var all []mgmtBinding
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&all))
	var out []mgmtBinding
	for _, b := range all {
		if b.Source != "" {
			out = append(out, b)
		}
	}
	return out
}
