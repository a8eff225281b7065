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
		Rounds:   1,
		Started:  time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Postgres: pgInfo{Version: "15", Settings: map[string]string{"synchronous_commit": "on"}},
		Phases: []*Phase{
			{Key: "ingest-stopped", Round: 1, Title: "ingest, dispatcher stopped", System: "hookrelay", Count: 1000, Rate: 500,
				Latency: &Latency{N: 1000, P50: 10, P90: 20, P99: 30, Max: 40}, Checked: true, CPUPerEventMS: 2, OwnCPUPerEventMS: 1.5, WALPerEvent: 2048,
				Usage: Usage{MachineCPU: 2, MachineBusy: 0.5, Procs: []ProcUsage{{Name: procReceiver, CPU: 1, PeakMB: 30, Mem: "rss"}}}},
			{Key: "bare-ingest", Round: 1, Title: "ingest, bare one-statement server", System: "reference", Count: 2000, Rate: 1000, Checked: true,
				Usage: Usage{Procs: []ProcUsage{{Name: procPostgres, CPU: 3, PeakMB: 200, Mem: "pss"}}}},
			{Key: "delivery", Round: 1, Title: "delivery, drain of 1000", System: "hookrelay", Count: 999, Rate: 250, Checked: true, Lost: 1, CPUPerEventMS: 1},
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
	require.Regexp(t, `ingest, dispatcher stopped\s+1000\s+500\s+10\.0\s+20\.0\s+30\.0\s+40\.0\s+2\.00\s+1\.50\s+2\.0\s+0\s+0\s+0`, s)
	require.Regexp(t, `ingest, dispatcher stopped / bare ingest\s+0\.50`, s)
	require.Regexp(t, `receiver\s+1\.0s\s+30M`, s)
	require.Regexp(t, `postgres\s+-\s+3\.0s\s+200M pss`, s)
	require.Contains(t, s, "FAILED")
	require.Contains(t, s, "[1 lost]")
}

func TestRoundsAreComparedWithinThemselves(t *testing.T) {
	t.Parallel()
	var phases []*Phase
	// Round 2 ran on a busier machine: both systems slower, the ratio
	// taken within each round barely moves.
	for round, scale := range map[int]float64{1: 1, 2: 0.5, 3: 0.9} {
		phases = append(phases,
			&Phase{Key: "ingest-stopped", Title: "ingest, dispatcher stopped", System: "hookrelay", Round: round, Rate: 400 * scale, CPUPerEventMS: float64(round)},
			&Phase{Key: "bare-ingest", Title: "ingest, bare one-statement server", System: "reference", Round: round, Rate: 1000 * scale},
			&Phase{Key: "delivery", Title: "delivery, drain of 1000", System: "hookrelay", Round: round, Rate: 100 * float64(round), CPUPerEventMS: 1},
		)
	}
	res := &Results{Rounds: 3, Phases: phases}
	r := &runner{res: res}
	r.summarize()
	var medians []Ratio
	for _, rt := range res.Ratios {
		require.InDelta(t, 0.4, rt.Value, 1e-9)
		if rt.Round == 0 {
			medians = append(medians, rt)
		}
	}
	require.Len(t, res.Ratios, 4, "three rounds and their median")
	require.Len(t, medians, 1)
	require.Equal(t, []float64{2, 3, 4}, res.CPUPerEventRounds, "in round order")
	require.Equal(t, 3.0, res.CPUPerEventMS, "the median of 2, 3 and 4")

	var out bytes.Buffer
	require.NoError(t, r.printTable(&out))
	require.Regexp(t, `#1\s+#2\s+#3\s+median`, out.String())
	require.Regexp(t, `ingest, dispatcher stopped / bare ingest\s+0\.40\s+0\.40\s+0\.40\s+0\.40`, out.String())
	require.Contains(t, out.String(), "delivery, drain of 1000 #2")
	require.Contains(t, out.String(), "per process and phase, round 3")
}

// Issue 21: end to end is compared with the bare reference at the same
// rate, per round, by own CPU per event and p50/p99, with the medians of
// the ratios over the rounds.
func TestEndToEndIsComparedWithTheBareReference(t *testing.T) {
	t.Parallel()
	var phases []*Phase
	for round, cpu := range map[int]float64{1: 7, 2: 5, 3: 6} {
		phases = append(phases,
			&Phase{Key: "e2e", Title: "end to end, 200/s × 20s", System: "hookrelay", Round: round, Count: 4000, Rate: 200,
				OwnCPUPerEventMS: cpu, Latency: &Latency{N: 4000, P50: 16, P99: 116}},
			&Phase{Key: "bare-e2e", Title: "end to end, bare relay + forwarder, 200/s × 20s", System: "reference", Round: round, Count: 4000, Rate: 200,
				OwnCPUPerEventMS: 2, Latency: &Latency{N: 4000, P50: 4, P99: 29}},
		)
	}
	res := &Results{Rounds: 3, Phases: phases, Load: Load{Rate: 200}}
	r := &runner{res: res}
	r.summarize()
	require.Len(t, res.EndToEnd, 3)
	for _, c := range res.EndToEnd {
		require.Equal(t, 2.0, c.OwnCPU.Bare)
		require.InDelta(t, c.OwnCPU.Hookrelay/2, c.OwnCPU.Ratio, 1e-9)
		require.Equal(t, Compare{Hookrelay: 16, Bare: 4, Ratio: 4}, c.P50)
	}
	require.Equal(t, []int{1, 2, 3}, []int{res.EndToEnd[0].Round, res.EndToEnd[1].Round, res.EndToEnd[2].Round}, "in round order")

	var out bytes.Buffer
	require.NoError(t, r.printTable(&out))
	s := out.String()
	require.Contains(t, s, "end to end at 200/s against the bare relay + forwarder")
	require.Regexp(t, `#1\s+7\.00\s+2\.00\s+3\.50\s+16\.0\s+4\.0\s+4\.00\s+116\.0\s+29\.0\s+4\.00`, s)
	require.Regexp(t, `median ratio\s+3\.00\s+4\.00\s+4\.00`, s)
}

