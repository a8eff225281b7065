package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/stretchr/testify/require"
)

func noEnv(string) (string, bool) { return "", false }

// What reaches the dispatcher before it runs: --help, a bad flag, a bad config.
// None of them needs a service, and none starts anything.
func TestRunBeforeStart(t *testing.T) {
	t.Parallel()
	bad := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("database: {url: \"mysql://x\"}\n"), 0o600))
	for _, tc := range []struct {
		name   string
		args   []string
		env    func(string) (string, bool)
		code   int
		stdout string
		stderr string
	}{
		{"help prints the usage", []string{"--help"}, noEnv, 0, "--config string", ""},
		{"--version prints the version", []string{"--version"}, noEnv, 0, "dispatcher ", ""},
		{"an unknown flag", []string{"--frobnicate"}, noEnv, 2, "", "unknown flag: --frobnicate"},
		{"an argument", []string{"now"}, noEnv, 2, "", "takes no arguments"},
		{"a missing config file", []string{"--config", filepath.Join(t.TempDir(), "none.yaml")}, noEnv, 2, "", "dispatcher: no config file"},
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
