package ops

import (
	"strconv"
	"time"

	"github.com/hookrelay/hookrelay/internal/config"
)

// The words the CLI and the console print for the same value, so that
// both say the same (DESIGN invariant 12); the API answers the value
// itself, absent where these print NoValue.

// NoValue is what a value that is not there reads as: the HTTP status
// of an attempt or a dead letter that got no answer (a refused
// connection, a timeout), the age of an undelivered backlog there is not.
const NoValue = "-"

// StatusText is an HTTP status, NoValue when none arrived.
func StatusText[T ~int | ~int64](status *T) string {
	if status == nil {
		return NoValue
	}
	return strconv.FormatInt(int64(*status), 10)
}

// DurationText is an attempt's duration, given in milliseconds, with
// its unit: 0s, 12ms, 1.5s, 10s.
func DurationText(ms int) string {
	return config.FormatDuration(time.Duration(ms) * time.Millisecond)
}

// AgeText is an age given in seconds, to the second (2h59m12s), NoValue
// when there is none.
func AgeText(seconds *float64) string {
	if seconds == nil {
		return NoValue
	}
	return time.Duration(*seconds * float64(time.Second)).Round(time.Second).String()
}
