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
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Timeouts bound every connection of a server, so that a slow or silent
// client cannot hold it (or a shutdown) for ever.
type Timeouts struct {
	// Read bounds reading one request, headers and body, from its first
	// byte. A body that has not arrived by then fails to read, and the
	// connection closes.
	Read time.Duration
	// Write bounds a request from the end of its headers to the last byte
	// of the answer: reading the body, the handler's work and the write.
	Write time.Duration
	// Idle closes a keep-alive connection that sends no new request for
	// this long.
	Idle time.Duration
}

// DefaultTimeouts fill the zero fields of the Timeouts given to New, and
// those of a server given to Run: no server runs unbounded.
var DefaultTimeouts = Timeouts{Read: 10 * time.Second, Write: 30 * time.Second, Idle: time.Minute}

// New returns a server for handler with every timeout set from t; a zero
// field takes DefaultTimeouts' value.
func New(handler http.Handler, t Timeouts) *http.Server {
	srv := &http.Server{Handler: handler, ReadTimeout: t.Read, WriteTimeout: t.Write, IdleTimeout: t.Idle}
	bound(srv)
	return srv
}

// bound sets every timeout of srv that is still zero. The header timeout
// is the read timeout unless set: headers are part of the request.
func bound(srv *http.Server) {
	if srv.ReadTimeout == 0 {
		srv.ReadTimeout = DefaultTimeouts.Read
	}
	if srv.WriteTimeout == 0 {
		srv.WriteTimeout = DefaultTimeouts.Write
	}
	if srv.IdleTimeout == 0 {
		srv.IdleTimeout = DefaultTimeouts.Idle
	}
	if srv.ReadHeaderTimeout == 0 {
		srv.ReadHeaderTimeout = srv.ReadTimeout
	}
}

// Run serves srv on ln until ctx is done, then calls Shutdown with a fresh
// timeout context: the listener closes at once, idle connections close, and
// in-flight requests get up to shutdownTimeout to finish (a request stalled
// mid-body ends at srv's read timeout). Timeouts srv leaves at zero are set
// from DefaultTimeouts. Run closes ln in every case. It returns nil after a
// clean shutdown, and an error when serving fails or in-flight requests
// outlast shutdownTimeout.
func Run(ctx context.Context, ln net.Listener, srv *http.Server, shutdownTimeout time.Duration) error {
	bound(srv)
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
		return fmt.Errorf("shutting down http server on %s: %w", ln.Addr(), err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving http on %s: %w", ln.Addr(), err)
	}
	return nil
}

// Check is one readiness dependency.
type Check struct {
	Name string
	Func func(ctx context.Context) error
}

// StateError is a failed check that /readyz may describe with State, a
// short fixed word chosen by the check (such as "blocked"); Err is logged.
type StateError struct {
	State string
	Err   error
}

func (e *StateError) Error() string { return e.State + ": " + e.Err.Error() }
func (e *StateError) Unwrap() error { return e.Err }

// Unavailable is what /readyz says of a failed check that gives no
// StateError.
const Unavailable = "unavailable"

// checkTimeout bounds each readiness check; under the 5s a probe usually
// waits, so a slow dependency answers 503 instead of timing the probe out.
const checkTimeout = 3 * time.Second

// Health registers GET /healthz (the process is alive) and GET /readyz on
// mux. /readyz runs every check at once and answers 200 when all pass or
// are Degraded, 503 otherwise, with {"<name>": "ok" | "unavailable" |
// <StateError.State> | <Degraded.State>}. A
// check's error can name hosts, ports, users and databases, and these
// listeners are often public: it goes to logger at warn with the
// dependency's name, never into the answer.
func Health(mux *http.ServeMux, logger zerolog.Logger, checks ...Check) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		errs := make([]error, len(checks))
		var wg sync.WaitGroup
		for i, c := range checks {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(r.Context(), checkTimeout)
				defer cancel()
				errs[i] = c.Func(ctx)
			})
		}
		wg.Wait()
		status, results := http.StatusOK, map[string]string{}
		for i, c := range checks {
			err := errs[i]
			if err == nil {
				results[c.Name] = "ok"
				continue
			}
			var dg *Degraded
			if errors.As(err, &dg) && dg.State != "" {
				results[c.Name] = dg.State
				logger.Warn().Err(err).Str("dependency", c.Name).Msg("readiness check degraded")
				continue
			}
			status = http.StatusServiceUnavailable
			results[c.Name] = Unavailable
			var se *StateError
			if errors.As(err, &se) && se.State != "" {
				results[c.Name] = se.State
			}
			logger.Warn().Err(err).Str("dependency", c.Name).Msg("readiness check failed")
		}
		WriteJSON(w, status, results)
	})
}

// WriteJSON answers with status and v as JSON (one line, newline-terminated).
// The status is sent first, so an encoding or write error can reach nobody:
// it is dropped.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the status is sent; nobody is left to tell
}

// WriteError answers with status and {"error": msg}, the error body of
// every hookrelay HTTP API.
func WriteError(w http.ResponseWriter, status int, msg string) {
	WriteJSON(w, status, struct {
		Error string `json:"error"`
	}{msg})
}
