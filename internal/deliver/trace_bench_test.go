package deliver_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/deliver"
	"github.com/hookrelay/hookrelay/internal/tracing"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"
)

// BenchmarkHandle is one delivery (fake store and publisher, a local
// destination answering 200) without tracing and with it, every span
// exported over OTLP/HTTP to a local collector that discards them: what
// tracing adds to a delivery's CPU and allocations.
func BenchmarkHandle(b *testing.B) {
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer dest.Close()
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer col.Close()
	for _, traced := range []bool{false, true} {
		name := map[bool]string{false: "off", true: "on"}[traced]
		b.Run(name, func(b *testing.B) {
			var tr trace.Tracer
			var exported func() // reports what the collector took, traced
			if traced {
				// The SDK and the exporter read the process's environment.
				b.Setenv("OTEL_TRACES_EXPORTER", "otlp")
				b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", col.URL)
				b.Setenv("OTEL_TRACES_SAMPLER", "always_on")
				reg := prometheus.NewRegistry()
				t, err := tracing.Start(context.Background(), tracing.Settings{Service: "bench", Registerer: reg, Logger: zerolog.Nop()})
				if err != nil {
					b.Fatal(err)
				}
				defer t.Stop(zerolog.Nop())
				tr = t.TracerOrNil()
				exported = func() {
					t.Stop(zerolog.Nop()) // flushes
					mfs, err := reg.Gather()
					if err != nil {
						b.Fatal(err)
					}
					for _, mf := range mfs {
						for _, m := range mf.GetMetric() {
							v := m.GetCounter().GetValue()
							if v > 0 {
								b.Logf("%s %v %v", mf.GetName(), m.GetLabel(), v)
							}
						}
					}
				}
			}
			h, err := deliver.New(deliver.Config{
				Routes: []deliver.Route{{Name: "billing", URL: dest.URL, Timeout: 10 * time.Second, MaxAttempts: 5,
					SigningKeys: [][]byte{[]byte("key")}}},
				Tiers: tiers, Store: benchStore{}, Publisher: newFakePublisher(),
				Metrics: deliver.NewMetrics(prometheus.NewRegistry(), []string{"billing"}),
				Logger:  zerolog.Nop(), Tracer: tr,
			})
			if err != nil {
				b.Fatal(err)
			}
			stop := make(chan struct{})
			msg := message()
			msg.TraceParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
			b.ReportAllocs()
			for b.Loop() {
				if err := h.Handle(context.Background(), "billing", msg, stop); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if exported != nil {
				exported()
			}
		})
	}
}

// benchStore claims every pair afresh and records every attempt: each
// Handle makes its POST.
type benchStore struct{}

func (benchStore) DeliveryClaim(context.Context, uuid.UUID, uuid.UUID, string, int, int64, time.Duration) (deliver.Lease, error) {
	return benchLease{}, nil
}

type benchLease struct{}

func (benchLease) State() webhook.DeliveryState                                  { return webhook.StatePending }
func (benchLease) Gen() int64                                                    { return 0 }
func (benchLease) Restart(context.Context) (int64, error)                        { return 0, nil }
func (benchLease) Release(context.Context) error                                 { return nil }
func (benchLease) Record(context.Context, *webhook.Attempt) (int64, bool, error) { return 0, true, nil }
