package bench

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
)

// bareInsert is the whole of the bare ingest server's work per request: the
// event's key, the event row and its outbox row in one statement (one round
// trip, one implicit transaction), into the same tables, indexes and
// trigger as hookrelay's.
const bareInsert = `
WITH k AS (
	INSERT INTO event_keys (source, idempotency_key, event_id) VALUES ($2, $3, $1)
	ON CONFLICT DO NOTHING
	RETURNING event_id
), e AS (
	INSERT INTO events (id, source, idempotency_key, event_type, content_type, body, received_at, keyed)
	SELECT $1, $2, $3, $4, $5, $6, now(), true FROM k
	RETURNING id
)
INSERT INTO outbox (event_id, routing_key) SELECT id, $7 FROM e`

// barePool opens a bare server's Postgres pool of maxConns connections.
func barePool(ctx context.Context, dbURL string, maxConns int, name string) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, fmt.Errorf("--database-url: %w", err)
	}
	pc.MaxConns = int32(maxConns)
	pc.ConnConfig.ConnectTimeout = 5 * time.Second
	pc.ConnConfig.RuntimeParams["application_name"] = name
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("opening pool: %w", err)
	}
	return pool, nil
}

// runBareIngest is the ingest reference: an HTTP server that reads the body
// and stores it with bareInsert, answering 200 {"id": ...}. No signature
// check, no extraction (the key is a fresh UUID), no routes, no publishing:
// the floor of "a 200 means it is committed in Postgres". It prints "ready
// <addr>" once it listens.
func runBareIngest(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("bare-ingest", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	dbURL := fs.String("database-url", "", "migrated hookrelay database")
	maxConns := fs.Int("max-conns", 10, "Postgres pool size")
	if err := fs.Parse(args); err != nil {
		return err
	}
	pool, err := barePool(ctx, *dbURL, *maxConns, "hookrelay-bench-bare-ingest")
	if err != nil {
		return err
	}
	defer pool.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /webhooks/{source}", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, `{"error":"reading body"}`, http.StatusBadRequest)
			return
		}
		id := uuid.Must(uuid.NewV7())
		source := r.PathValue("source")
		// Like the receiver: the commit must not be aborted half-way by a
		// client hanging up, and has a deadline of its own.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
		defer cancel()
		if _, err := pool.Exec(cctx, bareInsert, id, source, id.String(), benchEventType, "application/json", body, source+"."+benchEventType); err != nil {
			http.Error(w, `{"error":"storage unavailable"}`, http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "duplicate": false}) // the row is committed; a failed write is the client's
	})
	return serve(ctx, *listen, mux, 0, stdout)
}
