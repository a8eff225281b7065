package backoff

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestNextStaysWithinBounds(t *testing.T) {
	t.Parallel()
	b := Backoff{Min: 100 * time.Millisecond, Max: 2 * time.Second}
	for i := range 100 {
		d := b.Next()
		require.GreaterOrEqual(t, d, b.Min, "attempt %d", i)
		require.LessOrEqual(t, d, b.Max, "attempt %d", i)
		if i < 3 {
			require.LessOrEqual(t, d, b.Min<<i, "attempt %d grows from Min", i)
		}
	}
	b.Reset()
	require.Equal(t, b.Min, b.Next(), "first delay after Reset is Min")
}
