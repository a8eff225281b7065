package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ingest"
	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// groupCommit is an ingest handler on a fresh database, with a way to hold
// every insert (a lock on events) while requests queue up, so a test
// decides what goes into one batch.
type groupCommit struct {
	t   *testing.T
	db  *store.DB
	url string
	mux *http.ServeMux
	reg *prometheus.Registry
	// lock holds SHARE ROW EXCLUSIVE on events while set: inserts wait.
	lock pgx.Tx
}

func newGroupCommit(t *testing.T) *groupCommit {
	t.Helper()
	db, dbURL := storetest.Open(t)
	dedupe := true
	cfg := &config.Config{
		Sources: []config.Source{{
			Name:        "acme",
			Verify:      config.Verify{Scheme: "hmac", Secrets: []string{acmeSecret}, Header: "X-Acme-Signature", Prefix: "sha256="},
			Idempotency: config.Idempotency{JSONPath: "id"},
			EventType:   config.EventType{JSONPath: "type"},
		}, {
			// Keyed on an unsigned header, deduplicated on the body.
			Name:        "gh",
			Verify:      config.Verify{Scheme: "hmac", Secrets: []string{acmeSecret}, Header: "X-Acme-Signature", Prefix: "sha256="},
			Idempotency: config.Idempotency{Header: "X-Delivery"},
			EventType:   config.EventType{JSONPath: "type"},
			DedupeBody:  &dedupe,
		}},
		Routes: []config.Route{{Name: "billing", Bindings: []string{"acme.#", "gh.#"}}, {Name: "crm", Bindings: []string{"acme.#"}}},
	}
	sources, err := app.Sources(cfg, zerolog.Nop())
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	h, err := ingest.New(ingest.Config{
		Sources: sources, Store: app.IngestStore(db), MaxBodyBytes: 1 << 20, RouteFunc: setup.RoutesFor(cfg),
		Metrics: ingest.NewMetrics(reg), Logger: zerolog.Nop(), BatchSize: 64, BatchWait: time.Millisecond,
	})
	require.NoError(t, err)
	mux := http.NewServeMux()
	h.Register(mux)
	return &groupCommit{t: t, db: db, url: dbURL, mux: mux, reg: reg}
}

// hold makes every insert into events wait until release.
func (g *groupCommit) hold() {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, g.url)
	require.NoError(g.t, err)
	g.t.Cleanup(func() { _ = conn.Close(context.Background()) })
	tx, err := conn.Begin(ctx)
	require.NoError(g.t, err)
	_, err = tx.Exec(ctx, `LOCK TABLE events IN SHARE ROW EXCLUSIVE MODE`)
	require.NoError(g.t, err)
	g.lock = tx
}

func (g *groupCommit) release() {
	require.NoError(g.t, g.lock.Rollback(context.Background()))
	g.lock = nil
}

// post sends one webhook of source with body (and X-Delivery, when set)
// and decodes the answer.
func (g *groupCommit) post(source, body, delivery string) reply {
	req := httptest.NewRequest(http.MethodPost, "/webhooks/"+source, bytes.NewReader([]byte(body)))
	req.Header.Set("X-Acme-Signature", sign(acmeSecret, []byte(body)))
	req.Header.Set("Content-Type", "application/json")
	if delivery != "" {
		req.Header.Set("X-Delivery", delivery)
	}
	rec := httptest.NewRecorder()
	g.mux.ServeHTTP(rec, req)
	var r reply
	if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
		// Called on goroutines of its own, where a *testing.T must not
		// fail: postAll's wait reports it on the test's goroutine.
		r.Error = fmt.Sprintf("answer is not JSON (%v): %q", err, rec.Body.String())
		r.status = -1
		return r
	}
	r.status = rec.Code
	return r
}

// postAll sends every request concurrently and returns the answers in
// order, once all arrived.
func (g *groupCommit) postAll(reqs [][3]string) (wait func() []reply) {
	out := make([]reply, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = g.post(r[0], r[1], r[2])
		}()
	}
	return func() []reply {
		wg.Wait()
		for _, r := range out {
			require.NotEqual(g.t, -1, r.status, r.Error)
		}
		return out
	}
}

// metric reads a gauge, a counter, or a histogram's sample count.
func (g *groupCommit) metric(name string) (value float64, histSum float64) {
	mfs, err := g.reg.Gather()
	require.NoError(g.t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		m := mf.GetMetric()[0]
		switch {
		case m.GetHistogram() != nil:
			return float64(m.GetHistogram().GetSampleCount()), m.GetHistogram().GetSampleSum()
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue(), 0
		default:
			return m.GetCounter().GetValue(), 0
		}
	}
	g.t.Fatalf("no metric %s", name)
	return 0, 0
}

// waitFor polls cond until it holds, failing the test after 10s.
func (g *groupCommit) waitFor(what string, cond func() bool) {
	g.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			g.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond) // polling an observable condition
	}
}

