package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Issue 24: amqp.consumer_timeout is the brokers' consumer timeout, 30m by
// default, and like every duration here it needs a unit.
func TestConsumerTimeoutDefaultAndUnits(t *testing.T) {
	t.Parallel()
	env := map[string]string{"ACME_SECRET": "x"}
	cfg, err := Load(writeConfig(t, validYAML), envMap(env))
	require.NoError(t, err)
	require.Equal(t, 30*time.Minute, cfg.AMQP.ConsumerTimeout)

	env["HOOKRELAY_AMQP_CONSUMER_TIMEOUT"] = "1h"
	cfg, err = Load(writeConfig(t, validYAML), envMap(env))
	require.NoError(t, err)
	require.Equal(t, time.Hour, cfg.AMQP.ConsumerTimeout)

	for _, bad := range []string{"1800000", "0s"} {
		env["HOOKRELAY_AMQP_CONSUMER_TIMEOUT"] = bad
		_, err = Load(writeConfig(t, validYAML), envMap(env))
		require.Error(t, err, bad)
		require.Contains(t, err.Error(), "amqp.consumer_timeout", bad)
	}
}

// Issue 24: a route whose longest hold of one message (the route controls'
// wait, another holder's lease, the POST, the claim and record, a dead
// letter's confirm) does not stay a minute under amqp.consumer_timeout is
// refused at load, naming the route, the hold and its parts, and the
// timeout: the broker would take the message back before it is acked.
func TestRouteHoldMustFitUnderTheConsumerTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		add    string
		env    map[string]string
		refuse string // "" when the config loads
	}{
		{name: "defaults: 11m50s under 30m", add: ""},
		{name: "the longest timeout with the default margin: 21m30s", add: "    timeout: 5m\n"},
		{
			name: "a lease margin of an hour", add: "    timeout: 5m\n",
			env: map[string]string{"HOOKRELAY_DISPATCHER_LEASE_MARGIN": "1h"},
			refuse: "routes[billing]: a delivery can hold its message unacked for up to 1h21m20s (route controls 11m + another holder's lease 1h5m + POST 5m + " +
				"claim and record 10s + dead-letter confirm 10s), and amqp.consumer_timeout is 30m",
		},
		{
			name: "a 15m broker with a 2m timeout: 15m30s", add: "    timeout: 2m\n",
			env:    map[string]string{"HOOKRELAY_AMQP_CONSUMER_TIMEOUT": "15m"},
			refuse: "routes[billing]: a delivery can hold its message unacked for up to 15m30s",
		},
		{
			name: "a 15m broker with a 30s timeout: 12m30s, a minute to spare and more", add: "    timeout: 30s\n",
			env: map[string]string{"HOOKRELAY_AMQP_CONSUMER_TIMEOUT": "15m"},
		},
		{
			name: "a minute under exactly", add: "    timeout: 45s\n",
			env: map[string]string{"HOOKRELAY_AMQP_CONSUMER_TIMEOUT": "14m5s", "HOOKRELAY_DISPATCHER_LEASE_MARGIN": "15s"},
		},
		{
			name: "a second past", add: "    timeout: 45s\n",
			env:    map[string]string{"HOOKRELAY_AMQP_CONSUMER_TIMEOUT": "14m5s", "HOOKRELAY_DISPATCHER_LEASE_MARGIN": "16s"},
			refuse: "up to 13m6s",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"ACME_SECRET": "x"}
			for k, v := range tc.env {
				env[k] = v
			}
			cfg, err := Load(writeConfig(t, validYAML+tc.add), envMap(env))
			if tc.refuse == "" {
				require.NoError(t, err)
				h := cfg.RouteHold(cfg.Routes[0])
				require.LessOrEqual(t, h.Total()+HoldMargin, cfg.AMQP.ConsumerTimeout, "%s", h)
				return
			}
			require.Error(t, err)
			t.Log(err)
			require.Contains(t, err.Error(), tc.refuse)
			require.Contains(t, err.Error(), "lower timeout or dispatcher.lease_margin")
		})
	}
}

// The hold's parts, as the code bounds them, and the budget a delivery's
// waits get: what consumer_timeout leaves after the margin and what runs
// to its end once begun.
func TestRouteHoldAndBudget(t *testing.T) {
	t.Parallel()
	cfg, err := Load(writeConfig(t, validYAML), envMap(map[string]string{"ACME_SECRET": "x"}))
	require.NoError(t, err)
	h := cfg.RouteHold(cfg.Routes[0])
	require.Equal(t, Hold{Admit: 11 * time.Minute, Lease: 20 * time.Second, Post: 10 * time.Second, Store: 10 * time.Second, Confirm: 10 * time.Second}, h)
	require.Equal(t, 11*time.Minute+50*time.Second, h.Total())
	require.Equal(t, "11m50s (route controls 11m + another holder's lease 20s + POST 10s + claim and record 10s + dead-letter confirm 10s)", h.String())
	require.Equal(t, 28*time.Minute+30*time.Second, cfg.HoldBudget(cfg.Routes[0]), "30m - 1m - (10s + 10s + 10s)")
	require.Greater(t, cfg.HoldBudget(cfg.Routes[0]), h.Admit+h.Lease, "the waits of a hold that fits never spend the budget")

	var hand Config
	require.Zero(t, hand.HoldBudget(Route{Timeout: time.Second}), "no consumer_timeout, no budget")
}

// Issue 24: a route made or changed at run time (ops, through the API,
// the CLI or the console) follows the same rule.
func TestCheckRouteRefusesAHoldPastTheConsumerTimeout(t *testing.T) {
	t.Parallel()
	cfg, err := Load(writeConfig(t, validYAML), envMap(map[string]string{"ACME_SECRET": "x", "HOOKRELAY_AMQP_CONSUMER_TIMEOUT": "15m"}))
	require.NoError(t, err)
	r := Route{Name: "late", URL: "http://127.0.0.1:9/", Bindings: []string{"acme.#"}, Timeout: 2 * time.Minute}
	cfg.RouteDefaults(&r)
	err = cfg.CheckRoute(r)
	var re *RouteError
	require.ErrorAs(t, err, &re)
	require.Len(t, re.Problems, 1)
	require.Contains(t, re.Problems[0], "timeout: a delivery can hold its message unacked for up to 15m30s")
	require.Contains(t, re.Problems[0], "amqp.consumer_timeout is 15m")

	r.Timeout = 30 * time.Second
	require.NoError(t, cfg.CheckRoute(r))
}
