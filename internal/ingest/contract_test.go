package ingest

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/extract"
	"github.com/hookrelay/hookrelay/internal/signature"
	"github.com/hookrelay/hookrelay/internal/storecontract"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// fakeStore is ingest's Store: it keeps what it stored, answers a
// duplicate for a key it has, and fails with err when set.
type fakeStore struct {
	mu     sync.Mutex
	err    error
	byKey  map[string]uuid.UUID
	events []*webhook.Event
	routes [][]string
	// ctxErr is the context's error when EventInsertBatch was called.
	ctxErr error
}

func (s *fakeStore) EventInsertBatch(ctx context.Context, batch []webhook.Insert) ([]webhook.Stored, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ctxErr = ctx.Err()
	if s.ctxErr != nil {
		return nil, s.ctxErr // as Postgres: a cancelled batch stores nothing
	}
	if s.err != nil {
		return nil, s.err
	}
	for _, in := range batch {
		// As Postgres refuses a text field holding a NUL: the whole batch.
		if strings.ContainsRune(in.Event.EventType+in.Event.Source+in.Event.IdempotencyKey, 0) {
			return nil, &webhook.RefusedError{Reason: "invalid byte sequence for encoding \"UTF8\": 0x00"}
		}
	}
	out := make([]webhook.Stored, len(batch))
	for i, in := range batch {
		out[i].ID, out[i].Duplicate = s.insertLocked(in.Event, in.Routes)
	}
	return out, nil
}

func (s *fakeStore) insertLocked(ev *webhook.Event, routes []string) (uuid.UUID, bool) {
	key := ev.Source + "/" + ev.IdempotencyKey
	if id, ok := s.byKey[key]; ok {
		return id, true
	}
	s.byKey[key] = ev.ID
	s.events = append(s.events, ev)
	s.routes = append(s.routes, routes)
	return ev.ID, false
}

func (s *fakeStore) stored() []*webhook.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*webhook.Event(nil), s.events...)
}

// failingVerifier fails without a rejection: the verifier itself broke.
type failingVerifier struct{}

func (failingVerifier) Verify(*signature.Request) error { return errors.New("verifier broke") }

const secret = "s3cret"

func sign(body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

func signTimed(ts string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "."))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

type contract struct {
	h     *Handler
	store *fakeStore
	now   time.Time
}

// newContract serves three sources: acme (HMAC of the body in X-Sig with
// prefix sha256=), timed (HMAC of "timestamp.body", the timestamp in X-Ts
// within 5m), and broken (a verifier that fails); 64-byte bodies at most.
func newContract(t *testing.T) *contract {
	t.Helper()
	c := &contract{store: &fakeStore{byKey: map[string]uuid.UUID{}}, now: time.Date(2026, 11, 27, 14, 0, 0, 0, time.UTC)}
	x, err := extract.New(extract.Config{IdempotencyPaths: []string{"id"}, EventTypePaths: []string{"type"}})
	require.NoError(t, err)
	acme, err := signature.NewHMAC(signature.HMACConfig{Secrets: []string{secret}, Header: "X-Sig", Prefix: "sha256="})
	require.NoError(t, err)
	timed, err := signature.NewHMAC(signature.HMACConfig{Secrets: []string{secret}, Header: "X-Sig", TimestampHeader: "X-Ts"})
	require.NoError(t, err)
	c.h, err = New(Config{
		Sources: []Source{
			{Name: "acme", Verifier: acme, Extractor: x},
			{Name: "timed", Verifier: timed, Extractor: x},
			{Name: "broken", Verifier: failingVerifier{}, Extractor: x},
		},
		Store:        c.store,
		MaxBodyBytes: 64,
		Metrics:      NewMetrics(prometheus.NewRegistry()),
		NowFunc:      func() time.Time { return c.now },
		RouteFunc: func(_ context.Context, ev *webhook.Event) Routing {
			if strings.HasPrefix(ev.RoutingKey(), "acme.invoice.") {
				return Routing{Routes: []string{"billing"}}
			}
			return Routing{}
		},
	})
	require.NoError(t, err)
	return c
}

