package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/stretchr/testify/require"
)

// Issue 38, first-time user 4: the console is turned on from the
// environment, as README's "The web console" shows (no edit of the
// tracked config.yaml), and the receiver logs the console's URL.
func TestConsoleFromTheEnvironmentLogsItsURL(t *testing.T) {
	t.Parallel()
	s := newShell(t)
	dbURL := storetest.NewDatabase(t)
	amqptest.Dial(t)
	path := s.writeConfig("config.yaml", repoConfig(t, dbURL, amqptest.Prefix(t)))
	deleteTopologyOf(t, path)
	for k, v := range secretsEnv {
		s.env[k] = v
	}
	raw, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	require.Contains(t, strings.Join(strings.Fields(string(raw)), " "), "`HOOKRELAY_ADMIN_LISTEN=127.0.0.1:8082 HOOKRELAY_ADMIN_TOKEN=$(openssl rand -hex 24) scripts/run.sh`",
		"README's way to turn the console on")
	addr := freeAddr(t)
	const token = "console-token-0123456789abcdef"
	s.env["HOOKRELAY_ADMIN_LISTEN"], s.env["HOOKRELAY_ADMIN_TOKEN"] = addr, token
	r := s.start("receiver")
	line := r.waitLine(t, "console", 30*time.Second)
	require.Contains(t, line, `"console":"http://`+addr+`/"`, line)
	require.Contains(t, line, `"api":"http://`+addr+`/api/v1"`, line)

	resp, err := http.Get("http://" + addr + "/signin")
	require.NoError(t, err)
	page, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(page), "<form")
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/api/v1/routes", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	require.True(t, strings.Contains(string(body), `"billing"`), "%s", body)
}
