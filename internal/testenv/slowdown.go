package testenv

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"sync"
	"time"
)

// SlowdownEnv names the factor by which the suite's timing bounds are
// widened. scripts/test.sh sets it from the CPU it finds free before the
// run (3 on an idle machine: the suite runs its packages side by side under
// the race detector; 6 with one of two cores busy), so a slower day widens
// every bound together instead of one test at a time. Unset, it is 1: a
// test run alone on an idle machine.
const SlowdownEnv = "HOOKRELAY_TEST_SLOWDOWN"

var slowdown = sync.OnceValues(func() (float64, error) {
	v, ok := os.LookupEnv(SlowdownEnv)
	if !ok || v == "" {
		return 1, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 1 || f > 100 {
		return 0, fmt.Errorf("%s=%q: want a number from 1 to 100 (a factor, e.g. 3)", SlowdownEnv, v)
	}
	return f, nil
})

// Slowdown is the factor HOOKRELAY_TEST_SLOWDOWN sets (1 when unset). An
// invalid value panics: a bound silently left unscaled would fail later
// for a reason nobody sees.
func Slowdown() float64 {
	f, err := slowdown()
	if err != nil {
		panic(err)
	}
	return f
}

// Scaled is a timing bound of a test (how long a wait may take before the
// test fails) widened by Slowdown. Write d as what holds for the test run
// alone on an idle machine; a wait that checks a property the product
// promises ("within 2s") says so in its message, and the suite's report
// shows the factor it ran with.
func Scaled(d time.Duration) time.Duration {
	return time.Duration(float64(d) * Slowdown())
}