// The recording forwarder's phases are references of their own: the drain
// and end to end are compared with them apart from the bare ones.
func TestTheRecordingForwarderIsAReferenceApart(t *testing.T) {
	t.Parallel()
	lat := func(p50, p99 float64) *Latency { return &Latency{N: 4000, P50: p50, P99: p99} }
	res := &Results{Rounds: 1, Load: Load{Rate: 200}, Phases: []*Phase{
		{Key: "delivery", Title: "delivery", System: "hookrelay", Round: 1, Count: 10000, Rate: 2000},
		{Key: "bare-forwarder", Title: "delivery, bare forwarder", System: "reference", Round: 1, Count: 10000, Rate: 5000},
		{Key: phaseBareRecorder, Title: "delivery, recording forwarder", System: "reference", Round: 1, Count: 10000, Rate: 1600},
		{Key: "e2e", Title: "end to end", System: "hookrelay", Round: 1, Count: 4000, Rate: 200, OwnCPUPerEventMS: 6, Latency: lat(4, 30)},
		{Key: "bare-e2e", Title: "end to end, bare", System: "reference", Round: 1, Count: 4000, Rate: 200, OwnCPUPerEventMS: 3, Latency: lat(0.5, 3)},
		{Key: phaseBareRecorderE2E, Title: "end to end, recording", System: "reference", Round: 1, Count: 4000, Rate: 200, OwnCPUPerEventMS: 4, Latency: lat(1, 60)},
	}}
	r := &runner{res: res}
	r.summarize()
	got := map[string]float64{}
	for _, rt := range res.Ratios {
		got[rt.Name] = rt.Value
	}
	require.Equal(t, map[string]float64{
		"delivery / bare forwarder":            0.4,
		"delivery / recording forwarder":       1.25,
		"recording forwarder / bare forwarder": 0.32,
	}, got)
	require.Len(t, res.EndToEnd, 2)
	require.Equal(t, E2ECompare{Round: 1, Reference: phaseBareE2E, OwnCPU: Compare{Hookrelay: 6, Bare: 3, Ratio: 2},
		P50: Compare{Hookrelay: 4, Bare: 0.5, Ratio: 8}, P99: Compare{Hookrelay: 30, Bare: 3, Ratio: 10}}, res.EndToEnd[0])
	require.Equal(t, E2ECompare{Round: 1, Reference: phaseBareRecorderE2E, OwnCPU: Compare{Hookrelay: 6, Bare: 4, Ratio: 1.5},
		P50: Compare{Hookrelay: 4, Bare: 1, Ratio: 4}, P99: Compare{Hookrelay: 30, Bare: 60, Ratio: 0.5}}, res.EndToEnd[1])

	var out bytes.Buffer
	require.NoError(t, r.printTable(&out))
	s := out.String()
	require.Regexp(t, `against the bare relay \+ forwarder at the same rate[^\n]*\n[^\n]*\n\s+#1\s+6\.00\s+3\.00\s+2\.00`, s)
	require.Regexp(t, `against the bare relay \+ recording forwarder at the same rate[^\n]*\n[^\n]*\n\s+#1\s+6\.00\s+4\.00\s+1\.50`, s)
}

func TestMedian(t *testing.T) {
	t.Parallel()
	require.Equal(t, 2.0, median([]float64{3, 1, 2}))
	require.Equal(t, 2.5, median([]float64{4, 1, 2, 3}))
	in := []float64{3, 1, 2}
	median(in)
	require.Equal(t, []float64{3, 1, 2}, in, "the input is left as it was")
}

// A reference that moved nothing, or failed requests, fails the run: its
// ratios would compare with a system that did not run (a bare relay
// without its database answered 503 to all 4,000 requests, and the run
// passed).
func TestAFailedReferenceFailsTheRun(t *testing.T) {
	t.Parallel()
	res := &Results{Rounds: 1, Phases: []*Phase{
		{Key: "e2e", Title: "end to end", System: "hookrelay", Round: 1, Count: 4000, Rate: 200},
		{Key: "bare-e2e", Title: "end to end, bare", System: "reference", Round: 1, Failed: 4000},
		{Key: "bare-ingest", Title: "ingest, bare", System: "reference", Round: 1, Count: 10, Failed: 2},
	}}
	r := &runner{res: res}
	r.summarize()
	require.Equal(t, []string{"end to end, bare: [no event moved]", "ingest, bare: [2 requests failed]"}, res.Failures)
}
