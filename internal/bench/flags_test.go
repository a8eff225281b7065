package bench

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestQuickKeepsExplicitFlags(t *testing.T) {
	t.Parallel()
	o, err := parseFlags([]string{"--quick", "--backlog", "500"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, 500, o.backlog, "an explicit flag wins over --quick")
	require.Equal(t, 5*time.Second, o.duration)
	require.Equal(t, 5*time.Second, o.e2eDuration)
	require.Equal(t, 100, o.rate)
	require.Equal(t, 32, o.clients, "--quick keeps the concurrency of a full run")

	o, err = parseFlags(nil, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, 20*time.Second, o.duration)
	require.Equal(t, 10000, o.backlog)
	require.Len(t, o.phases, len(allPhases))
}

// --filters runs the end-to-end phase alone, in two rounds unless told.
func TestFiltersRunsEndToEndInPairsOfRounds(t *testing.T) {
	t.Parallel()
	o, err := parseFlags([]string{"--filters"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, 2, o.rounds)
	require.Equal(t, map[string]bool{phaseE2E: true}, o.phases)
	o, err = parseFlags([]string{"--filters", "--rounds", "4", "--phases", "ingest"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, 4, o.rounds)
	require.Equal(t, map[string]bool{phaseE2E: true}, o.phases)
}

func TestInvalidFlagsAreRejected(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"duration without unit", []string{"--duration", "20"}, "invalid value"},
		{"zero clients", []string{"--clients", "0"}, "--clients"},
		{"concurrency above the config limit", []string{"--concurrency", "300"}, "--concurrency"},
		{"unknown phase", []string{"--phases", "ingest,warp"}, `unknown phase "warp"`},
		{"stray argument", []string{"now"}, "unexpected arguments"},
		{"soak without a unit", []string{"--soak", "30"}, "invalid value"},
		{"soak sampled too rarely", []string{"--soak", "1m", "--soak-every", "45s"}, "--soak-every"},
		{"history with rounds", []string{"--history", "1000", "--rounds", "3"}, "leave --rounds out"},
		{"history with a soak", []string{"--history", "1000", "--soak", "10m"}, "separate runs"},
		{"rls in odd rounds", []string{"--rls", "--rounds", "3"}, "even --rounds"},
		{"rls with history", []string{"--rls", "--history", "1000"}, "a run of its own"},
		{"filters in odd rounds", []string{"--filters", "--rounds", "3"}, "even --rounds"},
		{"filters with tracing", []string{"--filters", "--tracing"}, "a run of its own"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseFlags(tc.args, &bytes.Buffer{})
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestHelpDoesNothing(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	// A database URL nothing listens on: help must not reach for it.
	err := Main(context.Background(), []string{"--help", "--database-url", "postgres://nobody@127.0.0.1:1/x"}, &stdout, &stderr)
	require.NoError(t, err)
	require.Contains(t, stderr.String(), "Usage: hookrelay bench")
	require.Empty(t, stdout.String())
}

func TestUnknownChildRole(t *testing.T) {
	t.Parallel()
	err := Main(context.Background(), []string{ChildArg, "juggler"}, &bytes.Buffer{}, &bytes.Buffer{})
	require.ErrorContains(t, err, `unknown role "juggler"`)
}
