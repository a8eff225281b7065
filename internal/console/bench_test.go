package console_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	hamqp "github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/console"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/routeset"
	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"
)

// BenchmarkConsolePages fills a database with HOOKRELAY_CONSOLE_BENCH_EVENTS
// events (default 1,000,000: two or three routes each, about three million
// attempts, the shape of a month of traffic), then serves every console
// page from it and measures the time the handler spends on each (server
// time: from the request's arrival to the last byte written), with the
// real Postgres and the real broker behind it. Each sub-benchmark reports
// its median as ms/page; the table at the end gives median, p95 and
// maximum of every page.
//
//	go test ./internal/console -run '^$' -bench ConsolePages -benchtime 20x -timeout 30m
//
// HOOKRELAY_CONSOLE_BENCH_KEEP=name keeps the filled database for the
// next run (see benchDatabase).
func BenchmarkConsolePages(b *testing.B) {
	events := 1_000_000
	if v := os.Getenv("HOOKRELAY_CONSOLE_BENCH_EVENTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1000 {
			b.Fatalf("HOOKRELAY_CONSOLE_BENCH_EVENTS=%q: want a whole number of at least 1000", v)
		}
		events = n
	}
	ctx := context.Background()
	db, dbURL, filled := benchDatabase(b, ctx)
	prefix := amqptest.Prefix(b)
	cfg := &config.Config{
		Database: config.Database{URL: dbURL, MaxConns: 10},
		AMQP:     config.AMQP{URL: testenv.AMQPURL(), Prefix: prefix, ManagementURL: testenv.ManagementURL()},
	}
	for _, r := range benchRoutes {
		cfg.Routes = append(cfg.Routes, config.Route{Name: r, URL: "http://127.0.0.1:9/", Bindings: []string{"#"}})
	}
	topo := setup.Topology(cfg)
	amqptest.DeleteTopology(b, topo)
	conn := amqptest.Dial(b)
	ch := amqptest.Channel(b, conn)
	if err := topo.Declare(ch); err != nil {
		b.Fatal(err)
	}

	began := time.Now()
	if !filled {
		if _, err := db.EnsurePartitionsFor(ctx, time.Now().AddDate(0, 0, -31), time.Now()); err != nil {
			b.Fatal(err)
		}
		for _, sql := range []string{fillEvents, fillDeliveries, fillAttempts, fillAudit} {
			if _, err := db.Pool().Exec(ctx, sql, events); err != nil {
				b.Fatalf("filling: %v\n%s", err, sql)
			}
		}
	}
	if _, err := db.Pool().Exec(ctx, "VACUUM ANALYZE"); err != nil {
		b.Fatalf("vacuum: %v", err)
	}
	counts := map[string]int64{}
	for _, table := range []string{"events", "deliveries", "delivery_attempts", "audit_log"} {
		var n int64
		if err := db.Pool().QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
			b.Fatal(err)
		}
		counts[table] = n
	}
	fmt.Printf("filled in %s: %d events, %d deliveries, %d attempts, %d audit rows", time.Since(began).Round(time.Second),
		counts["events"], counts["deliveries"], counts["delivery_attempts"], counts["audit_log"])
	fmt.Println()

	// The dead-letter queue holds what a month of dead pairs leaves: the
	// page reads its head.
	var dead []uuid.UUID
	rows, err := db.Pool().Query(ctx, `SELECT event_id FROM deliveries WHERE route = 'billing' AND state = 'dead' LIMIT 200`)
	if err != nil {
		b.Fatal(err)
	}
	for rows.Next() {
		var id uuid.UUID
		if err := rows.Scan(&id); err != nil {
			b.Fatal(err)
		}
		dead = append(dead, id)
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	names := hamqp.Names{Prefix: prefix}
	for _, id := range dead {
		err := ch.PublishWithContext(ctx, "", names.DeadQueue("billing"), false, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent, Body: []byte(`{}`),
			Headers: amqp.Table{hamqp.HeaderEventID: id.String(), hamqp.HeaderSource: "stripe", hamqp.HeaderEventType: "invoice.payment_failed",
				hamqp.HeaderAttempts: int64(6), hamqp.HeaderLastStatus: int64(500), hamqp.HeaderDeadReason: "max_attempts"},
		})
		if err != nil {
			b.Fatal(err)
		}
	}

	dialer := amqptest.Dialer(b)
	routes, err := routeset.Declared(cfg)
	if err != nil {
		b.Fatal(err)
	}
	svc, closeOps, err := setup.Ops(cfg, db, dialer, "console-bench", func() *routeset.Set { return routes })
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(closeOps)
	svcCtx, stop := context.WithCancel(ctx)
	svc.Jobs = ops.NewJobRunner(svcCtx, zerolog.Nop())
	b.Cleanup(svc.Jobs.Wait)
	b.Cleanup(stop)
	handler, err := console.Handler(svcCtx, svc, console.Options{DB: stdlib.OpenDBFromPool(db.Pool())}, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	timer := &serverTimer{}
	srv := httptest.NewServer(timer.wrap(handler))
	b.Cleanup(srv.Close)
	tok, err := svc.TokenCreate(ops.WithActor(ctx, "bench"), ops.TokenRequest{Name: "bench", Role: ops.RoleAdmin})
	if err != nil {
		b.Fatal(err)
	}
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar, Timeout: time.Minute}
	resp, err := client.PostForm(srv.URL+"/signin", url.Values{"token": {tok.Secret}})
	if err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	if resp.Request.URL.Path != "/" {
		b.Fatalf("sign-in ended at %s", resp.Request.URL)
	}

	// The pages, each with what an operator would ask of it.
	var sample struct {
		event, key string
		at         time.Time
		job        uuid.UUID
	}
	if err := db.Pool().QueryRow(ctx, `
		SELECT e.id, e.idempotency_key, e.received_at FROM events e JOIN deliveries d ON d.event_id = e.id
		WHERE d.state = 'dead' ORDER BY e.received_at LIMIT 1
		OFFSET (SELECT count(*) / 2 FROM deliveries WHERE state = 'dead')`).Scan(&sample.event, &sample.key, &sample.at); err != nil {
		b.Fatal(err)
	}
	window := func(from time.Time, d time.Duration) string {
		return "since=" + from.UTC().Format(time.RFC3339) + "&until=" + from.Add(d).UTC().Format(time.RFC3339)
	}
	// A second page of the newest events (a cursor).
	first, err := svc.EventList(ctx, storeFilter(b, 50))
	if err != nil {
		b.Fatal(err)
	}
	pages := []struct{ name, path string }{
		{"overview", "/"},
		{"route", "/routes/billing"},
		{"route with a version", "/routes/billing?source=stripe&resource=in_1"},
		{"events", "/events"},
		{"events next page", "/events?cursor=" + first.NextCursor},
		{"events by source", "/events?source=stripe"},
		{"events by type", "/events?event_type=invoice.payment_failed"},
		{"events dead", "/events?state=dead"},
		{"events route retrying", "/events?route=crm&state=retrying"},
		{"events stale", "/events?state=stale"},
		{"events 1h window", "/events?" + window(sample.at, time.Hour)},
		{"events source+state+window", "/events?source=github&state=dead&" + window(sample.at.Add(-7*24*time.Hour), 14*24*time.Hour)},
		{"find by sender id", "/events?find=" + url.QueryEscape(sample.key)},
		{"event", "/events/" + sample.event},
		{"dead letters", "/routes/billing/dead-letters"},
		{"replay preview", "/replay?preview=1&source=stripe&state=dead&" + window(sample.at.Add(-24*time.Hour), 48*time.Hour)},
		{"audit log", "/audit"},
		{"audit by actor", "/audit?actor=token:alice"},
	}
	for _, p := range extraPages(b, ctx, svc, &sample.job) {
		pages = append(pages, p)
	}

	type row struct {
		name                 string
		median, p95, maximum time.Duration
	}
	var table []row
	for _, p := range pages {
		b.Run(p.name, func(b *testing.B) {
			timer.reset()
			for b.Loop() {
				resp, err := client.Get(srv.URL + p.path)
				if err != nil {
					b.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || resp.Request.URL.Path == "/signin" {
					b.Fatalf("%s: %d at %s\n%.500s", p.path, resp.StatusCode, resp.Request.URL, body)
				}
			}
			ds := timer.take()
			slices.Sort(ds)
			r := row{name: p.name, median: ds[len(ds)/2], p95: ds[(len(ds)*95)/100], maximum: ds[len(ds)-1]}
			b.ReportMetric(float64(r.median.Microseconds())/1000, "ms/page")
			table = append(table, r)
		})
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\nconsole server time per page, %d events, %d deliveries, %d attempts:\n\n", counts["events"], counts["deliveries"], counts["delivery_attempts"])
	fmt.Fprintf(&out, "| page | median | p95 | max |\n|---|---|---|---|\n")
	for _, r := range table {
		ms := func(d time.Duration) string {
			return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 1, 64) + " ms"
		}
		fmt.Fprintf(&out, "| %s | %s | %s | %s |\n", r.name, ms(r.median), ms(r.p95), ms(r.maximum))
	}
	fmt.Print(out.String()) // the table is the benchmark's report: printed without -v
}

