package main

import (
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/stretchr/testify/require"
)

// secretsEnv gives the repository config's ${VAR}s, for the binaries that
// need them (receiver, dispatcher) and for loading it in a test.
var secretsEnv = map[string]string{
	"HOOKRELAY_DEMO_SECRET":  "demo-secret",
	"BILLING_SIGNING_SECRET": "whsec_ZGVtby1zaWduaW5nLXNlY3JldC0xMjM0NTY3ODkw",
}

// deleteTopologyOf removes, when t ends, whatever the config at path
// declares on the broker.
func deleteTopologyOf(t *testing.T, path string) {
	t.Helper()
	cfg, err := config.Load(path, func(k string) (string, bool) { v, ok := secretsEnv[k]; return v, ok })
	require.NoError(t, err)
	amqptest.DeleteTopology(t, setup.Topology(cfg))
}

// commands lists every command path of the CLI as its completion sees it
// (hidden ones aside), depth first: "events", "events list", ...
func commands(t *testing.T, s *shell, parent []string) [][]string {
	t.Helper()
	res := s.run("hookrelay", append(append([]string{"__complete"}, parent...), "")...)
	if res.code != 0 {
		t.Errorf("listing the commands under %v: %s", parent, res)
		return nil
	}
	var out [][]string
	for _, line := range strings.Split(res.stdout, "\n") {
		name, _, _ := strings.Cut(line, "\t")
		if name == "" || strings.HasPrefix(name, ":") || strings.HasPrefix(name, "-") {
			continue
		}
		path := append(slices.Clone(parent), name)
		out = append(out, path)
		out = append(out, commands(t, s, path)...)
	}
	return out
}

// Issue 12, items 1 and 2: --help on every command and subcommand prints
// its help and exits 0, and touches nothing: a database nothing migrated
// stays empty and the broker gets no queue, exchange or policy of the
// config's prefix. `hookrelay help X` and -h are the same. Every command's
// help has an example, and flag defaults show.
func TestHelpTouchesNothing(t *testing.T) {
	t.Parallel()
	s := newShell(t)
	dbURL := emptyDatabase(t)
	amqptest.Dial(t)
	prefix := amqptest.Prefix(t)
	path := s.writeConfig("config.yaml", repoConfigAs(t, dbURL, storetest.AppURLOf(dbURL), prefix))
	deleteTopologyOf(t, path)
	// A server is set, as after hookrelay login: help asks it nothing.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	var asked atomic.Int64
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			asked.Add(1)
			conn.Close()
		}
	}()
	s.env["HOOKRELAY_SERVER"], s.env["HOOKRELAY_TOKEN"] = "http://"+ln.Addr().String(), "hrt_never-sent"
	untouched := func(what string) {
		t.Helper()
		require.Empty(t, tables(t, dbURL), "%s changed the database", what)
		require.Empty(t, brokerNames(t, prefix), "%s changed the broker", what)
		require.Zero(t, asked.Load(), "%s connected to the admin API", what)
	}

	// The commands an operator must find, at least; the completion lists
	// any added later, and each is checked the same way.
	want := []string{"migrate", "topology export", "topology apply", "events list", "events show", "replay", "retry",
		"dead list", "dead requeue", "purge", "routes", "bench", "completion bash", "help"}
	var listed []string
	for _, c := range commands(t, s, nil) {
		listed = append(listed, strings.Join(c, " "))
	}
	for _, w := range want {
		if !slices.Contains(listed, w) {
			t.Errorf("the completion does not list %q: %v", w, listed)
		}
	}
	all := slices.Compact(slices.Sorted(slices.Values(append(want, listed...))))
	for _, c := range all {
		args := strings.Fields(c)
		for _, form := range [][]string{
			append(slices.Clone(args), "--help"),
			append([]string{"--config", path}, append(slices.Clone(args), "-h")...),
			append([]string{"help"}, args...),
		} {
			res := s.run("hookrelay", form...)
			what := "hookrelay " + strings.Join(form, " ")
			require.Equal(t, 0, res.code, "%s: %s", what, res)
			require.Contains(t, res.stdout, "Usage:", what)
			untouched(what)
		}
	}
	for _, c := range []string{"events list", "replay", "dead list", "purge", "retry"} {
		res := s.run("hookrelay", append(strings.Fields(c), "--help")...)
		require.Contains(t, res.stdout, "Examples:", c)
		require.Contains(t, res.stdout, "(default ", "%s --help shows its defaults", c)
	}
	require.Contains(t, s.run("hookrelay", "events", "list", "--help").stdout, "(default 100)")

	for _, bin := range []string{"receiver", "dispatcher"} {
		res := s.run(bin, "--config", path, "--help")
		require.Equal(t, 0, res.code, "%s --help: %s", bin, res)
		require.Contains(t, res.stdout, "Usage:")
		require.Contains(t, res.stdout, "--config")
		untouched(bin + " --help")
	}
}

