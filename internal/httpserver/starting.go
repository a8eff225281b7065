package httpserver

import (
	"context"
	"maps"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Early serves a listener from a process's first moment, while it still
// connects to its dependencies, and then the process's own handler:
//
//   - GET /healthz answers 200 at once (the process is alive: an
//     orchestrator's liveness probe must not restart it for waiting);
//   - GET /readyz answers 503 with each dependency's state, as the startup
//     sets it ({"postgres": "ok", "rabbitmq": "waiting"});
//   - anything else answers 503 {"error": "starting"}, or what extra
//     serves (the metrics, say).
//
// Ready hands the listener over to the process's handler, on the same
// server: nothing is closed or opened again.
type Early struct {
	handler atomic.Pointer[http.Handler]
	srv     *http.Server
	stop    context.CancelFunc
	// finished is closed when the server stopped; err is Run's answer.
	finished chan struct{}
	err      error

	mu     sync.Mutex
	states map[string]string
}

// StartEarly serves ln at once, with the timeouts t, until Stop (or the
// process's handler, after Ready, until Stop). extra, when set, serves the
// paths the starting mux does not (e.g. /metrics).
func StartEarly(ln net.Listener, t Timeouts, shutdownTimeout time.Duration, extra map[string]http.Handler) *Early {
	e := &Early{finished: make(chan struct{}), states: map[string]string{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		WriteJSON(w, http.StatusServiceUnavailable, e.snapshot())
	})
	for pattern, h := range extra {
		mux.Handle(pattern, h)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		WriteError(w, http.StatusServiceUnavailable, "starting")
	})
	var h http.Handler = mux
	e.handler.Store(&h)
	e.srv = New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		(*e.handler.Load()).ServeHTTP(w, r)
	}), t)
	ctx, cancel := context.WithCancel(context.Background())
	e.stop = cancel
	go func() {
		e.err = Run(ctx, ln, e.srv, shutdownTimeout)
		close(e.finished)
	}()
	return e
}

// OnShutdown calls f when the server starts shutting down: a handler that
// streams (and so never becomes idle) ends then, instead of holding the
// shutdown to its timeout.
func (e *Early) OnShutdown(f func()) { e.srv.RegisterOnShutdown(f) }

// Set records dependency's state for /readyz while starting.
func (e *Early) Set(dependency, state string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.states[dependency] = state
}

func (e *Early) snapshot() map[string]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := maps.Clone(e.states)
	out["status"] = "starting"
	return out
}

// Ready serves h from now on.
func (e *Early) Ready(h http.Handler) { e.handler.Store(&h) }

// Stop shuts the server down as Run does (in-flight requests get the
// shutdown timeout) and returns Run's answer. Calling it again returns the
// same answer.
func (e *Early) Stop() error {
	e.stop()
	<-e.finished
	return e.err
}

// Done is closed when the server has stopped: after Stop, or on its own
// when serving failed (Stop then returns why).
func (e *Early) Done() <-chan struct{} { return e.finished }
