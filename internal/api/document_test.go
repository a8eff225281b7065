package api_test

import (
	"bytes"
	"flag"
	"net/http"
	"os"
	"slices"
	"testing"

	"github.com/danielgtaylor/huma/v2"
	"github.com/hookrelay/hookrelay/internal/api"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite api/openapi.json from the handlers")

// documentPath is the committed document, the API's contract.
const documentPath = "../../api/openapi.json"

// recordingMux records every pattern the API registers: an http.ServeMux
// cannot list its own.
type recordingMux struct {
	*http.ServeMux
	patterns []string
}

func (m *recordingMux) HandleFunc(p string, h func(http.ResponseWriter, *http.Request)) {
	m.patterns = append(m.patterns, p)
	m.ServeMux.HandleFunc(p, h)
}

func newAPI(t *testing.T, svc *ops.Service) (huma.API, *recordingMux) {
	t.Helper()
	mux := &recordingMux{ServeMux: http.NewServeMux()}
	return api.New(mux, svc, api.Options{}, zerolog.Nop()), mux
}

// operations lists the document's operations as "METHOD /path".
func operations(doc *huma.OpenAPI) map[string]*huma.Operation {
	out := map[string]*huma.Operation{}
	for p, item := range doc.Paths {
		for m, o := range map[string]*huma.Operation{
			"GET": item.Get, "PUT": item.Put, "POST": item.Post, "DELETE": item.Delete, "PATCH": item.Patch,
		} {
			if o != nil {
				out[m+" "+p] = o
			}
		}
	}
	return out
}

// TestDocumentIsCurrent fails when the handlers' document differs from
// the committed one: a change of the API is a change of api/openapi.json,
// reviewed as such (go test ./internal/api -run TestDocumentIsCurrent
// -update rewrites it).
func TestDocumentIsCurrent(t *testing.T) {
	a, _ := newAPI(t, &ops.Service{})
	doc, err := api.Document(a)
	require.NoError(t, err)
	again, err := api.Document(a)
	require.NoError(t, err)
	require.Equal(t, string(doc), string(again), "the document is not deterministic")
	if *update {
		require.NoError(t, os.WriteFile(documentPath, doc, 0o644))
	}
	committed, err := os.ReadFile(documentPath)
	require.NoError(t, err)
	if !bytes.Equal(doc, committed) {
		t.Fatalf("api/openapi.json is not what the handlers describe: run go test ./internal/api -run TestDocumentIsCurrent -update and review the diff")
	}
}

// TestDocumentAndRouterAgree fails when an operation is in the document
// and not routed, or routed and not in the document, and when one needs
// no role or another than ops gives its action.
func TestDocumentAndRouterAgree(t *testing.T) {
	a, mux := newAPI(t, &ops.Service{})
	var documented []string
	for k, o := range operations(a.OpenAPI()) {
		documented = append(documented, k)
		require.NotEmpty(t, api.RequiredRole(o), "%s names no role", k)
		require.Contains(t, ops.Roles, api.RequiredRole(o), "%s", k)
		require.Equal(t, ops.RoleOf(api.ActionOf(o)), api.RequiredRole(o), "%s documents the role ops gives its action", k)
	}
	slices.Sort(documented)
	routed := slices.Clone(mux.patterns)
	slices.Sort(routed)
	require.Equal(t, documented, routed)
	require.GreaterOrEqual(t, len(routed), 20)
}
