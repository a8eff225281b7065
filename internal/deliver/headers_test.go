package deliver

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCapHeaders(t *testing.T) {
	t.Parallel()
	many := http.Header{}
	for i := range 200 {
		many.Set(fmt.Sprintf("X-Filler-%03d", i), strings.Repeat("v", 100))
	}
	many.Set("Retry-After", "30")
	many.Set("Content-Type", "application/json")
	for _, tc := range []struct {
		name       string
		in         http.Header
		wantMarker bool
		keep       map[string]string
	}{
		{"nil", nil, false, nil},
		{"small headers are kept whole", http.Header{"Content-Type": {"text/plain"}, "X-Request-Id": {"abc"}}, false,
			map[string]string{"Content-Type": "text/plain", "X-Request-Id": "abc"}},
		{"a long value is cut", http.Header{"Set-Cookie": {strings.Repeat("c", 5000)}, "Location": {"/x"}}, true,
			map[string]string{"Location": "/x"}},
		{"too many: the short ones stay", many, true, map[string]string{"Retry-After": "30", "Content-Type": "application/json"}},
		{"invalid UTF-8 is not produced by a cut", http.Header{"X-Long": {"x" + strings.Repeat("é", 400)}}, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := capHeaders(tc.in)
			require.LessOrEqual(t, headerSize(got), MaxStoredHeaderBytes)
			require.Equal(t, tc.wantMarker, got.Get(HeaderHeadersTruncated) != "", "marker: %v", got)
			for k, v := range tc.keep {
				require.Equal(t, v, got.Get(k), k)
			}
			for _, vs := range got {
				for _, v := range vs {
					require.True(t, strings.ToValidUTF8(v, "\uFFFD") == v, "valid UTF-8: %q", v)
				}
			}
			require.Equal(t, got, capHeaders(tc.in), "the same headers give the same result")
		})
	}
}
