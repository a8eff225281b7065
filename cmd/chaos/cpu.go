package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// fullRate is the suite's load on a machine whose CPU is all free: on
// two cores, the relay (two receivers, two dispatchers, a three-node
// cluster, Postgres) keeps pace with it with room to catch up after each
// fault.
const fullRate = 100

// minRate is the least load the suite sizes itself to: below it the
// faults would find too little in flight to be worth counting.
const minRate = 20

// sizeRate is the load for a machine with free of its CPU unused (0..1):
// fullRate scaled by it, to the nearest 10, at least minRate. A load the
// machine cannot keep pace with never recovers from any fault (the
// backlog of each adds to the next), so on a day when something else
// takes half the machine, the suite sends half as much.
func sizeRate(free float64) int {
	r := int(math.Round(fullRate*free/10)) * 10
	return min(fullRate, max(minRate, r))
}

// cpuTimes is the first line of /proc/stat: all CPUs' time, and of it the
// idle time (idle and iowait), in clock ticks.
type cpuTimes struct{ total, idle uint64 }

func parseCPUTimes(r io.Reader) (cpuTimes, error) {
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil && line == "" {
		return cpuTimes{}, fmt.Errorf("reading /proc/stat: %w", err)
	}
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return cpuTimes{}, fmt.Errorf("/proc/stat: unexpected first line %q", strings.TrimSpace(line))
	}
	var t cpuTimes
	for i, s := range f[1:] {
		if i >= 8 { // guest and guest_nice are inside user and nice already
			break
		}
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return cpuTimes{}, fmt.Errorf("/proc/stat: field %d of %q: %w", i+1, strings.TrimSpace(line), err)
		}
		t.total += v
		if i == 3 || i == 4 { // idle, iowait
			t.idle += v
		}
	}
	return t, nil
}

func readCPUTimes() (cpuTimes, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return cpuTimes{}, err
	}
	defer f.Close()
	return parseCPUTimes(f)
}

// freeCPU measures the share of the machine's CPU left idle over d.
func freeCPU(ctx context.Context, d time.Duration) (float64, error) {
	a, err := readCPUTimes()
	if err != nil {
		return 0, err
	}
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(d): // a measurement over an interval, not synchronisation
	}
	b, err := readCPUTimes()
	if err != nil {
		return 0, err
	}
	if b.total <= a.total {
		return 0, fmt.Errorf("/proc/stat did not advance over %s", d)
	}
	return float64(b.idle-a.idle) / float64(b.total-a.total), nil
}
