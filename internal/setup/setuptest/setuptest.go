// Package setuptest holds the checks every daemon's main shares: what it
// does with --help, a bad flag or a bad config before it starts anything.
package setuptest

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/stretchr/testify/require"
)

// RunFunc is a daemon's run(ctx, args, env, stdout, stderr).
type RunFunc func(ctx context.Context, args []string, env config.LookupEnvFunc, stdout, stderr io.Writer) error

func noEnv(string) (string, bool) { return "", false }

// RunBeforeStart checks what reaches the daemon called name before it runs:
// --help, --version, a bad flag, an argument, a missing or invalid config.
// None of them needs a service, and none starts anything.
func RunBeforeStart(t *testing.T, name string, run RunFunc) {
	t.Helper()
	bad := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("database: {url: \"mysql://x\"}\n"), 0o600))
	for _, tc := range []struct {
		name   string
		args   []string
		env    config.LookupEnvFunc
		code   int
		stdout string
		stderr string
	}{
		{"help prints the usage", []string{"--help"}, noEnv, 0, "--config string", ""},
		{"--version prints the version", []string{"--version"}, noEnv, 0, name + " ", ""},
		{"an unknown flag", []string{"--frobnicate"}, noEnv, 2, "", "unknown flag: --frobnicate"},
		{"an argument", []string{"now"}, noEnv, 2, "", "takes no arguments"},
		{"a missing config file", []string{"--config", filepath.Join(t.TempDir(), "none.yaml")}, noEnv, 2, "", name + ": no config file"},
		{"an invalid config names the key", []string{"--config", bad}, noEnv, 2, "", "database.url: must be a postgres:// URL"},
		{"HOOKRELAY_CONFIG names the file", nil, func(k string) (string, bool) { return bad, k == "HOOKRELAY_CONFIG" }, 2, "", "database.url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), tc.args, tc.env, &stdout, &stderr)
			require.Equal(t, tc.code, setup.ExitCode(err), "%v", err)
			require.Contains(t, stderr.String(), tc.stderr)
			if tc.stdout == "" {
				require.Empty(t, stdout.String())
			} else {
				require.Contains(t, stdout.String(), tc.stdout)
			}
		})
	}
}
