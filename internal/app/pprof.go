package app

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"net/http/pprof"
	"strings"

	"github.com/hookrelay/hookrelay/internal/httpserver"
)

// withPprof serves net/http/pprof's handlers under /debug/pprof/ in front of
// next (everything else). A non-empty token is required as a bearer token
// for the pprof paths, as the admin API requires it for its own. Only for
// private listeners: the profiles show the process's internals, and a CPU
// profile costs CPU while it runs.
func withPprof(next http.Handler, token string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	var h http.Handler = mux
	if token != "" {
		want := sha256.Sum256([]byte(token))
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			sum := sha256.Sum256([]byte(got))
			if !ok || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="hookrelay"`)
				httpserver.WriteError(w, http.StatusUnauthorized, "missing or invalid bearer token")
				return
			}
			mux.ServeHTTP(w, r)
		})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/debug/pprof" || strings.HasPrefix(r.URL.Path, "/debug/pprof/") {
			h.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}
