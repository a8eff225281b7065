package amqp

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTierDelayInvertsRetry(t *testing.T) {
	n := Names{Prefix: "hr"}
	for _, d := range []time.Duration{250 * time.Millisecond, 10 * time.Second, time.Minute, 5 * time.Minute, 2 * time.Hour} {
		got, ok := n.TierDelay(n.Retry(d))
		require.True(t, ok, d)
		require.Equal(t, d, got)
	}
	for _, name := range []string{"hr.route.billing", "hr.retry.", "hr.retry.soon", "other.retry.10s", "hr.retry.60s"} {
		_, ok := n.TierDelay(name)
		require.False(t, ok, name)
	}
}
