package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// Tracing (--tracing): the phases run in rounds that alternate tracing in
// the receiver and the dispatcher: off in odd rounds, on in even rounds,
// every span sampled (OTEL_TRACES_SAMPLER=always_on) and exported over
// OTLP/HTTP to a collector inside the benchmark, which answers each request
// and counts it and its bytes without decoding it: the benchmark shares the
// machine, and a decoding collector's CPU would slow what it measures (the
// integration test decodes them). The table compares each even round with
// the odd one before it.

// Tracing is what --tracing measured.
type Tracing struct {
	// Requests and Bytes count what the collector received.
	Requests int64 `json:"requests"`
	Bytes    int64 `json:"bytes"`
	// Compare holds, per phase, an even round (tracing) against the odd
	// round before it (none).
	Compare []RoundCompare `json:"compare"`
}

// benchCollector is the benchmark's OTLP/HTTP trace receiver.
type benchCollector struct {
	srv             *http.Server
	url             string
	requests, bytes atomic.Int64
}

func startCollector() (*benchCollector, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("tracing: collector: %w", err)
	}
	c := &benchCollector{url: "http://" + ln.Addr().String()}
	c.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(c.serve)}
	go func() { _ = c.srv.Serve(ln) }()
	return c, nil
}

func (c *benchCollector) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/traces" {
		http.Error(w, "OTLP/HTTP traces go to /v1/traces", http.StatusNotFound)
		return
	}
	n, _ := io.Copy(io.Discard, r.Body)
	c.requests.Add(1)
	c.bytes.Add(n)
	// An empty ExportTraceServiceResponse: nothing rejected.
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK)
}

func (c *benchCollector) close() { _ = c.srv.Close() }

// switchTracing restarts the receiver and the dispatcher with tracing as
// round n has it (see Tracing), when it differs from how they run.
func (r *runner) switchTracing(ctx context.Context, n int) error {
	want := n%2 == 0
	if r.collector == nil {
		c, err := startCollector()
		if err != nil {
			return err
		}
		r.collector = c
		r.res.Tracing = &Tracing{}
		r.procs.setEnv([]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT=" + c.url, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
			"OTEL_TRACES_SAMPLER=always_on",
		})
	}
	if want == r.tracingOn {
		return nil
	}
	r.logf("round %d: tracing %s", n, map[bool]string{true: "on (every span, exported over OTLP/HTTP to the benchmark's collector)", false: "off"}[want])
	return r.restartRelay(ctx, func() { r.tracingOn = want })
}

// compareTracing fills r.res.Tracing.
func (r *runner) compareTracing() {
	if r.res.Tracing == nil {
		return
	}
	r.res.Tracing.Requests = r.collector.requests.Load()
	r.res.Tracing.Bytes = r.collector.bytes.Load()
	r.res.Tracing.Compare = compareRounds(r.res.Phases, func(round int) (int, bool) { return round - 1, round%2 == 0 })
}

func printTracing(w io.Writer, x *Tracing) error {
	fmt.Fprintf(w, "\ntracing on, every span exported (even rounds), against off (the round before); ratio: on / off; the collector received %d requests, %.1f MB\n",
		x.Requests, float64(x.Bytes)/1e6)
	return printRoundCompare(w, "off", x.Compare)
}
