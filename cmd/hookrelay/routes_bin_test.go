package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/stretchr/testify/require"
)

// hookrelay routes pause and resume store the pause in Postgres (the
// dispatchers follow it; see internal/app TestPauseStopsBothDispatchers...),
// refuse a route that is not in the config, and the listing shows the
// state and the queue's backlog.
func TestRoutesPauseResumeAndListing(t *testing.T) {
	t.Parallel()
	s, db, _ := opsShell(t)
	require.Equal(t, 0, s.run("hookrelay", "topology", "apply").code)

	res := s.run("hookrelay", "routes", "pause", "nosuch")
	require.NotEqual(t, 0, res.code, res)
	require.Contains(t, res.stderr, `route "nosuch" is neither in the config nor made at run time`)

	res = s.run("hookrelay", "routes")
	require.Equal(t, 0, res.code, res)
	require.Regexp(t, `billing\s+platform\s+config\s+\S+\.route\.billing\s+.*\s+0\s+0\s+0\s+no-consumers\s+0\s+0\s+-\n`, res.stdout)

	res = s.run("hookrelay", "routes", "pause", "billing", "--reason", "destination maintenance")
	require.Equal(t, 0, res.code, res)
	require.Contains(t, res.stdout, "route billing paused")
	list, err := db.RouteStateList(context.Background())
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.True(t, list[0].Paused)
	require.NotEmpty(t, list[0].PausedBy)
	require.NotNil(t, list[0].PausedAt)
	require.Equal(t, "destination maintenance", list[0].PausedReason)
	res = s.run("hookrelay", "routes")
	require.Regexp(t, `\nbilling paused by \S+ at \S+: destination maintenance\n`, res.stdout)

	res = s.run("hookrelay", "routes", "pause", "billing")
	require.Equal(t, 0, res.code, res)
	require.Contains(t, res.stdout, "route billing was paused already")
	res = s.run("hookrelay", "routes")
	require.Regexp(t, `billing\s+.*\s+paused\s+0\s+0\s+-\n`, res.stdout)

	res = s.run("hookrelay", "routes", "resume", "billing")
	require.Equal(t, 0, res.code, res)
	require.Contains(t, res.stdout, "route billing resumed")
	list, err = db.RouteStateList(context.Background())
	require.NoError(t, err)
	require.False(t, list[0].Paused)
	require.Nil(t, list[0].PausedAt)
	res = s.run("hookrelay", "routes")
	require.Regexp(t, `billing\s+.*\s+no-consumers\s+0\s+0\s+-\n`, res.stdout)
}

