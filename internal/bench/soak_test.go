package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func sample(mem, goroutines float64, outbox int) SoakSample {
	procs := map[string]float64{procReceiver: mem, procDispatcher: mem, procPostgres: mem, procRabbitMQ: mem}
	two := map[string]float64{procReceiver: goroutines, procDispatcher: goroutines}
	return SoakSample{MemMB: procs, Goroutines: two, OpenFDs: two, PGBackends: 8, AMQPConns: 3, OutboxRows: outbox, Leases: 2}
}

func series(t *testing.T, s *Soak, name string) SoakSeries {
	t.Helper()
	for _, x := range s.Series {
		if x.Name == name {
			return x
		}
	}
	t.Fatalf("no series %q", name)
	return SoakSeries{}
}

// The first sample (start-up) is left out; a series is flat within 10% of
// its median or its absolute slack; memory that keeps growing is not.
func TestJudgeSoak(t *testing.T) {
	t.Parallel()
	s := &Soak{Samples: []SoakSample{
		sample(10, 20, 500), // start-up: ignored
		sample(100, 40, 10),
		sample(104, 44, 30),
		sample(109, 41, 0),
		sample(120, 42, 45),
		sample(131, 40, 20),
	}}
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	lats := [][]time.Duration{ms(5, 6, 100), ms(5, 7), ms(6), ms(6, 7), ms(5, 6, 110), ms(5, 6)}
	judgeSoak(s, lats)

	mem := series(t, s, "memory MB, receiver")
	require.Equal(t, 109.0, mem.Median)
	require.False(t, mem.Flat, "100 to 131 MB is more than 10%% around 109: %+v", mem)
	g := series(t, s, "goroutines, dispatcher")
	require.True(t, g.Flat, "40 to 44 goroutines: %+v", g)
	require.Equal(t, 40.0, g.Min, "the start-up sample is left out")
	ob := series(t, s, "outbox rows")
	require.True(t, ob.Flat, "0 to 45 rows is within the slack of 40 around 20: %+v", ob)
	require.True(t, series(t, s, "postgres connections").Flat)

	// Three intervals each side of six: p99 of 100 ms first, 110 last.
	require.InDelta(t, 100, s.FirstP99MS, 1)
	require.InDelta(t, 110, s.LastP99MS, 1)
	require.True(t, s.P99Flat, "110 is within 20%% of 100")

	// Better at the end is not a drift; worse by more than 20% is.
	judge := func(first, last int) bool {
		x := &Soak{Samples: make([]SoakSample, 2)}
		judgeSoak(x, [][]time.Duration{ms(first), ms(last)})
		return x.P99Flat
	}
	require.True(t, judge(100, 50))
	require.False(t, judge(100, 121))
}

func TestParseMetrics(t *testing.T) {
	t.Parallel()
	text := "# HELP go_goroutines x\n# TYPE go_goroutines gauge\ngo_goroutines 42\n" +
		"go_goroutines_other 1\nprocess_open_fds 17\nhookrelay_x{a=\"b\"} 3\n"
	m, err := parseMetrics(strings.NewReader(text), "go_goroutines", "process_open_fds")
	require.NoError(t, err)
	require.Equal(t, map[string]float64{"go_goroutines": 42, "process_open_fds": 17}, m)
	_, err = parseMetrics(strings.NewReader(text), "go_threads")
	require.ErrorContains(t, err, "go_threads not served")
}

// --history compares each hookrelay phase of round 2 (with the history)
// with the same phase of round 1 (empty); references are left out.
func TestCompareHistory(t *testing.T) {
	t.Parallel()
	lat := func(p99 float64) *Latency { return &Latency{P99: p99} }
	r := &runner{res: &Results{History: &History{Events: 1000}, Phases: []*Phase{
		{Key: "e2e", System: "hookrelay", Round: 1, Rate: 200, OwnCPUPerEventMS: 5, Latency: lat(10)},
		{Key: "bare-e2e", System: "reference", Round: 1, Rate: 200, OwnCPUPerEventMS: 3, Latency: lat(2)},
		{Key: "e2e", System: "hookrelay", Round: 2, Rate: 200, OwnCPUPerEventMS: 5.5, Latency: lat(12)},
		{Key: "bare-e2e", System: "reference", Round: 2, Rate: 200, OwnCPUPerEventMS: 3, Latency: lat(2)},
	}}}
	r.compareHistory()
	c := r.res.History.Compare
	require.Len(t, c, 1)
	require.Equal(t, "e2e", c[0].Phase)
	require.InDelta(t, 1.1, c[0].OwnCPU.Ratio, 1e-9)
	require.InDelta(t, 1.2, c[0].P99.Ratio, 1e-9)
	require.InDelta(t, 1.0, c[0].Rate.Ratio, 1e-9)
	require.Equal(t, 5.5, c[0].OwnCPU.Hookrelay, "Hookrelay holds the value with the history")
}