// Issue 12, item 2: help, --version on all three binaries, completion,
// and command lines that are wrong exit 2 saying what is wrong.
func TestHelpVersionCompletion(t *testing.T) {
	t.Parallel()
	s := newShell(t)
	for _, args := range [][]string{nil, {"--help"}, {"help"}} {
		res := s.run("hookrelay", args...)
		require.Equal(t, 0, res.code, "hookrelay %v: %s", args, res)
		for _, c := range []string{"events", "replay", "retry", "dead", "purge", "migrate", "topology", "completion"} {
			require.Contains(t, res.stdout, "  "+c+" ", "hookrelay %v lists %s", args, c)
		}
	}
	for _, bin := range []string{"hookrelay", "receiver", "dispatcher"} {
		res := s.run(bin, "--version")
		require.Equal(t, 0, res.code, "%s --version: %s", bin, res)
		// The commit shows when the build could stamp it (a git clone;
		// not a git worktree, which Go does not recognise).
		require.Regexp(t, `^`+bin+` (v\S+|\(devel\)) \(github\.com/hookrelay/hookrelay(, revision [0-9a-f]{12}, \S+(, modified)?)?\)\n$`, res.stdout)
	}
	for _, sh := range []string{"bash", "zsh", "fish"} {
		res := s.run("hookrelay", "completion", sh)
		require.Equal(t, 0, res.code, "completion %s: %s", sh, res)
		require.Contains(t, res.stdout, "hookrelay", sh)
		require.Greater(t, len(res.stdout), 1000, sh)
	}
	for _, tc := range []struct {
		args []string
		say  string
	}{
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"events", "frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"events", "list", "--frobnicate"}, "unknown flag: --frobnicate"},
		{[]string{"events", "show"}, "needs one event id"},
		{[]string{"dead", "requeue"}, `"route" not set`},
		{[]string{"purge"}, `"older-than" not set`},
	} {
		res := s.run("hookrelay", tc.args...)
		require.Equal(t, 2, res.code, "%v: %s", tc.args, res)
		require.Contains(t, res.stderr, tc.say, "%v", tc.args)
		require.Empty(t, res.stdout, "%v prints nothing on stdout", tc.args)
	}
	res := s.run("receiver", "--frobnicate")
	require.Equal(t, 2, res.code, res)
	require.Contains(t, res.stderr, "unknown flag: --frobnicate")
}

// Issue 12, item 3: the operator commands run in a new shell as the README
// writes them, with the senders' and routes' secrets unset; the daemons
// still refuse a config whose secrets are missing. The config file is
// ./config.yaml, HOOKRELAY_CONFIG or --config; without one the error names
// every place it looked.
func TestOperatorCommandsInANewShell(t *testing.T) {
	t.Parallel()
	s := newShell(t)
	dbURL := storetest.NewDatabase(t)
	amqptest.Dial(t)
	prefix := amqptest.Prefix(t)
	path := s.writeConfig("config.yaml", repoConfig(t, dbURL, prefix))
	deleteTopologyOf(t, path)

	for _, args := range [][]string{
		{"migrate"},
		{"topology", "apply"},
		{"topology", "export"},
		{"routes"},
		{"events", "list"},
		{"replay", "--source", "demo", "--dry-run"},
		{"retry", "--route", "billing", "--state", "retrying", "--dry-run"},
		{"dead", "list", "--route", "billing"},
		{"purge", "--older-than", "30d", "--dry-run"},
	} {
		res := s.run("hookrelay", args...)
		require.Equal(t, 0, res.code, "hookrelay %v with the secrets unset: %s", args, res)
	}

	res := s.run("receiver")
	require.Equal(t, 2, res.code, res)
	require.Contains(t, res.stderr, "environment variable HOOKRELAY_DEMO_SECRET is not set")

	// HOOKRELAY_CONFIG, from another folder.
	other := newShell(t)
	other.env["HOOKRELAY_CONFIG"] = path
	res = other.run("hookrelay", "events", "list")
	require.Equal(t, 0, res.code, res)
	require.Equal(t, "0 event(s)", lastLine(res.stdout))

	// None of the three: the error names each place.
	none := newShell(t)
	res = none.run("hookrelay", "events", "list")
	require.NotEqual(t, 0, res.code, res)
	for _, place := range []string{"--config", "HOOKRELAY_CONFIG", filepath.Join(none.dir, "config.yaml")} {
		require.Contains(t, res.stderr, place, "the error names %s", place)
	}
	res = none.run("receiver")
	require.Equal(t, 2, res.code, res)
	require.Contains(t, res.stderr, filepath.Join(none.dir, "config.yaml"))
	missing := filepath.Join(none.dir, "elsewhere.yaml")
	res = none.run("hookrelay", "--config", missing, "events", "list")
	require.NotEqual(t, 0, res.code, res)
	require.Contains(t, res.stderr, fmt.Sprintf("--config %s", missing))
	none.env["HOOKRELAY_CONFIG"] = missing
	res = none.run("dispatcher")
	require.Equal(t, 2, res.code, res)
	require.Contains(t, res.stderr, "HOOKRELAY_CONFIG="+missing)
}