// do serves r and returns the status and the decoded body.
func (c *contract) do(t *testing.T, r *http.Request) (int, map[string]any) {
	t.Helper()
	mux := http.NewServeMux()
	c.h.Register(mux)
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	var body map[string]any
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body), w.Body.String())
	require.Equal(t, "application/json", w.Header().Get("Content-Type"))
	if w.Code == http.StatusMethodNotAllowed {
		require.Equal(t, http.MethodPost, w.Header().Get("Allow"))
	}
	return w.Code, body
}

func signed(source, body string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/webhooks/"+source, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("X-Sig", sign([]byte(body)))
	return r
}

// Each answer of POST /webhooks/{source}, and what was stored for it.
func TestIngestContract(t *testing.T) {
	t.Parallel()
	const good = `{"id":"evt_1","type":"invoice.paid"}`
	for _, tc := range []struct {
		name     string
		req      func(c *contract) *http.Request
		status   int
		errorHas string
		reason   string // the metric's reason, for a rejection
	}{
		{name: "unknown source", status: 404, errorHas: "unknown source", reason: "unknown_source",
			req: func(*contract) *http.Request { return signed("nobody", good) }},
		{name: "a GET", status: 405, errorHas: "use POST", reason: "method",
			req: func(*contract) *http.Request { return httptest.NewRequest(http.MethodGet, "/webhooks/acme", nil) }},
		{name: "a body too large", status: 413, errorHas: "body exceeds 64 bytes", reason: "too_large",
			req: func(*contract) *http.Request { return signed("acme", `{"id":"`+strings.Repeat("x", 64)+`"}`) }},
		{name: "a missing signature", status: 401, errorHas: "missing header X-Sig", reason: "signature_missing",
			req: func(*contract) *http.Request {
				r := signed("acme", good)
				r.Header.Del("X-Sig")
				return r
			}},
		{name: "a malformed signature", status: 401, errorHas: "must start with", reason: "signature_malformed",
			req: func(*contract) *http.Request {
				r := signed("acme", good)
				r.Header.Set("X-Sig", "md5=abc")
				return r
			}},
		{name: "a signature of another body", status: 401, errorHas: "signature mismatch", reason: "signature_mismatch",
			req: func(*contract) *http.Request {
				r := signed("acme", good)
				r.Header.Set("X-Sig", sign([]byte(`{}`)))
				return r
			}},
		{name: "a timestamp outside tolerance", status: 401, errorHas: "timestamp outside tolerance", reason: "signature_expired",
			req: func(c *contract) *http.Request {
				ts := strconv.FormatInt(c.now.Add(-10*time.Minute).Unix(), 10)
				r := httptest.NewRequest(http.MethodPost, "/webhooks/timed", strings.NewReader(good))
				r.Header.Set("X-Ts", ts)
				r.Header.Set("X-Sig", signTimed(ts, []byte(good)))
				return r
			}},
		{name: "a body the extractors cannot read", status: 400, errorHas: "id", reason: "bad_request",
			req: func(*contract) *http.Request { return signed("acme", `{"type":"invoice.paid"}`) }},
		{name: "a key Postgres could never store", status: 400, errorHas: "NUL", reason: "bad_request",
			req: func(*contract) *http.Request { return signed("acme", `{"id":"a\u0000b","type":"x"}`) }},
		{name: "a Content-Type that is not printable ASCII", status: 400, errorHas: "Content-Type must be printable ASCII", reason: "bad_request",
			req: func(*contract) *http.Request {
				r := signed("acme", good)
				r.Header.Set("Content-Type", "application/json; charset=\xff")
				return r
			}},
		{name: "a body that stalls past the read timeout", status: 408, errorHas: "send it again", reason: "read_timeout",
			req: func(*contract) *http.Request {
				r := signed("acme", good)
				r.Body = io.NopCloser(io.MultiReader(strings.NewReader(`{"id"`), errReader{timeoutError{}}))
				return r
			}},
		{name: "a body that breaks off", status: 400, errorHas: "reading body failed", reason: "read_error",
			req: func(*contract) *http.Request {
				r := signed("acme", good)
				r.Body = io.NopCloser(errReader{io.ErrUnexpectedEOF})
				return r
			}},
		{name: "a verifier that fails", status: 500, errorHas: "verification failed",
			req: func(*contract) *http.Request { return signed("broken", good) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newContract(t)
			status, body := c.do(t, tc.req(c))
			require.Equal(t, tc.status, status, "%v", body)
			require.Contains(t, body["error"], tc.errorHas)
			require.NotContains(t, body["error"], secret)
			require.Empty(t, c.store.stored(), "nothing stored")
			if tc.reason != "" {
				source := "acme"
				if tc.status == 404 {
					source = "unknown" // never a label from the URL
				}
				if strings.Contains(tc.name, "timestamp") {
					source = "timed"
				}
				require.Equal(t, 1.0, testutil.ToFloat64(c.h.metrics.requests.WithLabelValues(source, "rejected", tc.reason)))
			}
		})
	}
}

