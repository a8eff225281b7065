package apiclient_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The committed client is what oapi-codegen makes of the committed
// document: a drift between them fails here (and the CLI's build then
// catches what changed).
func TestClientIsCurrent(t *testing.T) {
	t.Parallel()
	cfg, err := os.ReadFile("oapi-codegen.yaml")
	require.NoError(t, err)
	out := filepath.Join(t.TempDir(), "client.gen.go")
	require.Contains(t, string(cfg), "\noutput: client.gen.go\n")
	tmpCfg := filepath.Join(t.TempDir(), "oapi-codegen.yaml")
	require.NoError(t, os.WriteFile(tmpCfg, []byte(strings.Replace(string(cfg), "\noutput: client.gen.go\n", "\noutput: "+out+"\n", 1)), 0o600))
	cmd := exec.Command("go", "tool", "oapi-codegen", "-config", tmpCfg, "../../api/openapi.json")
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Run(), "generating the client")
	want, err := os.ReadFile(out)
	require.NoError(t, err)
	have, err := os.ReadFile("client.gen.go")
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, have),
		"internal/apiclient/client.gen.go is not what api/openapi.json gives: run go generate ./internal/apiclient and commit the result")
}
