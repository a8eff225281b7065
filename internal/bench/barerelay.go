package bench

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
)

// bareEventInsert is the bare relay's one durable write per event: the
// event's key and row in one statement, with synchronous commit (the
// server's default).
const bareEventInsert = `
WITH k AS (
	INSERT INTO event_keys (source, idempotency_key, event_id) VALUES ($2, $3, $1)
	ON CONFLICT DO NOTHING
	RETURNING event_id
)
INSERT INTO events (id, source, idempotency_key, event_type, content_type, body, received_at, keyed)
SELECT $1, $2, $3, $4, $5, $6, now(), true FROM k`

// runBareRelay is the receiving half of the end-to-end reference: an HTTP
// server that checks the HMAC of the raw body as the relay's source does
// (constant time), stores the event with one INSERT, publishes it as a
// persistent message to a quorum queue and waits for the broker's
// confirm, then answers 200 {"id": ...}. The bare forwarder consuming
// that queue is the other half. No outbox, no routes, no dedupe beyond
// the event_keys table's key: the floor of "a 200 means it is committed in
// Postgres and in the broker". It prints "ready <addr>" once it listens.
func runBareRelay(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("bare-relay", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	dbURL := fs.String("database-url", "", "migrated hookrelay database")
	maxConns := fs.Int("max-conns", 10, "Postgres pool size")
	amqpURL := fs.String("amqp-url", "", "broker")
	queue := fs.String("queue", "", "quorum queue to publish to (default exchange)")
	secret := fs.String("secret", "", "HMAC-SHA256 key of the source")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *secret == "" || *queue == "" {
		return fmt.Errorf("--secret and --queue are required")
	}
	pool, err := barePool(ctx, *dbURL, *maxConns, "hookrelay-bench-bare-relay")
	if err != nil {
		return err
	}
	defer pool.Close()
	conn, err := dialAMQP(*amqpURL, "hookrelay-bench-bare-relay")
	if err != nil {
		return err
	}
	defer conn.Close()
	// One confirm-mode channel, shared: amqp091-go's publishes are safe
	// from several goroutines, and each gets its own deferred confirm.
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("opening channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("enabling confirms: %w", err)
	}
	key := []byte(*secret)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /webhooks/{source}", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, `{"error":"reading body"}`, http.StatusBadRequest)
			return
		}
		if !validHMAC(key, r.Header.Get(benchSigHeader), body) {
			http.Error(w, `{"error":"signature"}`, http.StatusUnauthorized)
			return
		}
		id := uuid.Must(uuid.NewV7())
		source := r.PathValue("source")
		cctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
		defer cancel()
		if _, err := pool.Exec(cctx, bareEventInsert, id, source, id.String(), benchEventType, "application/json", body); err != nil {
			http.Error(w, `{"error":"storage unavailable"}`, http.StatusServiceUnavailable)
			return
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(cctx, "", *queue, true, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent, ContentType: "application/json", MessageId: id.String(), Body: body,
		})
		if err == nil {
			var ok bool
			if ok, err = dc.WaitContext(cctx); err == nil && !ok {
				err = fmt.Errorf("nacked")
			}
		}
		if err != nil {
			http.Error(w, `{"error":"broker unavailable"}`, http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "duplicate": false}) // committed and confirmed; a failed write is the client's
	})
	return serve(ctx, *listen, mux, 0, stdout)
}

// validHMAC checks header ("sha256=<hex>") against the HMAC-SHA256 of
// body, in constant time.
func validHMAC(key []byte, header string, body []byte) bool {
	sig, ok := strings.CutPrefix(header, benchSigPrefix)
	if !ok {
		return false
	}
	got, err := hex.DecodeString(sig)
	if err != nil {
		return false
	}
	m := hmac.New(sha256.New, key)
	m.Write(body)
	return hmac.Equal(got, m.Sum(nil))
}
