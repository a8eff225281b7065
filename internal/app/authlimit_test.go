package app_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Issue 38, security 5: behind the TLS proxy the docs recommend every
// operator shares one client address, so the limit of failed
// authentications must slow guessing only: a correct token always
// passes, however many wrong ones the address sent this minute, in
// /api/v1, the first API and the console's sign-in alike; a wrong one is
// answered 401, then 429 with Retry-After once the address used its
// minute up, everywhere on the admin listener (one count).
func TestFailedAuthenticationsNeverLockOutAValidToken(t *testing.T) {
	t.Parallel()
	h := newAPIHarness(t, 3)
	c := h.api
	for i := range 3 {
		require.Equal(t, http.StatusUnauthorized, c.call("list-routes", http.MethodGet, "/api/v1/routes", "wrong", nil).Status, "failure %d", i+1)
	}
	a := c.call("list-routes", http.MethodGet, "/api/v1/routes", "wrong", nil)
	require.Equal(t, http.StatusTooManyRequests, a.Status, "the address used its minute up: %s", a.Body)
	require.NotEmpty(t, a.Header.Get("Retry-After"))
	require.Equal(t, http.StatusTooManyRequests, c.call("list-routes", http.MethodGet, "/api/v1/routes", "", nil).Status, "no token is a wrong one")

	// The right tokens pass, from the same address, in the same minute.
	for role, tok := range h.tokens {
		require.Equal(t, http.StatusOK, c.call("list-routes", http.MethodGet, "/api/v1/routes", tok, nil).Status, "%s's token passes", role)
	}
	require.Equal(t, http.StatusOK, c.call("list-routes", http.MethodGet, "/api/v1/routes", adminToken, nil).Status, "admin.token passes")

	// The console: the right token signs in, a wrong one is limited.
	signIn := func(token string) int {
		jar, err := cookiejar.New(nil)
		require.NoError(t, err)
		client := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := client.PostForm(c.base+"/signin", url.Values{"token": {token}})
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			require.True(t, strings.Contains(string(body), "Too many failed sign-ins"), "%s", body)
		}
		return resp.StatusCode
	}
	require.Equal(t, http.StatusSeeOther, signIn(h.tokens["viewer"]), "a named token signs in")
	require.Equal(t, http.StatusSeeOther, signIn(adminToken), "admin.token signs in")
	require.Equal(t, http.StatusTooManyRequests, signIn("wrong"))
}
