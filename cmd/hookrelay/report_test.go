package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/hookrelay/hookrelay/internal/setup"

	"github.com/stretchr/testify/require"
)

// What the CLI says and returns for a command line it cannot run; none of
// these needs a service.
func TestCLIExitStatus(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`
database: {url: "postgres://postgres@127.0.0.1:9/none"}
amqp: {url: "amqp://guest:guest@127.0.0.1:9/"}
`), 0o600))
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr []string
	}{
		{"an unknown global flag", []string{"--frobnicate"}, 2, []string{"unknown flag: --frobnicate", "Run 'hookrelay --help' for usage."}},
		{"an unknown command", []string{"--config", path, "frobnicate"}, 2, []string{`hookrelay: unknown command "frobnicate"`, "Run 'hookrelay --help' for usage."}},
		{"topology with an unknown verb", []string{"--config", path, "topology", "frob"}, 2, []string{`unknown command "frob" for "hookrelay topology"`}},
		{"a bad flag value", []string{"--config", path, "events", "list", "--limit", "x"}, 2, []string{`invalid argument "x" for "--limit"`, "Run 'hookrelay events list --help' for usage."}},
		{"a config that does not exist", []string{"--config", filepath.Join(t.TempDir(), "none.yaml"), "migrate"}, 2, []string{"hookrelay: no config file"}},
		{"a config that cannot reach the database", []string{"--config", path, "events", "list"}, 1, []string{"hookrelay: "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), tc.args, noEnv, &stdout, &stderr)
			require.Error(t, err)
			require.Equal(t, tc.code, setup.ExitCode(err), "%v", err)
			for _, want := range tc.stderr {
				require.Contains(t, stderr.String(), want)
			}
			require.Empty(t, stdout.String())
		})
	}
	require.Equal(t, 0, setup.ExitCode(nil))
	require.Equal(t, 1, setup.ExitCode(errors.New("broken")))
}

// topology export needs nothing but the config: it writes the definitions
// to stdout, or to --out and says where (issue 12, item 9: it never
// overwrites the committed file unasked).
func TestTopologyExportToStdout(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`
database: {url: "postgres://postgres@127.0.0.1:9/none"}
amqp: {url: "amqp://guest:guest@127.0.0.1:9/", prefix: hr}
routes:
  - {name: billing, url: "http://127.0.0.1:9/", bindings: ["acme.#"], signing_secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}
`), 0o600))
	var stdout bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"--config", path, "topology", "export"}, noEnv, &stdout, &bytes.Buffer{}))
	require.Contains(t, stdout.String(), `"name": "hr.route.billing"`)
	out := filepath.Join(t.TempDir(), "defs.json")
	var stderr bytes.Buffer
	stdout.Reset()
	require.NoError(t, run(context.Background(), []string{"--config", path, "topology", "export", "--out", out}, noEnv, &stdout, &stderr))
	require.Empty(t, stdout.String())
	require.Equal(t, "wrote "+out+"\n", stderr.String())
	defs, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Contains(t, string(defs), `"name": "hr.route.billing"`)
}

// bench needs no config: --help prints its flags; its helper processes,
// started as this executable, reach bench.Main too.
func TestBenchIsWired(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"bench", "--help"}, noEnv, &stdout, &stderr))
	require.Contains(t, stdout.String(), "Usage: hookrelay bench")
	require.Contains(t, stdout.String(), "-database-url")
	err := run(context.Background(), []string{"bench-child", "frobnicate"}, noEnv, &stdout, &stderr)
	require.ErrorContains(t, err, `unknown role "frobnicate"`)
	require.Equal(t, 1, setup.ExitCode(err))
}
