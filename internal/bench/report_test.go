package bench

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTableShowsRatiosFailuresAndProcesses(t *testing.T) {
	t.Parallel()
	res := &Results{
		Started:  time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Postgres: pgInfo{Version: "15", Settings: map[string]string{"synchronous_commit": "on"}},
		Phases: []*Phase{
			{Key: "ingest-stopped", Title: "ingest, dispatcher stopped", System: "hookrelay", Count: 1000, Rate: 500,
				Latency: &Latency{N: 1000, P50: 10, P90: 20, P99: 30, Max: 40}, Checked: true, CPUPerEventMS: 2,
				Usage: Usage{MachineCPU: 2, MachineBusy: 0.5, Procs: []ProcUsage{{Name: procReceiver, CPU: 1, PeakMB: 30, Mem: "rss"}}}},
			{Key: "bare-ingest", Title: "ingest, bare one-statement server", System: "reference", Count: 2000, Rate: 1000, Checked: true,
				Usage: Usage{Procs: []ProcUsage{{Name: procPostgres, CPU: 3, PeakMB: 200, Mem: "pss"}}}},
			{Key: "delivery", Title: "delivery, drain of 1000", System: "hookrelay", Count: 999, Rate: 250, Checked: true, Lost: 1, CPUPerEventMS: 1},
		},
	}
	r := &runner{res: res, runID: "abcd"}
	r.summarize()
	require.Len(t, res.Ratios, 1)
	require.InDelta(t, 0.5, res.Ratios[0].Value, 1e-9)
	require.Equal(t, 3.0, res.CPUPerEventMS, "ingest with the dispatcher stopped + delivery")
	require.Equal(t, []string{"delivery, drain of 1000: [1 lost]"}, res.Failures)

	var out bytes.Buffer
	require.NoError(t, r.printTable(&out))
	s := out.String()
	require.Contains(t, s, "synchronous_commit=on")
	require.Regexp(t, `ingest, dispatcher stopped\s+1000\s+500\s+10\.0\s+20\.0\s+30\.0\s+40\.0\s+2\.00\s+0\s+0\s+0`, s)
	require.Regexp(t, `ingest, dispatcher stopped / bare ingest\s+0\.50`, s)
	require.Regexp(t, `receiver\s+1\.0s\s+30M`, s)
	require.Regexp(t, `postgres\s+-\s+3\.0s\s+200M pss`, s)
	require.Contains(t, s, "FAILED")
	require.Contains(t, s, "[1 lost]")
}
