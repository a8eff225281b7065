package app_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ingest"
	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// BenchmarkIngest compares the whole ingest path (HMAC verification, JSON
// extraction, event + outbox + deliveries in one transaction, JSON answer)
// with its floor, the bare event + outbox transaction, on the same database
// in the same run. Compare the two ns/op as a ratio; absolute numbers depend
// on the machine.
//
//	go test -run '^$' -bench Ingest -benchtime 3s ./internal/app/
func BenchmarkIngest(b *testing.B) {
	db, _ := storetest.Open(b)
	cfg := &config.Config{
		Sources: []config.Source{{
			Name:        "acme",
			Verify:      config.Verify{Scheme: "hmac", Secrets: []string{acmeSecret}, Header: "X-Acme-Signature", Prefix: "sha256="},
			Idempotency: config.Idempotency{JSONPath: "id"},
			EventType:   config.EventType{JSONPath: "type"},
		}},
		Routes: []config.Route{{Name: "billing", Bindings: []string{"acme.invoice.*"}}},
	}
	sources, err := app.Sources(cfg, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	var n atomic.Int64
	body := func() []byte {
		return []byte(fmt.Sprintf(`{"id":"evt_%d_%d","type":"invoice.paid","data":{"amount":4200,"currency":"brl"}}`, time.Now().UnixNano(), n.Add(1)))
	}

	b.Run("baseline=event+outbox tx", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				raw := body()
				ev := &webhook.Event{ID: uuid.Must(uuid.NewV7()), Source: "acme", IdempotencyKey: string(raw[7:40]),
					EventType: "invoice.paid", Body: raw, ReceivedAt: time.Now()}
				if _, _, err := db.EventInsert(context.Background(), ev, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("ingest=POST /webhooks/acme", func(b *testing.B) {
		h, err := ingest.New(ingest.Config{
			Sources: sources, Store: app.IngestStore(db), MaxBodyBytes: 1 << 20, RouteFunc: setup.RoutesFor(cfg),
			Metrics: ingest.NewMetrics(prometheus.NewRegistry()), Logger: zerolog.Nop(),
		})
		if err != nil {
			b.Fatal(err)
		}
		mux := http.NewServeMux()
		h.Register(mux)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				raw := body()
				req := httptest.NewRequest(http.MethodPost, "/webhooks/acme", bytes.NewReader(raw))
				req.Header.Set("X-Acme-Signature", sign(acmeSecret, raw))
				rec := httptest.NewRecorder()
				mux.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("status %d: %s", rec.Code, rec.Body)
				}
			}
		})
	})
}
