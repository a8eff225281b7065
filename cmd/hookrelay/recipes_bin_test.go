package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/testenv"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pageBlock is the lines of the first ```sh block of docs/page after the
// line heading, continuations joined and comments dropped.
func pageBlock(t *testing.T, page, heading string) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", page))
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(raw), "\n"+heading+"\n")
	require.True(t, ok, "docs/%s has no heading %q", page, heading)
	_, rest, ok = strings.Cut(rest, "```sh\n")
	require.True(t, ok)
	block, _, ok := strings.Cut(rest, "```")
	require.True(t, ok)
	var out []string
	cont := false
	for _, l := range strings.Split(strings.TrimSpace(block), "\n") {
		if k := strings.Index(l, "  #"); k >= 0 {
			l = l[:k]
		}
		l = strings.TrimSpace(l)
		if cont {
			out[len(out)-1] += " " + strings.TrimSuffix(l, `\`)
		} else if l != "" {
			out = append(out, strings.TrimSuffix(l, `\`))
		}
		cont = strings.HasSuffix(l, `\`)
	}
	return out
}

// bash runs a line of a page in the shell, with the binaries on PATH as
// hookrelay, and the variables it exported kept for the next line.
func (s *shell) bash(t require.TestingT, line string) result {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	envFile := filepath.Join(s.dir, ".exported")
	script := "set -euo pipefail\n[[ -f " + envFile + " ]] && source " + envFile + "\n" + line + "\nexport -p | grep ' HOOKRELAY_' >" + envFile + " || true\n"
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = s.dir
	cmd.Env = append(s.environ(), "PATH="+s.bin+":"+os.Getenv("PATH"))
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := result{stdout: stdout.String(), stderr: stderr.String()}
	if exit, ok := err.(*exec.ExitError); ok {
		res.code = exit.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return res
}

// runAllowed is the networks scripts/run.sh lets a team's route reach
// when HOOKRELAY_TEAM_ROUTES_ALLOWED_NETWORKS is unset (the demo's).
func runAllowed(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "scripts", "run.sh"))
	require.NoError(t, err)
	m := regexp.MustCompile(`export HOOKRELAY_TEAM_ROUTES_ALLOWED_NETWORKS=(\S+)`).FindStringSubmatch(string(raw))
	require.NotNil(t, m, "scripts/run.sh lets the demo's team routes reach this machine")
	return m[1]
}

// runKey is scripts/run.sh's demo secrets key, which it sets when
// HOOKRELAY_SECRETS_KEY is unset.
func runKey(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "scripts", "run.sh"))
	require.NoError(t, err)
	m := regexp.MustCompile(`export HOOKRELAY_SECRETS_KEY=(\S+)`).FindStringSubmatch(string(raw))
	require.NotNil(t, m, "scripts/run.sh sets a demo HOOKRELAY_SECRETS_KEY when none is set")
	return m[1]
}

// Issue 38, first-time user 3: the Teams and "Routes at run time" recipes
// of docs/operating.md run as written on the default config.yaml, with a
// receiver and a dispatcher started as scripts/run.sh starts them (its
// demo secrets, its demo key): the team is made, its route is made on the
// demo source (which admits every team), every dispatcher consumes it
// (it opens the route with the key the CLI sealed it with), and it is
// changed, its secret rotated and deleted. A binding to a source that
// does not exist says so.
func TestOperatingRecipesRunOnTheDefaultConfig(t *testing.T) {
	t.Parallel()
	daemons := newShell(t)
	dbURL := storetest.NewDatabase(t)
	amqptest.Dial(t)
	prefix := amqptest.Prefix(t)
	path := daemons.writeConfig("config.yaml", repoConfig(t, dbURL, prefix))
	deleteTopologyOf(t, path)
	t.Cleanup(func() { deleteQueues(t, prefix+".route.payments:ledger", prefix+".route.payments:ledger.dead") }) // after the daemons stop
	for k, v := range secretsEnv {
		daemons.env[k] = v
	}
	daemons.env["HOOKRELAY_SECRETS_KEY"] = runKey(t)
	daemons.env["HOOKRELAY_TEAM_ROUTES_ALLOWED_NETWORKS"] = runAllowed(t)
	r := daemons.start("receiver")
	r.waitLine(t, "ready: POST", 30*time.Second)
	d := daemons.start("dispatcher")
	d.waitLine(t, "ready: delivering", 30*time.Second)

	op := newShell(t) // the operator's own shell: no secret, no key
	op.env["HOOKRELAY_CONFIG"] = path

	teams := pageBlock(t, "operating.md", "### Teams")
	require.Len(t, teams, 3)
	for _, line := range teams {
		res := op.bash(t, line)
		require.Equal(t, 0, res.code, "%s: %v", line, res)
	}
	runtime := pageBlock(t, "operating.md", "### Routes at run time")
	require.Len(t, runtime, 6)
	require.Equal(t, "export HOOKRELAY_SECRETS_KEY="+runKey(t), runtime[0], "the page gives the CLI the key scripts/run.sh gives the relay")
	require.Equal(t, "export HOOKRELAY_TEAM_ROUTES_ALLOWED_NETWORKS="+runAllowed(t), runtime[1], "the page gives the CLI the networks scripts/run.sh gives the relay")

	// Without the demo's networks, the route to this machine is refused.
	res := op.bash(t, runtime[0]+"\n"+runtime[2])
	require.Equal(t, 2, res.code, "%v", res)
	require.Contains(t, res.stderr, "url: destination refused: 127.0.0.1 is a loopback address")

	// A binding to a source there is not: said so.
	res = op.bash(t, runtime[0]+"\n"+runtime[1]+"\nhookrelay routes create payments:nowhere --url http://127.0.0.1:9000/hooks --binding 'stripe.invoice.*'")
	require.NotEqual(t, 0, res.code, "%v", res)
	require.Contains(t, res.stderr, `there is no source "stripe"`)

	for i, line := range runtime {
		res := op.bash(t, line)
		require.Equal(t, 0, res.code, "%s: %v", line, res)
		if i != 2 {
			continue
		}
		require.Contains(t, res.stdout, "route payments:ledger created for team payments")
		// Every dispatcher consumes it: it opened the route's secret
		// with the key the CLI sealed it with.
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			got := op.runFor(c, "", "hookrelay", "routes", "--json")
			require.Equal(c, 0, got.code, "%v", got)
			var list ops.RouteList
			require.NoError(c, json.Unmarshal([]byte(got.stdout), &list))
			for _, rt := range list.Routes {
				if rt.Route == "payments:ledger" {
					require.NotNil(c, rt.Consumers)
					require.Equal(c, 4, *rt.Consumers, "--concurrency 4, one dispatcher")
					return
				}
			}
			require.Fail(c, "no route ledger", "%s", got.stdout)
		}, testenv.Scaled(20*time.Second), 100*time.Millisecond)
	}
	require.NotContains(t, d.output(), "cannot open", "the dispatcher opened every route")
}

// deleteQueues deletes queues a test's processes declared (a run-time
// route's); a queue that is gone already is fine.
func deleteQueues(t *testing.T, queues ...string) {
	conn, err := amqp.Dial(testenv.AMQPURL())
	if err != nil {
		t.Errorf("cleanup: connecting: %v", err)
		return
	}
	defer conn.Close()
	for _, q := range queues {
		ch, err := conn.Channel()
		if err != nil {
			t.Errorf("cleanup: channel: %v", err)
			return
		}
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			t.Logf("cleanup: deleting queue %s: %v", q, err)
		}
		_ = ch.Close() // closed by a failed delete already
	}
}