// batchesStarted waits until n batches were handed to the store.
func (g *groupCommit) batchesStarted(n int) {
	g.waitFor(fmt.Sprintf("%d batches started", n), func() bool { c, _ := g.metric("hookrelay_ingest_batch_size"); return int(c) >= n })
}

// queued waits until n requests wait for a batch.
func (g *groupCommit) queued(n int) {
	g.waitFor(fmt.Sprintf("%d requests queued", n), func() bool { v, _ := g.metric("hookrelay_ingest_batch_queue"); return int(v) == n })
}

// occupy starts one lone request per committer while inserts are held, so
// the next requests queue up and form one batch. It returns their wait.
func (g *groupCommit) occupy(prefix string) func() []reply {
	var waits []func() []reply
	for i := range 2 {
		waits = append(waits, g.postAll([][3]string{{"acme", acmeBody(fmt.Sprintf("%s_%d", prefix, i)), ""}}))
		g.batchesStarted(i + 1)
	}
	return func() []reply {
		var out []reply
		for _, w := range waits {
			out = append(out, w()...)
		}
		return out
	}
}

func acmeBody(id string) string {
	return fmt.Sprintf(`{"id":%q,"type":"invoice.paid","amount":4200}`, id)
}

func (g *groupCommit) count(query string, args ...any) int {
	var n int
	require.NoError(g.t, g.db.Pool().QueryRow(context.Background(), query, args...).Scan(&n))
	return n
}

// Issue 11: concurrent duplicates in one batch, and in batches committing
// at the same time, resolve to one event (one outbox row, one delivery per
// route); every request is answered 200 with that event's id, and exactly
// one of them is not a duplicate. dedupe_body works inside a batch too.
func TestGroupCommitDuplicatesWithinAndAcrossBatches(t *testing.T) {
	t.Parallel()
	g := newGroupCommit(t)

	// Within one batch: 30 requests of one key, and 3 of one body under
	// three delivery ids of a dedupe_body source, all queued behind the
	// lock and taken by one batch.
	g.hold()
	fillers := g.occupy("filler")
	var reqs [][3]string
	for range 30 {
		reqs = append(reqs, [3]string{"acme", acmeBody("evt_same"), ""})
	}
	for i := range 3 {
		reqs = append(reqs, [3]string{"gh", `{"type":"push","ref":"main"}`, fmt.Sprint("d-", i)})
	}
	wait := g.postAll(reqs)
	g.queued(len(reqs))
	g.release()
	answers := wait()
	for _, f := range fillers() {
		require.Equal(t, http.StatusOK, f.status)
	}
	batches, sum := g.metric("hookrelay_ingest_batch_size")
	require.Equal(t, float64(2+len(reqs)), sum, "every request went through a batch")
	require.Less(t, batches, float64(2+len(reqs)), "requests were batched")

	checkOne := func(answers []reply, firstSeen bool) string {
		t.Helper()
		firsts := 0
		for _, a := range answers {
			require.Equal(t, http.StatusOK, a.status, a.Error)
			require.Equal(t, answers[0].ID, a.ID, "every request answered with the one event's id")
			if !a.Dup {
				firsts++
			}
		}
		if firstSeen {
			require.Equal(t, 0, firsts, "the event existed: all duplicates")
		} else {
			require.Equal(t, 1, firsts, "exactly one request made the event")
		}
		return answers[0].ID
	}
	sameID := checkOne(answers[:30], false)
	bodyID := checkOne(answers[30:], false)
	require.Equal(t, 1, g.count(`SELECT count(*) FROM events WHERE source = 'acme' AND idempotency_key = 'evt_same'`))
	require.Equal(t, 1, g.count(`SELECT count(*) FROM events WHERE source = 'gh'`), "one body, one event")
	require.Equal(t, 1, g.count(`SELECT count(*) FROM outbox WHERE event_id = $1`, sameID))
	require.Equal(t, 2, g.count(`SELECT count(*) FROM deliveries WHERE event_id = $1`, sameID), "billing and crm")
	require.Equal(t, 1, g.count(`SELECT count(*) FROM outbox WHERE event_id = $1`, bodyID))
	require.Equal(t, 0, g.count(`SELECT count(*) FROM events WHERE headers->'Content-Type'->>0 IS DISTINCT FROM 'application/json'`),
		"headers stored as the JSON object of the request's headers")

	// Across batches, later: the same key and body again are duplicates.
	answers = g.postAll([][3]string{{"acme", acmeBody("evt_same"), ""}, {"gh", `{"type":"push","ref":"main"}`, "d-9"}})()
	require.Equal(t, sameID, answers[0].ID)
	require.True(t, answers[0].Dup)
	require.Equal(t, bodyID, answers[1].ID)
	require.True(t, answers[1].Dup)

	// Across batches at once: two batches holding one new key wait on
	// the lock side by side (each committer took one alone), a third
	// queues behind them; ON CONFLICT makes the loser wait for the winner.
	g.hold()
	started, _ := g.metric("hookrelay_ingest_batch_size")
	first := g.postAll([][3]string{{"acme", acmeBody("evt_cross"), ""}})
	g.batchesStarted(int(started) + 1)
	second := g.postAll([][3]string{{"acme", acmeBody("evt_cross"), ""}})
	g.batchesStarted(int(started) + 2)
	var more [][3]string
	for range 10 {
		more = append(more, [3]string{"acme", acmeBody("evt_cross"), ""})
	}
	third := g.postAll(more)
	g.queued(len(more))
	g.release()
	all := append(append(first(), second()...), third()...)
	crossID := checkOne(all, false)
	require.NotEqual(t, sameID, crossID)
	require.Equal(t, 1, g.count(`SELECT count(*) FROM events WHERE idempotency_key = 'evt_cross'`))
	require.Equal(t, 1, g.count(`SELECT count(*) FROM outbox WHERE event_id = $1`, crossID))
	require.Equal(t, 2, g.count(`SELECT count(*) FROM deliveries WHERE event_id = $1`, crossID))
}

