package ingest

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/extract"
	"github.com/hookrelay/hookrelay/internal/signature"
	"github.com/hookrelay/hookrelay/internal/tracing"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// A source that trusts its sender's traceparent continues the sender's
// trace; any other starts the event's own trace, linked to the sender's.
// Either way the event is stored with its request span's context, and
// the request's spans are verification and storage, children of it.
func TestTheSendersTraceIsContinuedOnlyForASourceThatTrustsIt(t *testing.T) {
	mem := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(mem))
	x, err := extract.New(extract.Config{IdempotencyPaths: []string{"id"}, EventTypePaths: []string{"type"}})
	require.NoError(t, err)
	v, err := signature.NewHMAC(signature.HMACConfig{Secrets: []string{secret}, Header: "X-Sig", Prefix: "sha256="})
	require.NoError(t, err)
	store := &fakeStore{byKey: map[string]uuid.UUID{}}
	h, err := New(Config{
		Sources: []Source{
			{Name: "trusted", Verifier: v, Extractor: x, TrustTraceparent: true},
			{Name: "outside", Verifier: v, Extractor: x},
		},
		Store: store, MaxBodyBytes: 1024, Metrics: NewMetrics(prometheus.NewRegistry()),
		Tracing: tracing.With(tp),
	})
	require.NoError(t, err)
	mux := http.NewServeMux()
	h.Register(mux)

	const senderTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	send := func(source, id string) {
		body := []byte(`{"id":"` + id + `","type":"invoice.paid"}`)
		req := httptest.NewRequest(http.MethodPost, "/webhooks/"+source, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Sig", sign(body))
		req.Header.Set("traceparent", "00-"+senderTrace+"-00f067aa0ba902b7-01")
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	}
	send("trusted", "a")
	send("outside", "b")
	events := store.stored()
	require.Len(t, events, 2)
	require.Equal(t, senderTrace, tracing.TraceID(events[0].TraceParent), "trusted: the sender's trace")
	own := tracing.TraceID(events[1].TraceParent)
	require.NotEmpty(t, own)
	require.NotEqual(t, senderTrace, own, "outside: a trace of its own")

	byName := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range mem.GetSpans().Snapshots() {
		byName[s.Name()] = append(byName[s.Name()], s)
	}
	servers := byName["POST /webhooks/{source}"]
	require.Len(t, servers, 2)
	for _, s := range servers {
		switch s.SpanContext().TraceID().String() {
		case senderTrace:
			require.Equal(t, "00f067aa0ba902b7", s.Parent().SpanID().String())
		case own:
			require.False(t, s.Parent().IsValid(), "a root")
			require.Len(t, s.Links(), 1)
			require.Equal(t, senderTrace, s.Links()[0].SpanContext.TraceID().String(), "linked to the sender's")
		default:
			t.Fatalf("server span of trace %s", s.SpanContext().TraceID())
		}
	}
	for _, name := range []string{"verify signature", "store event"} {
		require.Len(t, byName[name], 2, name)
		for _, s := range byName[name] {
			require.True(t, s.Parent().IsValid(), name)
		}
	}
	// The event's stored context is its request span's.
	for i, ev := range events {
		found := false
		for _, s := range servers {
			if tracing.Of(trace.ContextWithSpanContext(context.Background(), s.SpanContext())).Parent == ev.TraceParent {
				found = true
			}
		}
		require.True(t, found, "event %d stored with its request span's context", i)
	}
}
