package app_test

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/config"
)

// get returns the status and body of a GET with an optional bearer token.
func pprofGet(t *testing.T, url, token string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, body
}

// Issue 11 item 5: debug.pprof is off by default (404 on every listener);
// when set, the receiver's admin listener (behind admin.token) and the
// dispatcher's health and metrics listener serve /debug/pprof/, and the
// receiver's public webhook listener never does.
func TestPprofSwitch(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{false, true} {
		name := map[bool]string{false: "default off", true: "on"}[on]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.cfg.Debug.Pprof = on
			h.cfg.Admin = config.Admin{Token: testAdminToken, ReadTimeout: 10 * time.Second, WriteTimeout: time.Minute, IdleTimeout: time.Minute}
			aln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			admin := "http://" + aln.Addr().String()
			h.start(app.ReceiverOptions{AdminListener: aln})
			h.startDispatcher(app.DispatcherOptions{})

			code, _ := pprofGet(t, h.base+"/debug/pprof/", "")
			require.Equal(t, http.StatusNotFound, code, "never on the public webhook listener")
			code, _ = pprofGet(t, h.base+"/debug/pprof/", testAdminToken)
			require.Equal(t, http.StatusNotFound, code, "never on the public webhook listener, token or not")

			// The admin API itself still answers either way.
			code, _ = pprofGet(t, admin+"/api/v1/events?limit=1", testAdminToken)
			require.Equal(t, http.StatusOK, code)

			if !on {
				code, _ = pprofGet(t, admin+"/debug/pprof/", testAdminToken)
				require.Equal(t, http.StatusNotFound, code)
				code, _ = pprofGet(t, h.dispatcherBase+"/debug/pprof/", "")
				require.Equal(t, http.StatusNotFound, code)
				return
			}
			code, _ = pprofGet(t, admin+"/debug/pprof/", "")
			require.Equal(t, http.StatusUnauthorized, code, "the admin listener's profiles need the admin token")
			code, _ = pprofGet(t, admin+"/debug/pprof/", "wrong-token-wrong-token")
			require.Equal(t, http.StatusUnauthorized, code)
			code, body := pprofGet(t, admin+"/debug/pprof/", testAdminToken)
			require.Equal(t, http.StatusOK, code)
			require.Contains(t, string(body), "goroutine")
			code, body = pprofGet(t, admin+"/debug/pprof/profile?seconds=1", testAdminToken)
			require.Equal(t, http.StatusOK, code)
			require.True(t, bytes.HasPrefix(body, []byte{0x1f, 0x8b}), "a gzipped CPU profile")

			code, body = pprofGet(t, h.dispatcherBase+"/debug/pprof/", "")
			require.Equal(t, http.StatusOK, code)
			require.Contains(t, string(body), "goroutine")
			code, body = pprofGet(t, h.dispatcherBase+"/debug/pprof/profile?seconds=1", "")
			require.Equal(t, http.StatusOK, code)
			require.True(t, bytes.HasPrefix(body, []byte{0x1f, 0x8b}), "a gzipped CPU profile")
			code, _ = pprofGet(t, h.dispatcherBase+"/healthz", "")
			require.Equal(t, http.StatusOK, code, "health still served")
		})
	}
}
