package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

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
		{"no command", nil, 2, []string{"hookrelay: no command given", "usage: hookrelay"}},
		{"an unknown global flag", []string{"--frobnicate"}, 2, []string{"flag provided but not defined: -frobnicate", "usage: hookrelay"}},
		{"an unknown command", []string{"--config", path, "frobnicate"}, 2, []string{`hookrelay: unknown command "frobnicate"`, "usage: hookrelay"}},
		{"topology without a verb", []string{"--config", path, "topology"}, 2, []string{"topology needs export or apply"}},
		{"a config that does not load", []string{"--config", filepath.Join(t.TempDir(), "none.yaml"), "migrate"}, 1, []string{"hookrelay: reading config"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), tc.args, noEnv, &stdout, &stderr)
			require.Error(t, err)
			require.Equal(t, tc.code, report(err, &stderr))
			for _, want := range tc.stderr {
				require.Contains(t, stderr.String(), want)
			}
			require.Empty(t, stdout.String())
		})
	}
	require.Equal(t, 0, report(nil, &bytes.Buffer{}))
	require.Equal(t, 1, report(errors.New("broken"), &bytes.Buffer{}))
}

// topology export needs nothing but the config: it writes the definitions
// file and says where.
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
	require.NoError(t, run(context.Background(), []string{"--config", path, "topology", "export", "--out", "-"}, noEnv, &stdout, &bytes.Buffer{}))
	require.Contains(t, stdout.String(), `"name": "hr.route.billing"`)
}

// bench needs no config: --help prints its flags; its helper processes,
// started as this executable, reach bench.Main too.
func TestBenchIsWired(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"bench", "--help"}, noEnv, &stdout, &stderr))
	require.Contains(t, stderr.String(), "Usage: hookrelay bench")
	err := run(context.Background(), []string{"bench-child", "frobnicate"}, noEnv, &stdout, &stderr)
	require.ErrorContains(t, err, `unknown role "frobnicate"`)
	require.Equal(t, 1, report(err, &bytes.Buffer{}))
}