// benchDatabase opens the benchmark's database: a new one dropped at the
// end, or, with HOOKRELAY_CONSOLE_BENCH_KEEP=name, that database, created
// and filled by the first run and kept (migrated to the current schema)
// for the next, which then skip the fill. filled says it holds events.
func benchDatabase(b *testing.B, ctx context.Context) (*store.DB, string, bool) {
	name := os.Getenv("HOOKRELAY_CONSOLE_BENCH_KEEP")
	if name == "" {
		db, u := storetest.Open(b)
		return db, u, false
	}
	admin, err := pgx.Connect(ctx, testenv.AdminDatabaseURL())
	if err != nil {
		b.Fatal(err)
	}
	defer admin.Close(ctx)
	var exists bool
	if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		b.Fatal(err)
	}
	if !exists {
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
			b.Fatal(err)
		}
	}
	u := storetest.WithDatabase(testenv.AdminDatabaseURL(), name)
	if _, err := store.Migrate(ctx, u); err != nil {
		b.Fatal(err)
	}
	db, err := store.Open(ctx, store.Config{URL: u, MaxConns: 10, ApplicationName: "console-bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(db.Close)
	var filled bool
	if err := db.Pool().QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM events)`).Scan(&filled); err != nil {
		b.Fatal(err)
	}
	if filled {
		// What the last run left: sessions, tokens and jobs are its own.
		if _, err := db.Pool().Exec(ctx, `TRUNCATE console_sessions, api_jobs; DELETE FROM api_tokens WHERE name = 'bench'`); err != nil {
			b.Fatal(err)
		}
	}
	return db, u, filled
}

// benchRoutes are the filled database's routes: every event goes to
// billing and crm, one in ten to ledger too.
var benchRoutes = []string{"billing", "crm", "ledger"}

// extraPages are pages that need something made first: a job.
func extraPages(b *testing.B, ctx context.Context, svc *ops.Service, job *uuid.UUID) []struct{ name, path string } {
	b.Helper()
	j, _, err := svc.StartJob(ops.WithActor(ctx, "token:bench"), "replay", "", map[string]any{"dry_run": true},
		func(context.Context, func(any)) (any, error) { return map[string]int{"enqueued": 0}, nil })
	if err != nil {
		b.Fatal(err)
	}
	*job = j.ID
	return []struct{ name, path string }{{"job", "/jobs/" + j.ID.String()}}
}

func storeFilter(b *testing.B, limit int) ops.EventFilter {
	b.Helper()
	f, err := ops.ListFilter(ops.FilterFields{}, limit, "", "")
	if err != nil {
		b.Fatal(err)
	}
	return f
}

// serverTimer records how long the handler took on each request.
type serverTimer struct {
	mu sync.Mutex
	ds []time.Duration
}

func (s *serverTimer) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		began := time.Now()
		next.ServeHTTP(w, r)
		d := time.Since(began)
		s.mu.Lock()
		s.ds = append(s.ds, d)
		s.mu.Unlock()
	})
}

func (s *serverTimer) reset() {
	s.mu.Lock()
	s.ds = nil
	s.mu.Unlock()
}

func (s *serverTimer) take() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.ds
	s.ds = nil
	return out
}

// The fill: $1 events over the last 30 days, newest now, from four
// sources with ten event types; bodies of about 600 bytes. Each event has
// a pair on billing and crm, and one in ten on ledger. By the pair's id:
// 74% delivered at the first attempt, 16% after three (two 500s), 2%
// retrying after two, 3% dead after six, 2% pending, 3% stale.
const fillEvents = `
INSERT INTO events (id, source, idempotency_key, event_type, content_type, headers, body, received_at, keyed)
SELECT hookrelay_uuid7(t),
       (ARRAY['stripe','github','shopify','acme'])[1 + i % 4],
       'evt_' || lpad(i::text, 9, '0'),
       (ARRAY['invoice.paid','invoice.payment_failed','customer.created','customer.updated','charge.refunded',
              'push','pull_request','orders/create','orders/paid','ping'])[1 + (i / 4) % 10],
       'application/json',
       jsonb_build_object('Content-Type', jsonb_build_array('application/json'), 'User-Agent', jsonb_build_array('Stripe/1.0')),
       convert_to(json_build_object('id', 'evt_' || lpad(i::text, 9, '0'), 'type', 'invoice.paid', 'created', i,
           'data', json_build_object('object', json_build_object('id', 'in_' || md5(i::text), 'amount_due', i % 100000,
           'currency', 'usd', 'customer', 'cus_' || md5((i % 5000)::text), 'description', repeat('x', 300))))::text, 'UTF8'),
       t, true
FROM generate_series(1, $1::int) AS i,
     LATERAL (SELECT now() - ($1::int - i) * interval '2592 ms' * (1000000.0 / $1::int) AS t) AS at`

const fillDeliveries = `
INSERT INTO deliveries (event_id, route, state, attempts, last_status, last_attempt_at, first_attempt_at, delivered_at, created_at, updated_at, due_at)
SELECT e.id, r.route, s.state, s.attempts, s.last_status,
       CASE WHEN s.attempts > 0 THEN e.received_at + s.attempts * interval '2 s' END,
       CASE WHEN s.attempts > 0 THEN e.received_at + interval '50 ms' END,
       CASE WHEN s.state = 'delivered' THEN e.received_at + s.attempts * interval '2 s' END,
       e.received_at, e.received_at, e.received_at + s.attempts * interval '2 s'
FROM events e
CROSS JOIN LATERAL (VALUES ('billing'), ('crm'), ('ledger')) AS r(route)
CROSS JOIN LATERAL (SELECT abs(hashtext(e.id::text || r.route)) % 100 AS b) AS h
CROSS JOIN LATERAL (SELECT
       CASE WHEN h.b < 90 THEN 'delivered' WHEN h.b < 92 THEN 'retrying' WHEN h.b < 95 THEN 'dead'
            WHEN h.b < 97 THEN 'pending' ELSE 'stale' END AS state,
       CASE WHEN h.b < 74 THEN 1 WHEN h.b < 90 THEN 3 WHEN h.b < 92 THEN 2 WHEN h.b < 95 THEN 6 ELSE 0 END AS attempts,
       CASE WHEN h.b < 90 THEN 200 WHEN h.b < 95 THEN 500 END AS last_status) AS s
WHERE r.route <> 'ledger' OR abs(hashtext(e.id::text)) % 10 = 0
  AND $1::int > 0`

const fillAttempts = `
INSERT INTO delivery_attempts (delivery_id, event_id, attempt, started_at, duration_ms, status, response_body, error, outcome, series)
SELECT d.id, d.event_id, n, d.created_at + n * interval '2 s', 20 + n * 7,
       CASE WHEN n = d.attempts AND d.state = 'delivered' THEN 200 ELSE 500 END,
       CASE WHEN n = d.attempts AND d.state = 'delivered' THEN convert_to('{"ok":true}', 'UTF8')
            ELSE convert_to('{"error":"upstream unavailable"}', 'UTF8') END,
       NULL,
       CASE WHEN n = d.attempts AND d.state = 'delivered' THEN 'delivered'
            WHEN n = d.attempts AND d.state = 'dead' THEN 'dead' ELSE 'retry' END,
       1
FROM deliveries d CROSS JOIN LATERAL generate_series(1, d.attempts) AS n
WHERE $1::int > 0`

const fillAudit = `
INSERT INTO audit_log (at, actor, action, target, outcome)
SELECT now() - i * interval '1 min', (ARRAY['token:alice','token:bob','token:ci'])[1 + i % 3],
       (ARRAY['route.pause','route.resume','replay','dead.requeue'])[1 + i % 4], 'billing', 'ok'
FROM generate_series(1, least($1::int / 100, 10000)) AS i`
