package main

import (
	"context"
	"testing"

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
	require.Contains(t, res.stderr, `route "nosuch" is not in the config`)

	res = s.run("hookrelay", "routes")
	require.Equal(t, 0, res.code, res)
	require.Regexp(t, `billing\s+\S+\.route\.billing\s+.*\s+0\s+0\s+0\s+active\s+0\s+-\n`, res.stdout)

	res = s.run("hookrelay", "routes", "pause", "billing")
	require.Equal(t, 0, res.code, res)
	require.Contains(t, res.stdout, "route billing paused")
	list, err := db.RouteStateList(context.Background())
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.True(t, list[0].Paused)
	require.NotEmpty(t, list[0].PausedBy)
	require.NotNil(t, list[0].PausedAt)

	res = s.run("hookrelay", "routes", "pause", "billing")
	require.Equal(t, 0, res.code, res)
	require.Contains(t, res.stdout, "route billing was paused already")
	res = s.run("hookrelay", "routes")
	require.Regexp(t, `billing\s+.*\s+paused\s+0\s+-\n`, res.stdout)

	res = s.run("hookrelay", "routes", "resume", "billing")
	require.Equal(t, 0, res.code, res)
	require.Contains(t, res.stdout, "route billing resumed")
	list, err = db.RouteStateList(context.Background())
	require.NoError(t, err)
	require.False(t, list[0].Paused)
	require.Nil(t, list[0].PausedAt)
	res = s.run("hookrelay", "routes")
	require.Regexp(t, `billing\s+.*\s+active\s+0\s+-\n`, res.stdout)
}