// 200 only once stored; the same key again is 200 with the first id.
func TestIngestStoresAndAnswersDuplicates(t *testing.T) {
	t.Parallel()
	c := newContract(t)
	body := `{"id":"evt_1","type":"invoice.paid"}`
	r := signed("acme", body)
	r.Header.Set("Authorization", "Bearer token")
	r.Header.Set("X-Request-Id", "abc")
	status, first := c.do(t, r)
	require.Equal(t, 200, status)
	require.Equal(t, false, first["duplicate"])
	stored := c.store.stored()
	require.Len(t, stored, 1)
	ev := stored[0]
	require.Equal(t, first["id"], ev.ID.String())
	require.Equal(t, "evt_1", ev.IdempotencyKey)
	require.Equal(t, "invoice.paid", ev.EventType)
	require.Equal(t, []byte(body), ev.Body, "stored byte for byte")
	require.Equal(t, c.now, ev.ReceivedAt)
	require.Empty(t, ev.Headers.Get("Authorization"), "credentials are not stored")
	require.Equal(t, "abc", ev.Headers.Get("X-Request-Id"))
	require.Equal(t, [][]string{{"billing"}}, c.store.routes, "a pending delivery per route it reaches")

	status, again := c.do(t, signed("acme", body))
	require.Equal(t, 200, status)
	require.Equal(t, true, again["duplicate"])
	require.Equal(t, first["id"], again["id"], "the first event's id")
	require.Len(t, c.store.stored(), 1)
	require.Equal(t, 1.0, testutil.ToFloat64(c.h.metrics.requests.WithLabelValues("acme", "accepted", "")))
	require.Equal(t, 1.0, testutil.ToFloat64(c.h.metrics.requests.WithLabelValues("acme", "duplicate", "")))
}

// A storage failure is 503 (the sender retries), never a 2xx.
func TestIngestStorageFailureIs503(t *testing.T) {
	t.Parallel()
	c := newContract(t)
	c.store.err = errors.New("postgres down")
	status, body := c.do(t, signed("acme", `{"id":"evt_1","type":"invoice.paid"}`))
	require.Equal(t, 503, status)
	require.Equal(t, "storage unavailable, retry later", body["error"])
	require.NotContains(t, body["error"], "postgres")
	require.Equal(t, 1.0, testutil.ToFloat64(c.h.metrics.requests.WithLabelValues("acme", "error", "storage")))
}

// A sender that hangs up does not abort the commit: the store runs under a
// context of its own.
func TestIngestCommitSurvivesTheSenderLeaving(t *testing.T) {
	t.Parallel()
	c := newContract(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	status, _ := c.do(t, signed("acme", `{"id":"evt_1","type":"invoice.paid"}`).WithContext(ctx))
	require.Equal(t, 200, status)
	require.NoError(t, c.store.ctxErr)
	require.Len(t, c.store.stored(), 1)
}

type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// The fake keeps ingest.Store's contract, as the Postgres store does
// (internal/store's TestStoreKeepsTheIngestContract).
func TestFakeStoreKeepsTheIngestContract(t *testing.T) {
	storecontract.Ingest(t, func(*testing.T) storecontract.IngestStore { return &fakeStore{byKey: map[string]uuid.UUID{}} })
}