// Issue 11: a row that Postgres refuses (here a CHECK constraint the test
// adds; for real, a value past an index's size limit) fails its batch; the
// batch's requests are then stored one by one: the refused one gets 400,
// the others 200 and are stored with their outbox rows.
func TestGroupCommitRefusedRowAmongGood(t *testing.T) {
	t.Parallel()
	g := newGroupCommit(t)
	_, err := g.db.Pool().Exec(context.Background(),
		`ALTER TABLE events ADD CONSTRAINT test_refused CHECK (idempotency_key NOT LIKE 'bad%')`)
	require.NoError(t, err)

	g.hold()
	fillers := g.occupy("filler")
	var reqs [][3]string
	for i := range 9 {
		reqs = append(reqs, [3]string{"acme", acmeBody(fmt.Sprint("good_", i)), ""})
		if i == 4 {
			reqs = append(reqs, [3]string{"acme", acmeBody("bad_1"), ""})
		}
	}
	wait := g.postAll(reqs)
	g.queued(len(reqs))
	g.release()
	answers := wait()
	for _, f := range fillers() {
		require.Equal(t, http.StatusOK, f.status)
	}

	for i, a := range answers {
		if reqs[i][1] == acmeBody("bad_1") {
			require.Equal(t, http.StatusBadRequest, a.status)
			require.Contains(t, a.Error, `violates check constraint "test_refused"`)
			continue
		}
		require.Equal(t, http.StatusOK, a.status, a.Error)
		require.False(t, a.Dup)
	}
	fallbacks, _ := g.metric("hookrelay_ingest_batch_fallbacks_total")
	require.Equal(t, 1.0, fallbacks, "the batch holding the refused row was stored one by one")
	require.Equal(t, 9+2, g.count(`SELECT count(*) FROM events`))
	require.Equal(t, 9+2, g.count(`SELECT count(*) FROM outbox`))
	require.Equal(t, 0, g.count(`SELECT count(*) FROM events WHERE idempotency_key = 'bad_1'`))
}

// Issue 11: a failure of storage itself in the middle of a batch (a
// trigger that raises on one row after others of the statement were
// inserted) answers 503 to every request of the batch, and nothing of it
// is stored: no event, outbox row or delivery.
func TestGroupCommitStorageFailureMidBatch(t *testing.T) {
	t.Parallel()
	g := newGroupCommit(t)
	_, err := g.db.Pool().Exec(context.Background(), `
		CREATE FUNCTION test_boom() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'storage broke'; END $$;
		CREATE TRIGGER test_boom BEFORE INSERT ON events FOR EACH ROW
			WHEN (NEW.idempotency_key = 'boom') EXECUTE FUNCTION test_boom();`)
	require.NoError(t, err)

	g.hold()
	fillers := g.occupy("filler")
	var reqs [][3]string
	for i := range 8 {
		reqs = append(reqs, [3]string{"acme", acmeBody(fmt.Sprint("ok_", i)), ""})
		if i == 5 {
			reqs = append(reqs, [3]string{"acme", acmeBody("boom"), ""})
		}
	}
	wait := g.postAll(reqs)
	g.queued(len(reqs))
	g.release()
	answers := wait()
	for _, f := range fillers() {
		require.Equal(t, http.StatusOK, f.status)
	}
	for _, a := range answers {
		require.Equal(t, http.StatusServiceUnavailable, a.status)
		require.Equal(t, "storage unavailable, retry later", a.Error)
	}
	fallbacks, _ := g.metric("hookrelay_ingest_batch_fallbacks_total")
	require.Zero(t, fallbacks, "a storage failure is not the row's fault: no one-by-one retry")
	require.Equal(t, 2, g.count(`SELECT count(*) FROM events`), "only the two fillers")
	require.Equal(t, 2, g.count(`SELECT count(*) FROM outbox`))
	require.Equal(t, 4, g.count(`SELECT count(*) FROM deliveries`))
}
