package bench

import (
	"math"
	"slices"
	"time"
)

// Latency summarises a set of durations, in milliseconds.
type Latency struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_ms"`
	P90 float64 `json:"p90_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

// summarize returns the percentiles of ds (nearest rank: the smallest value
// with at least p% of the values at or below it, so every reported value
// was observed). It sorts ds.
func summarize(ds []time.Duration) *Latency {
	if len(ds) == 0 {
		return nil
	}
	slices.Sort(ds)
	return &Latency{
		N:   len(ds),
		P50: ms(percentile(ds, 50)),
		P90: ms(percentile(ds, 90)),
		P99: ms(percentile(ds, 99)),
		Max: ms(ds[len(ds)-1]),
	}
}

// percentile returns the nearest-rank p-th percentile of sorted, which
// must not be empty.
func percentile(sorted []time.Duration, p float64) time.Duration {
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// longestGap returns the longest time between two consecutive instants of
// ts (a stall in a stream of deliveries), and where it began. It sorts ts.
func longestGap(ts []time.Time) (gap time.Duration, at time.Time) {
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(ts); i++ {
		if d := ts[i].Sub(ts[i-1]); d > gap {
			gap, at = d, ts[i-1]
		}
	}
	return gap, at
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
