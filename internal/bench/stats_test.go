package bench

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPercentileIsNearestRank(t *testing.T) {
	t.Parallel()
	ds := make([]time.Duration, 100)
	for i := range ds {
		ds[i] = time.Duration(100-i) * time.Millisecond // 100ms..1ms, unsorted
	}
	got := summarize(ds)
	require.Equal(t, &Latency{N: 100, P50: 50, P90: 90, P99: 99, Max: 100}, got)

	for _, tc := range []struct {
		name string
		in   []time.Duration
		want Latency
	}{
		{"one value", []time.Duration{7 * time.Millisecond}, Latency{N: 1, P50: 7, P90: 7, P99: 7, Max: 7}},
		// Nearest rank on 3 values: p50 is the 2nd (ceil(1.5)), p90 and
		// p99 the 3rd; always a value that was observed.
		{"three values", []time.Duration{3 * time.Millisecond, time.Millisecond, 2 * time.Millisecond}, Latency{N: 3, P50: 2, P90: 3, P99: 3, Max: 3}},
		{"sub-millisecond", []time.Duration{1500 * time.Microsecond, 500 * time.Microsecond}, Latency{N: 2, P50: 0.5, P90: 1.5, P99: 1.5, Max: 1.5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, &tc.want, summarize(tc.in))
		})
	}
	require.Nil(t, summarize(nil), "no values, no summary")
}

func TestLongestGap(t *testing.T) {
	t.Parallel()
	base := time.Unix(1000, 0)
	ts := []time.Time{
		base.Add(30 * time.Millisecond), base, base.Add(10 * time.Millisecond),
		base.Add(1030 * time.Millisecond), base.Add(1040 * time.Millisecond),
	}
	gap, at := longestGap(ts)
	require.Equal(t, time.Second, gap)
	require.Equal(t, base.Add(30*time.Millisecond), at)

	gap, _ = longestGap([]time.Time{base})
	require.Zero(t, gap, "one delivery has no gap")
}

func TestParseMachineCPU(t *testing.T) {
	t.Parallel()
	stat := "cpu  100 20 30 400 50 6 7 8 9 10\ncpu0 50 10 15 200 25 3 3 4 0 0\nintr 12345\n"
	got, err := parseMachineCPU([]byte(stat))
	require.NoError(t, err)
	// busy = user + nice + system + irq + softirq; total adds idle,
	// iowait and steal (guest is inside user already).
	require.Equal(t, machineCPU{Busy: 100 + 20 + 30 + 6 + 7, Total: 100 + 20 + 30 + 6 + 7 + 400 + 50 + 8}, got)

	_, err = parseMachineCPU([]byte("cpu0 1 2 3 4 5 6 7 8\n"))
	require.ErrorContains(t, err, "no cpu line")
	_, err = parseMachineCPU([]byte("cpu  1 2 3\n"))
	require.ErrorContains(t, err, "fields")
}

func TestParsePidStat(t *testing.T) {
	t.Parallel()
	// Fields after the command: state ppid pgrp session tty tpgid flags
	// minflt cminflt majflt cmajflt utime stime cutime cstime priority
	// nice threads itrealvalue starttime ...
	rest := " S 42 7 7 0 -1 4194560 100 0 0 0 250 75 3 4 20 0 9 0 123456 1000 200\n"
	for _, tc := range []struct{ name, comm string }{
		{"plain", "receiver"},
		// A command name may hold spaces and parentheses; only the last
		// ')' ends it.
		{"spaces and parens", "postgres: 15/main: checkpointer (x) "},
		{"beam", "beam.smp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := parsePidStat([]byte("1234 (" + tc.comm + ")" + rest))
			require.NoError(t, err)
			require.Equal(t, pidStat{Comm: tc.comm, PPID: 42, Ticks: 325, Start: 123456}, got)
		})
	}
	_, err := parsePidStat([]byte("1234 receiver S 1 2"))
	require.Error(t, err)
	_, err = parsePidStat([]byte("1234 (receiver) S 1 2 3"))
	require.ErrorContains(t, err, "fields")
}

func TestReadOwnProcess(t *testing.T) {
	t.Parallel()
	if err := checkProc(); err != nil {
		t.Skip(err)
	}
	st, err := readPidStat(selfPIDs()[0])
	require.NoError(t, err)
	require.NotZero(t, st.Start)
	rss, err := readRSS(selfPIDs()[0])
	require.NoError(t, err)
	require.Greater(t, rss, uint64(1000), "a Go test binary has more than 1 MB resident")
	m, err := readMachineCPU()
	require.NoError(t, err)
	require.Greater(t, m.Total, m.Busy)
}

func TestParseKB(t *testing.T) {
	t.Parallel()
	status := "Name:\tpostgres\nVmHWM:\t   30368 kB\nVmRSS:\t   29000 kB\nRssAnon:\t 2440 kB\n"
	kb, ok, err := parseKB([]byte(status), "VmRSS")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, uint64(29000), kb)
	_, ok, err = parseKB([]byte(status), "Pss")
	require.NoError(t, err)
	require.False(t, ok)
	_, _, err = parseKB([]byte("VmRSS:\tlots kB\n"), "VmRSS")
	require.Error(t, err)
}

func TestParseLSN(t *testing.T) {
	t.Parallel()
	got, err := parseLSN("16/B374D848")
	require.NoError(t, err)
	require.Equal(t, uint64(0x16)<<32|0xB374D848, got)
	a, _ := parseLSN("0/FFFFFFFF")
	b, _ := parseLSN("1/0")
	require.Equal(t, uint64(1), b-a, "the low half carries into the high half")
	_, err = parseLSN("B374D848")
	require.Error(t, err)
	_, err = parseLSN("1/xyz")
	require.Error(t, err)
}