// hookrelay routes --json prints the listing's data for scripts: each
// configured route with its counts, its stored pause and circuit, the
// ready messages of its queue and its oldest undelivered age, then the
// routes in the database only (unserved); with the broker unreachable,
// ready is null and broker_error says why, the rest is still there.
func TestRoutesJSON(t *testing.T) {
	t.Parallel()
	s, db, prefix := opsShell(t)
	require.Equal(t, 0, s.run("hookrelay", "topology", "apply").code)
	insertEvent(t, db, "evt_routes_json", 2*time.Hour)
	ctx := context.Background()
	_, _, err := db.EventInsert(ctx, &webhook.Event{
		ID: uuid.Must(uuid.NewV7()), Source: "demo", IdempotencyKey: "evt_legacy", EventType: "invoice.paid",
		ContentType: "application/json", Body: []byte(`{"id":"evt_legacy"}`), ReceivedAt: time.Now(),
	}, []string{"legacy"})
	require.NoError(t, err)
	require.Equal(t, 0, s.run("hookrelay", "routes", "pause", "billing").code)
	_, err = db.Pool().Exec(ctx, `UPDATE route_state SET circuit = 'open', consecutive_failures = 7,
		opened_until = now() + interval '1 minute' WHERE route = 'billing'`)
	require.NoError(t, err)

	read := func() ops.RouteList {
		t.Helper()
		res := s.run("hookrelay", "routes", "--json")
		require.Equal(t, 0, res.code, res)
		var list ops.RouteList
		dec := json.NewDecoder(strings.NewReader(res.stdout))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(&list), res.stdout)
		return list
	}
	list := read()
	require.Empty(t, list.BrokerError)
	require.Len(t, list.Routes, 2, "billing, then legacy (database only)")
	b := list.Routes[0]
	require.Equal(t, "billing", b.Route)
	require.Equal(t, prefix+".route.billing", b.Queue)
	require.NotEmpty(t, b.Bindings)
	require.EqualValues(t, 1, b.Pending)
	require.Equal(t, "paused", b.State, "the pause wins over the open circuit")
	require.True(t, b.Paused)
	require.NotNil(t, b.PausedAt)
	require.NotEmpty(t, b.PausedBy)
	require.Equal(t, "open", b.Circuit)
	require.Equal(t, 7, b.ConsecutiveFailures)
	require.NotNil(t, b.CircuitOpenUntil)
	require.WithinDuration(t, time.Now().Add(time.Minute), *b.CircuitOpenUntil, 30*time.Second)
	require.NotNil(t, b.Ready)
	require.Equal(t, 0, *b.Ready, "insertEvent publishes nothing")
	require.NotNil(t, b.OldestUndeliveredSeconds)
	// The age counts from the delivery row's creation (just now), not the
	// event's receipt.
	require.GreaterOrEqual(t, *b.OldestUndeliveredSeconds, 0.0)
	require.Less(t, *b.OldestUndeliveredSeconds, 60.0)
	require.False(t, b.Unserved)
	l := list.Routes[1]
	require.Equal(t, ops.RouteSummary{
		Route: "legacy", Bindings: []string{}, Pending: 1, Unserved: true,
		OldestUndeliveredSeconds: l.OldestUndeliveredSeconds,
	}, l)
	require.NotNil(t, l.OldestUndeliveredSeconds)

	// The table tells the same.
	res := s.run("hookrelay", "routes")
	require.Equal(t, 0, res.code, res)
	require.Regexp(t, `billing\s+platform\s+config\s+\S+\.route\.billing\s+.*\s+1\s+0\s+0\s+paused\s+0\s+0\s+\d+s\n`, res.stdout)
	require.Regexp(t, `legacy\s+-\s+-\s+\(not configured\)\s+-\s+1\s+0\s+0\n`, res.stdout)
	require.Contains(t, res.stdout, "1 route(s) configured, 1 more with deliveries in the database only")

	// No broker: ready is null, and says why.
	s.env["HOOKRELAY_AMQP_URL"] = "amqp://guest:guest@" + freeAddr(t) + "/"
	list = read()
	require.NotEmpty(t, list.BrokerError)
	require.Nil(t, list.Routes[0].Ready)
	require.Nil(t, list.Routes[0].Consumers)
	require.EqualValues(t, 1, list.Routes[0].Pending)
	res = s.run("hookrelay", "routes")
	require.Equal(t, 0, res.code, res)
	require.Regexp(t, `billing\s+.*\s+paused\s+\?\s+\?\s+\d+s\n`, res.stdout)
	require.Contains(t, res.stdout, "CONSUMERS and READY unknown (?): ")
}

