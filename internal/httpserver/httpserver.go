// Package httpserver runs an *http.Server until its context is done, then
// shuts it down gracefully, and serves the health endpoints every binary has.
package httpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Run serves srv on ln until ctx is done, then calls Shutdown with a fresh
// timeout context: the listener closes at once and in-flight requests get up
// to shutdownTimeout to finish. It returns nil after a clean shutdown.
func Run(ctx context.Context, ln net.Listener, srv *http.Server, shutdownTimeout time.Duration) error {
	if srv.ReadHeaderTimeout == 0 {
		srv.ReadHeaderTimeout = 10 * time.Second
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serving http on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutting down http server: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving http: %w", err)
	}
	return nil
}

// Check is one readiness dependency.
type Check struct {
	Name string
	Func func(ctx context.Context) error
}

// Health registers GET /healthz (the process is alive) and GET /readyz
// (every check passes, or is Degraded; 503 with the failures otherwise) on
// mux.
func Health(mux *http.ServeMux, checks ...Check) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		status, results := http.StatusOK, map[string]string{}
		for _, c := range checks {
			err := c.Func(ctx)
			var degraded Degraded
			if errors.As(err, &degraded) {
				results[c.Name] = string(degraded)
				continue
			}
			if err != nil {
				status = http.StatusServiceUnavailable
				results[c.Name] = err.Error()
				continue
			}
			results[c.Name] = "ok"
		}
		writeJSON(w, status, results)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the status is sent; nobody is left to tell
}
