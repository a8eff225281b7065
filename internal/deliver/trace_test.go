package deliver_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/deliver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// A traced delivery continues the message's trace: its deliver span holds
// the claim and the record (events) and the POST (a client span whose
// context the destination gets as traceparent, unless the route keeps it
// out), and the
// attempt is recorded with the delivery's trace context.
func TestDeliveryContinuesTheMessagesTraceAndSendsTraceparentPerRoute(t *testing.T) {
	t.Parallel()
	posts := make(chan http.Header, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		posts <- r.Header.Clone()
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	mem := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(mem))
	// A handler of one route, with a store of its own (the fake store
	// holds one pair).
	handler := func(name string, quiet bool) (*deliver.Handler, *fakeStore) {
		store := newFakeStore()
		h, err := deliver.New(deliver.Config{
			Routes: []deliver.Route{{Name: name, URL: srv.URL + "/in?token=secret", Timeout: 10 * time.Second, MaxAttempts: 5,
				SigningKeys: [][]byte{[]byte("key")}, NoTraceparent: quiet}},
			Tiers: tiers, Store: store, Publisher: newFakePublisher(),
			Metrics: deliver.NewMetrics(prometheus.NewRegistry(), []string{name}),
			Logger:  zerolog.New(zerolog.NewTestWriter(t)), Tracer: tp.Tracer("test"),
		})
		require.NoError(t, err)
		return h, store
	}
	h, store := handler("billing", false)

	const traceID = "0af7651916cd43dd8448eb211c80319c"
	msg := message()
	msg.TraceParent = "00-" + traceID + "-b7ad6b7169203331-01"
	require.NoError(t, h.Handle(context.Background(), "billing", msg, make(chan struct{})))
	got := recv(t, posts, "the POST")
	parts := strings.Split(got.Get("traceparent"), "-")
	require.Len(t, parts, 4, "traceparent %q", got.Get("traceparent"))
	require.Equal(t, traceID, parts[1])

	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range mem.GetSpans().Snapshots() {
		require.Equal(t, traceID, s.SpanContext().TraceID().String(), s.Name())
		spans[s.Name()] = s
	}
	deliverSpan := spans["deliver billing"]
	require.NotNil(t, deliverSpan)
	require.Equal(t, "b7ad6b7169203331", deliverSpan.Parent().SpanID().String())
	require.Equal(t, deliverSpan.SpanContext().SpanID(), spans["POST"].Parent().SpanID())
	var events []string
	for _, e := range deliverSpan.Events() {
		events = append(events, e.Name)
	}
	require.Equal(t, []string{"claim", "record"}, events, "the claim and the record are the delivery span's events")
	require.Equal(t, spans["POST"].SpanContext().SpanID().String(), parts[2], "the destination's parent is the POST")
	attrs := map[string]string{}
	for _, kv := range spans["POST"].Attributes() {
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	require.Equal(t, srv.URL+"/in", attrs["url.full"], "no query in the span")
	require.Equal(t, "503", attrs["http.response.status_code"])
	_, _, _, recorded := store.snapshot()
	require.Len(t, recorded, 1)
	require.Equal(t, "00-"+traceID+"-"+deliverSpan.SpanContext().SpanID().String()+"-01", recorded[0].TraceParent,
		"the attempt (and its retry copy) carry the delivery's context")

	// A route that keeps it out: traced, but no traceparent sent.
	quiet, _ := handler("quiet", true)
	require.NoError(t, quiet.Handle(context.Background(), "quiet", message(), make(chan struct{})))
	got = recv(t, posts, "the quiet route's POST")
	require.Empty(t, got.Get("traceparent"))
	require.Empty(t, got.Get("tracestate"))
}
