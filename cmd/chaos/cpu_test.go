package main

import (
	"strings"
	"testing"
)

func TestParseCPUTimes(t *testing.T) {
	t.Parallel()
	got, err := parseCPUTimes(strings.NewReader("cpu  100 5 50 800 40 3 2 0 7 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n"))
	if err != nil {
		t.Fatal(err)
	}
	// user+nice+system+idle+iowait+irq+softirq+steal; guest is in user.
	if want := (cpuTimes{total: 1000, idle: 840}); got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for _, bad := range []string{"", "intr 1 2 3\n", "cpu 1 2 x 4 5 6\n"} {
		if _, err := parseCPUTimes(strings.NewReader(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// On a day when something else takes half the machine, the suite sends
// half its load: a load the relay cannot keep pace with recovers from no
// fault.
func TestSizeRate(t *testing.T) {
	t.Parallel()
	for free, want := range map[float64]int{1: 100, 0.97: 100, 0.92: 90, 0.52: 50, 0.46: 50, 0.44: 40, 0.1: 20, 0: 20} {
		if got := sizeRate(free); got != want {
			t.Errorf("sizeRate(%v) = %d, want %d", free, got, want)
		}
	}
}
