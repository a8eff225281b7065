package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Issue 18, item 13: routes tells what the dispatchers do. With no
// dispatcher running the route is not "active": its queue has no consumer;
// with one it is, and the consumer count shows. An open circuit shows when
// its probe comes, a rate-limit hold and a Retry-After hold show as such.
func TestRoutesSayWhatTheDispatchersDo(t *testing.T) {
	t.Parallel()
	s, db, _ := opsShell(t)
	require.Equal(t, 0, s.run("hookrelay", "topology", "apply").code)
	// routes fails t: the test, or EventuallyWithT's collector.
	routes := func(t require.TestingT) (string, ops.RouteSummary) {
		res := s.runFor(t, "", "hookrelay", "routes")
		require.Equal(t, 0, res.code, res)
		js := s.runFor(t, "", "hookrelay", "routes", "--json")
		require.Equal(t, 0, js.code, js)
		var list ops.RouteList
		dec := json.NewDecoder(strings.NewReader(js.stdout))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(&list), js.stdout)
		return res.stdout, list.Routes[0]
	}

	out, b := routes(t)
	t.Log("\n" + out)
	require.Regexp(t, `STATE\s+CONSUMERS\s+READY`, out)
	require.Regexp(t, `billing\s+.*\s+no-consumers\s+0\s+0\s+-\n`, out)
	require.Equal(t, "no-consumers", b.State)
	require.NotNil(t, b.Consumers)
	require.Equal(t, 0, *b.Consumers)

	ctx := context.Background()
	require.NoError(t, db.RouteStateEnsure(ctx, []string{"billing"}), "the row a dispatcher makes")
	set := func(sql string) {
		t.Helper()
		_, err := db.Pool().Exec(ctx, `UPDATE route_state SET `+sql+` WHERE route = 'billing'`)
		require.NoError(t, err)
	}
	set(`circuit = 'open', consecutive_failures = 5, opened_until = now() + interval '90 seconds'`)
	out, b = routes(t)
	require.Regexp(t, regexp.MustCompile(`billing\s+.*\s+circuit-open, probe in 1m[23]\ds\s+0\s+0`), out)
	require.Equal(t, "circuit-open", b.State)
	require.WithinDuration(t, time.Now().Add(90*time.Second), *b.CircuitOpenUntil, 10*time.Second)
	set(`opened_until = now() - interval '1 second'`)
	out, _ = routes(t)
	require.Regexp(t, `billing\s+.*\s+circuit-open, probe due\s+0\s+0`, out)

	set(`circuit = 'closed', opened_until = NULL, held_until = now() + interval '40 seconds'`)
	out, b = routes(t)
	require.Regexp(t, `billing\s+.*\s+held [34]\ds\s+0\s+0`, out, "a hold, of a route without a rate limit")
	require.Equal(t, "held", b.State)
	path := filepath.Join(s.dir, "config.yaml")
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	s.writeConfig("config.yaml", strings.Replace(string(raw), "concurrency: 4\n", "concurrency: 4\n    rate_limit: 5\n", 1))
	out, b = routes(t)
	require.Regexp(t, `billing\s+.*\s+held\(rate-limit\) [34]\ds\s+0\s+0`, out)
	require.Equal(t, "held(rate-limit)", b.State)
	require.NotNil(t, b.HeldUntil)
	set(`slow_until = now() + interval '50 seconds'`)
	out, b = routes(t)
	require.Regexp(t, `billing\s+.*\s+held\(retry-after\) [45]\ds\s+0\s+0`, out, "the destination's Retry-After wins")
	require.Equal(t, "held(retry-after)", b.State)
	set(`slow_until = NULL, held_until = NULL`)

	// With a dispatcher running, the route is active and its consumers
	// (the route's concurrency) show.
	for k, v := range secretsEnv {
		s.env[k] = v
	}
	d := s.start("dispatcher")
	d.waitLine(t, "ready: delivering billing", 30*time.Second)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, got := routes(c)
		require.Equal(c, "active", got.State)
		b = got
	}, testenv.Scaled(20*time.Second), 100*time.Millisecond)
	require.Equal(t, 4, *b.Consumers)
	out, _ = routes(t)
	require.Regexp(t, `billing\s+.*\s+active\s+4\s+0\s+-\n`, out)
}

// Issue 18, item 13: a dry-run replay says what it would do, on stderr as
// on stdout: nothing is "enqueued".
func TestReplayDryRunSaysWouldEnqueue(t *testing.T) {
	t.Parallel()
	s, db, _ := opsShell(t)
	for _, key := range []string{"evt_dry_1", "evt_dry_2"} {
		attempt(t, db, insertEvent(t, db, key, time.Minute), 1, 410, webhook.StateDead)
	}
	res := s.run("hookrelay", "replay", "--source", "demo", "--dry-run")
	require.Equal(t, 0, res.code, res)
	t.Log(res.stderr)
	require.Contains(t, res.stderr, "2 pair(s) would be enqueued")
	require.NotRegexp(t, `\d+ pair\(s\) enqueued`, res.stderr)
	require.Contains(t, res.stdout, "would replay 2 pair(s), skipped 0, of 2 event(s)")
	var outbox int
	require.NoError(t, db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM outbox`).Scan(&outbox))
	require.Zero(t, outbox, "nothing was enqueued")
}

// Issue 18, item 13: shell completion completes route and source names
// from the config, without a database.
func TestCompletionNamesRoutesAndSources(t *testing.T) {
	t.Parallel()
	s, _, _ := opsShell(t)
	s.env["HOOKRELAY_DATABASE_URL"] = "postgres://nobody@127.0.0.1:1/none"
	for _, args := range [][]string{
		{"routes", "pause", ""},
		{"routes", "resume", "b"},
		{"dead", "list", "--route", ""},
		{"events", "list", "--route", ""},
		{"replay", "--route", ""},
		{"retry", "--route", ""},
		{"versions", "show", "--route", ""},
	} {
		res := s.run("hookrelay", append([]string{"__complete"}, args...)...)
		require.Equal(t, 0, res.code, res)
		require.Equal(t, "billing\n:4\n", firstLines(res.stdout, 2), "%v: %s", args, res.stdout)
	}
	for _, args := range [][]string{
		{"events", "list", "--source", ""},
		{"replay", "--source", "d"},
	} {
		res := s.run("hookrelay", append([]string{"__complete"}, args...)...)
		require.Equal(t, 0, res.code, res)
		require.Equal(t, "demo\n:4\n", firstLines(res.stdout, 2), "%v: %s", args, res.stdout)
	}
	res := s.run("hookrelay", "__complete", "dead", "list", "--state", "")
	require.Equal(t, 0, res.code, res)
	require.Equal(t, strings.Join(ops.DeadLetterStates, "\n")+"\n:4\n", firstLines(res.stdout, len(ops.DeadLetterStates)+1))
}

// firstLines is the first n lines of s, each with its newline.
func firstLines(s string, n int) string {
	lines := strings.SplitAfter(s, "\n")
	return strings.Join(lines[:min(n, len(lines))], "")
}
