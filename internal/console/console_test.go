package console

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPagesParse(t *testing.T) {
	pages, err := parsePages()
	require.NoError(t, err)
	require.Len(t, pages, len(pageNames))
}

func TestAgo(t *testing.T) {
	now := time.Now()
	require.Equal(t, "4 min ago", ago(now.Add(-4*time.Minute-time.Second)))
	require.Equal(t, "3 h ago", ago(now.Add(-3*time.Hour-time.Second)))
	require.Equal(t, "5 days ago", ago(now.Add(-5*24*time.Hour-time.Second)))
}

// Every answer carries the policy that allows no script and no framing.
func TestSecurityHeaders(t *testing.T) {
	rec := httptest.NewRecorder()
	securityHeaders(http.NotFoundHandler()).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	require.Equal(t, CSP, rec.Header().Get("Content-Security-Policy"))
	require.Contains(t, CSP, "default-src 'none'")
	require.NotContains(t, CSP, "script-src")
	require.Equal(t, "nosniff", rec.Header().Get("X-Content-Type-Options"))
}