// hookrelay routes create, update, rotate-secret and delete: a route made
// at run time (its secret printed once, the key from the environment),
// listed as such; a route of the config is read-only; a route with a
// backlog is deleted only with --drain or --dead-letter.
func TestRoutesMadeAtRunTimeFromTheCLI(t *testing.T) {
	t.Parallel()
	s, db, _ := opsShell(t) // no dispatcher runs: no queue is declared
	res := s.run("hookrelay", "routes", "create", "ledger", "--url", "http://127.0.0.1:9/hooks", "--binding", "demo.invoice.*")
	require.Equal(t, 1, res.code, res)
	require.Contains(t, res.stderr, "secrets.key is not set")

	s.env["HOOKRELAY_SECRETS_KEY"] = base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	res = s.run("hookrelay", "routes", "create", "ledger", "--url", "http://127.0.0.1:9/hooks", "--binding", "demo.invoice.*", "--timeout", "5")
	require.Equal(t, 2, res.code, res)
	require.Contains(t, res.stderr, "timeout: ")
	res = s.run("hookrelay", "routes", "create", "ledger", "--url", "http://127.0.0.1:9/hooks", "--binding", "demo.invoice.*")
	require.Equal(t, 0, res.code, res)
	require.Regexp(t, `route ledger created for team platform \(secret sha256:[0-9a-f]{16}\)`, res.stdout)
	require.Regexp(t, `signing secret \(shown once\): whsec_\S+\n`, res.stdout)

	res = s.run("hookrelay", "routes")
	require.Equal(t, 0, res.code, res)
	require.Regexp(t, `billing\s+platform\s+config\s`, res.stdout)
	require.Regexp(t, `ledger\s+platform\s+run-time v1\s+\S+\.route\.ledger\s+demo\.invoice\.\*\s`, res.stdout)

	res = s.run("hookrelay", "routes", "update", "ledger", "--binding", "demo.invoice.paid", "--concurrency", "3")
	require.Equal(t, 0, res.code, res)
	require.Contains(t, res.stdout, "route ledger updated to version 2 (bindings demo.invoice.paid)")
	res = s.run("hookrelay", "routes", "update", "billing", "--concurrency", "3")
	require.Equal(t, 1, res.code, res)
	require.Contains(t, res.stderr, "declared in config.yaml")
	res = s.run("hookrelay", "routes", "rotate-secret", "ledger", "--overlap", "1h")
	require.Equal(t, 0, res.code, res)
	require.Contains(t, res.stdout, "the previous secret still signs until")

	// A backlog: one pair pending on ledger.
	_, _, err := db.EventInsert(context.Background(), &webhook.Event{
		ID: uuid.Must(uuid.NewV7()), Source: "demo", IdempotencyKey: "evt_ledger", EventType: "invoice.paid",
		ContentType: "application/json", Body: []byte(`{}`), ReceivedAt: time.Now(),
	}, []string{"ledger"})
	require.NoError(t, err)
	res = s.run("hookrelay", "routes", "delete", "ledger")
	require.Equal(t, 1, res.code, res)
	require.Contains(t, res.stderr, "the route has 1 undelivered deliveries")
	require.Contains(t, res.stderr, "--dead-letter")
	res = s.run("hookrelay", "routes", "delete", "ledger", "--drain", "--dead-letter")
	require.Equal(t, 2, res.code, res)
	res = s.run("hookrelay", "routes", "delete", "ledger", "--dead-letter")
	require.Equal(t, 0, res.code, res)
	require.Contains(t, res.stdout, "route ledger deleted; 1 undelivered: the dispatchers move them to its dead letters, then the route goes")
	res = s.run("hookrelay", "routes")
	require.Regexp(t, `ledger\s+platform\s+deleted\(dead_letter\)\s`, res.stdout)
	res = s.run("hookrelay", "routes", "update", "ledger", "--concurrency", "1")
	require.Equal(t, 1, res.code, res, "a deleted route changes no more")
}

// Issue 38, security 1, the CLI's half: hookrelay routes create and update
// refuse a team's route to the relay's own side (loopback, private,
// link-local, IPv6 loopback) with exit 2 and the API's words, naming the
// address's class; the route keeps its destination. Nothing is dialled:
// no dispatcher runs.
func TestRoutesRefuseATeamsRouteToTheRelaysOwnSide(t *testing.T) {
	t.Parallel()
	s, db, _ := opsShell(t)
	// Every team may bind demo's events (what a receiver records of
	// sources[].subscribers when it starts).
	_, err := db.Pool().Exec(context.Background(), `INSERT INTO sources (name, team, subscribers, declared)
		VALUES ('demo', 'platform', '{*}', true) ON CONFLICT (name) DO UPDATE SET subscribers = '{*}'`)
	require.NoError(t, err)
	s.env["HOOKRELAY_SECRETS_KEY"] = base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	require.Equal(t, 0, s.run("hookrelay", "teams", "create", "payments").code)

	for url, class := range map[string]string{
		"http://127.0.0.1:8081/debug/pprof/cmdline": "loopback",
		"http://10.0.0.5/hooks":                     "private",
		"http://169.254.169.254/latest/meta-data/":  "link-local",
		"http://[::1]:15672/api/overview":           "loopback",
	} {
		res := s.run("hookrelay", "routes", "create", "payments:ledger", "--team", "payments", "--url", url, "--binding", "demo.invoice.*")
		require.Equal(t, 2, res.code, "%s: %v", url, res)
		require.Contains(t, res.stderr, "url: destination refused: ", url)
		require.Contains(t, res.stderr, " "+class+" address", url)
	}
	res := s.run("hookrelay", "routes", "create", "payments:ledger", "--team", "payments", "--url", "http://8.8.8.8/hooks", "--binding", "demo.invoice.*")
	require.Equal(t, 0, res.code, res)
	res = s.run("hookrelay", "routes", "update", "payments:ledger", "--url", "http://10.0.0.5/hooks")
	require.Equal(t, 2, res.code, res)
	require.Contains(t, res.stderr, "url: destination refused: 10.0.0.5 is a private address")
	var spec string
	require.NoError(t, db.Pool().QueryRow(context.Background(), `SELECT spec::text FROM routes WHERE name = 'payments:ledger'`).Scan(&spec))
	require.Contains(t, spec, "http://8.8.8.8/hooks")
}
