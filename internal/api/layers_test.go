package api_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The CLI and the admin API are thin layers over ops.Service: neither
// imports the store (nor the broker's package) in its own code, so every
// operator action goes through the one service. Tests may reach further
// to set the stage.
func TestLayersReachPostgresOnlyThroughOps(t *testing.T) {
	for _, dir := range []string{".", "../../cmd/hookrelay"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		require.NoError(t, err)
		require.NotEmpty(t, files)
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			require.NoError(t, err)
			parsed, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
			require.NoError(t, err)
			for _, imp := range parsed.Imports {
				path, err := strconv.Unquote(imp.Path.Value)
				require.NoError(t, err)
				require.NotEqual(t, "github.com/hookrelay/hookrelay/internal/store", path, "%s imports the store: go through ops", f)
			}
		}
	}
}
