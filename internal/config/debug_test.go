package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Issue 11 item 5: debug.pprof is off by default, on when set (file or
// environment), and anything but a boolean is refused with the key's name.
func TestDebugPprof(t *testing.T) {
	t.Parallel()
	env := map[string]string{"ACME_SECRET": "x"}
	cfg, err := Load(writeConfig(t, validYAML), envMap(env))
	require.NoError(t, err)
	require.False(t, cfg.Debug.Pprof, "off by default")

	cfg, err = Load(writeConfig(t, validYAML+"debug: {pprof: true}\n"), envMap(env))
	require.NoError(t, err)
	require.True(t, cfg.Debug.Pprof)

	cfg, err = Load(writeConfig(t, validYAML), envMap(map[string]string{"ACME_SECRET": "x", "HOOKRELAY_DEBUG_PPROF": "true"}))
	require.NoError(t, err)
	require.True(t, cfg.Debug.Pprof, "HOOKRELAY_DEBUG_PPROF turns it on")

	for _, bad := range []string{"debug: {pprof: maybe}\n", "debug: {pprof: true, cpu: 1}\n"} {
		_, err = Load(writeConfig(t, validYAML+bad), envMap(env))
		require.Error(t, err, bad)
		require.Contains(t, err.Error(), "debug", bad)
	}
}
