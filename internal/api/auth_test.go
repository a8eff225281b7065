package api

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// An address is limited after its failures of a minute, until that
// minute ends; other addresses are not.
func TestFailLimiterWindows(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	l := NewFailLimiter(3)
	l.now = func() time.Time { return now }
	for range 3 {
		require.Zero(t, l.blocked("10.0.0.1"))
		l.fail("10.0.0.1")
	}
	require.Equal(t, time.Minute, l.blocked("10.0.0.1"), "the third failure used the minute up")
	require.Zero(t, l.blocked("10.0.0.2"), "per address")
	now = now.Add(45 * time.Second)
	require.Equal(t, 15*time.Second, l.blocked("10.0.0.1"))
	now = now.Add(15 * time.Second)
	require.Zero(t, l.blocked("10.0.0.1"), "a new minute")
	l.fail("10.0.0.1")
	require.Zero(t, l.blocked("10.0.0.1"), "one failure of the new minute")
}

func TestClientAddr(t *testing.T) {
	require.Equal(t, "127.0.0.1", clientAddr("127.0.0.1:5123"))
	require.Equal(t, "::1", clientAddr("[::1]:80"))
	require.Equal(t, "weird", clientAddr("weird"))
	require.Equal(t, "2001:db8:1:2::/64", clientAddr("[2001:db8:1:2:aaaa::1]:443"), "an IPv6 host by its /64")
	require.Equal(t, clientAddr("[2001:db8:1:2::5]:1"), clientAddr("[2001:db8:1:2:ffff::9]:2"))
}

func TestBearer(t *testing.T) {
	for header, want := range map[string]string{"Bearer abc": "abc", "bearer abc": "abc", "BEARER  abc ": "abc"} {
		got, ok := bearer(header)
		require.True(t, ok, header)
		require.Equal(t, want, got, header)
	}
	for _, header := range []string{"", "Basic abc", "Bearerabc"} {
		_, ok := bearer(header)
		require.False(t, ok, header)
	}
}
