package config

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Issue 43: a route of kind amqp takes an amqp:// URL, an exchange and a
// routing key template, checked at load; an exchange named like the
// relay's own is refused (a route publishing into the relay would loop),
// and an http route keeps refusing what is not http.
func TestRouteKindIsCheckedAtLoad(t *testing.T) {
	t.Parallel()
	env := envMap(map[string]string{"ACME_SECRET": "x"})
	const httpURL = `    url: "http://127.0.0.1:9000/hooks"`
	amqpRoute := func(extra string) string {
		return strings.Replace(validYAML, httpURL, `    url: "amqp://app:pw@127.0.0.1:5672/billing"`+"\n    kind: amqp\n"+extra, 1)
	}
	cfg, err := Load(writeConfig(t, amqpRoute("    exchange: billing.events\n    routing_key: '{source}.{body.customer.id}'")), env)
	require.NoError(t, err)
	r := cfg.Routes[0]
	require.True(t, r.IsAMQP())
	require.Equal(t, "billing.events", r.Exchange)
	require.Equal(t, "{source}.{body.customer.id}", r.RoutingKey)

	for _, tt := range []struct{ name, yaml, want string }{
		{"no exchange", amqpRoute(""), "routes[billing].exchange: is required for kind amqp"},
		{"the relay's exchange", amqpRoute("    exchange: hookrelay.events"), `routes[billing].exchange: "hookrelay.events" is named like the relay's own exchanges`},
		{"a bad key", amqpRoute("    exchange: x\n    routing_key: '{body.}'"), "routes[billing].routing_key: {body.}: a body path"},
		{"an unknown placeholder", amqpRoute("    exchange: x\n    routing_key: '{customer}'"), "{customer}: unknown placeholder"},
		{"an unclosed brace", amqpRoute("    exchange: x\n    routing_key: 'a.{source'"), "a { without its }"},
		{"an http URL", strings.Replace(validYAML, httpURL, httpURL+"\n    kind: amqp\n    exchange: x", 1), "routes[billing].url: must be an amqp:// or amqps:// URL"},
		{"an amqp URL on http", strings.Replace(validYAML, httpURL, `    url: "amqp://127.0.0.1/"`, 1), "routes[billing].url: must be an http:// or https:// URL"},
		{"an exchange on http", strings.Replace(validYAML, httpURL, httpURL+"\n    exchange: x", 1), "only a route of kind amqp has an exchange"},
		{"an unknown kind", strings.Replace(validYAML, httpURL, httpURL+"\n    kind: sqs", 1), `routes[billing].kind: "sqs" is not one of: http, amqp`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Load(writeConfig(t, tt.yaml), env)
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.want)
			require.NotContains(t, err.Error(), "pw@", "no credentials in the error")
		})
	}
}
