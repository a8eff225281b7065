// Package ingest is the receiver's HTTP handler for POST /webhooks/{source}:
// size limit, signature verification on the raw bytes, idempotency key and
// event type extraction, then one transaction that stores the event and its
// outbox row. Concurrent requests share that transaction (group commit, see
// batcher): one statement stores a whole batch. It answers 200 only after
// the transaction committed, and 503 when it did not, so the sender
// retries; 400 when Postgres refused the event's data.
package ingest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/activity"
	"github.com/hookrelay/hookrelay/internal/extract"
	"github.com/hookrelay/hookrelay/internal/httpserver"
	"github.com/hookrelay/hookrelay/internal/signature"
	"github.com/hookrelay/hookrelay/internal/tracing"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Store is what ingest needs from Postgres.
type Store interface {
	// EventInsertBatch stores every item (its event, its outbox row and a
	// pending delivery per route) in one transaction, or nothing. An item
	// whose event exists already (an earlier item of the batch included)
	// stores nothing and gets the existing event's id, Duplicate true. A
	// non-nil error means nothing was stored; it wraps a
	// *webhook.RefusedError when Postgres refused the data of some row
	// (answered 400 with its Reason). Otherwise it returns one
	// webhook.Stored per item, in order.
	EventInsertBatch(ctx context.Context, batch []webhook.Insert) ([]webhook.Stored, error)
}

// Source is one configured sender.
type Source struct {
	Name      string
	Verifier  signature.Verifier
	Extractor *extract.Extractor
	// DedupeBody makes a body identical to one already stored for the
	// source a duplicate, whatever its key: for senders whose signature
	// covers only the body, so unsigned headers (a new delivery id, another
	// event type) cannot turn a replayed body into a new event.
	DedupeBody bool
	// TrustTraceparent continues the sender's trace context when tracing;
	// otherwise each request starts a trace linked to the sender's.
	TrustTraceparent bool
}

// Config configures a Handler.
type Config struct {
	Sources      []Source
	Store        Store
	MaxBodyBytes int64
	Metrics      *Metrics
	Logger       zerolog.Logger
	// NowFunc is the clock; time.Now when nil.
	NowFunc func() time.Time
	// StoreTimeout bounds storing one request's event, from the moment it
	// is queued for its batch to the batch's commit. Default 5s.
	StoreTimeout time.Duration
	// BatchSize is the most requests one batch stores (group commit).
	// Default DefaultBatchSize; 1 stores each request on its own.
	BatchSize int
	// BatchWait is how long a batch that holds more than one request but
	// is not full waits for more before it is stored. A request alone is
	// stored at once whatever it says. Zero: no wait.
	BatchWait time.Duration
	// RouteFunc says which routes get an event (their bindings match its
	// routing key, their filter takes it): a pair each. Nil means none are
	// recorded at ingest.
	RouteFunc func(ctx context.Context, ev *webhook.Event) Routing
	// Tracing, when on, gives each request a server span (see Register)
	// with spans of verification and storage, and stores the request
	// span's context with the event. Nil or off: no spans, no trace
	// stored.
	Tracing *tracing.Tracing
}

// Handler serves POST /webhooks/{source}.
type Handler struct {
	sources      map[string]Source
	maxBody      int64
	metrics      *Metrics
	logger       zerolog.Logger
	now          func() time.Time
	storeTimeout time.Duration
	route        func(context.Context, *webhook.Event) Routing
	batcher      *batcher
	tracer       trace.Tracer
	provider     trace.TracerProvider
}

// New returns a Handler for cfg.
func New(cfg Config) (*Handler, error) {
	if cfg.Store == nil || cfg.Metrics == nil {
		return nil, errors.New("ingest: Store and Metrics are required")
	}
	if cfg.MaxBodyBytes <= 0 {
		return nil, errors.New("ingest: MaxBodyBytes must be positive")
	}
	h := &Handler{
		sources:      make(map[string]Source, len(cfg.Sources)),
		maxBody:      cfg.MaxBodyBytes,
		metrics:      cfg.Metrics,
		logger:       cfg.Logger.With().Str("component", "ingest").Logger(),
		now:          cfg.NowFunc,
		storeTimeout: cfg.StoreTimeout,
		route:        cfg.RouteFunc,
	}
	if cfg.Tracing.On() {
		h.tracer, h.provider = cfg.Tracing.Tracer, cfg.Tracing.Provider
	}
	if h.now == nil {
		h.now = time.Now
	}
	if h.storeTimeout == 0 {
		h.storeTimeout = 5 * time.Second
	}
	size := cfg.BatchSize
	if size == 0 {
		size = DefaultBatchSize
	}
	if size < 0 || cfg.BatchWait < 0 {
		return nil, errors.New("ingest: BatchSize and BatchWait must not be negative")
	}
	h.batcher = newBatcher(cfg.Store, size, cfg.BatchWait, cfg.Metrics, h.logger)
	for _, s := range cfg.Sources {
		if s.Verifier == nil || s.Extractor == nil {
			return nil, fmt.Errorf("ingest: source %q needs a verifier and an extractor", s.Name)
		}
		if _, ok := s.Verifier.(signature.IDVerifier); s.Extractor.SignedID() && !ok {
			return nil, fmt.Errorf("ingest: source %q keys on the signed id, but its verifier signs none", s.Name)
		}
		h.sources[s.Name] = s
	}
	return h, nil
}

// Register adds the webhook route to mux. When tracing, each request has
// a server span (otelhttp's): it continues the sender's traceparent only
// for a source that trusts it, and otherwise starts a trace of its own,
// linked to the sender's.
func (h *Handler) Register(mux *http.ServeMux) {
	if h.tracer == nil {
		mux.Handle("/webhooks/{source}", h)
		return
	}
	mux.Handle("/webhooks/{source}", otelhttp.NewHandler(h, "webhook",
		otelhttp.WithTracerProvider(h.provider),
		otelhttp.WithPropagators(tracing.Propagator),
		otelhttp.WithPublicEndpointFn(func(r *http.Request) bool {
			s, ok := h.sources[r.PathValue("source")]
			return !ok || !s.TrustTraceparent
		}),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method + " /webhooks/{source}" }),
	))
}

// Response is the 200 body.
type Response struct {
	ID        uuid.UUID `json:"id"`
	Duplicate bool      `json:"duplicate"`
}

// maxRoutingKey is AMQP's limit on a routing key (a short string).
const maxRoutingKey = 255

// Headers that carry credentials are not stored with the event.
var credentialHeaders = []string{"Authorization", "Proxy-Authorization", "Cookie"}

// ServeHTTP implements the ingest pipeline.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := h.now()
	name := r.PathValue("source")
	src, ok := h.sources[name]
	label := name
	if !ok {
		label = "unknown" // never a label from the URL: unbounded cardinality
	}
	outcome, reason := h.serve(w, r, src, ok, start)
	h.metrics.requests.WithLabelValues(label, outcome, reason).Inc()
	h.metrics.activity.Add(activity.Ingest, label, outcome, reason)
	h.metrics.duration.WithLabelValues(label, outcome).Observe(time.Since(start).Seconds())
}

func (h *Handler) serve(w http.ResponseWriter, r *http.Request, src Source, known bool, start time.Time) (outcome, reason string) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return reject(w, http.StatusMethodNotAllowed, "method not allowed: use POST", "method")
	}
	if !known {
		return reject(w, http.StatusNotFound, "unknown source", "unknown_source")
	}
	log := h.logger.With().Str("source", src.Name).Logger()
	body, status, msg, reason := h.readBody(w, r)
	if status != 0 {
		return reject(w, status, msg, reason)
	}
	signedID, err := h.verify(r.Context(), src, &signature.Request{Header: r.Header, Query: r.URL.Query(), Body: body, Now: start})
	if err != nil {
		var ve *signature.VerifyError
		if !errors.As(err, &ve) {
			log.Error().Err(err).Msg("verifier failed")
			httpserver.WriteError(w, http.StatusInternalServerError, "verification failed")
			return "error", "verifier"
		}
		log.Debug().Str("reason", ve.Reason).Msg("rejected signature")
		return reject(w, http.StatusUnauthorized, ve.Reason, "signature_"+ve.Kind())
	}
	ev, msg := h.event(r, src, body, signedID, start, log)
	if ev == nil {
		return reject(w, http.StatusBadRequest, msg, "bad_request")
	}
	if h.tracer != nil {
		// The request's span (otelhttp's, around this handler): the
		// event's first copy continues it.
		tc := tracing.Of(r.Context())
		ev.TraceParent = tc.Parent
		if id := tracing.TraceIDOf(r.Context()); id != "" {
			log = log.With().Str("trace_id", id).Logger()
		}
	}
	return h.commit(w, r, ev, log)
}

// reject answers status with {"error": msg}: a request that stores
// nothing, counted as rejected for reason.
func reject(w http.ResponseWriter, status int, msg, reason string) (outcome, why string) {
	httpserver.WriteError(w, status, msg)
	return "rejected", reason
}

// readBody reads the body, at most MaxBodyBytes. When it cannot, it
// returns the status to answer (413, 408 or 400), with a message and a
// reason for the metrics.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) (body []byte, status int, msg, reason string) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.maxBody))
	if err == nil {
		return body, 0, "", ""
	}
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, http.StatusRequestEntityTooLarge, fmt.Sprintf("body exceeds %d bytes", h.maxBody), "too_large"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		// The body did not arrive within the read timeout: nothing is
		// stored, and 408 tells the sender to send it again.
		return nil, http.StatusRequestTimeout, "body not received within the read timeout; send it again", "read_timeout"
	}
	return nil, http.StatusBadRequest, "reading body failed", "read_error"
}

// event builds the event of a verified request, or says why its input can
// never be stored: the sender's error (400), not one to retry.
func (h *Handler) event(r *http.Request, src Source, body []byte, signedID string, start time.Time, log zerolog.Logger) (*webhook.Event, string) {
	res, err := src.Extractor.Extract(extract.Input{Header: r.Header, Body: body, SignedID: signedID, ReceivedAt: start})
	if err != nil {
		return nil, err.Error()
	}
	if res.OrderingIgnored != "" {
		log.Warn().Str("reason", res.OrderingIgnored).Str("event_type", res.EventType).
			Msg("event's version is further in the future than the source's tolerance: stored without ordering")
		h.metrics.orderingIgnored.WithLabelValues(src.Name, res.OrderingIgnored).Inc()
	}
	if key := webhook.RoutingKey(src.Name, res.EventType); len(key) > maxRoutingKey {
		// RabbitMQ refuses longer routing keys: stored, it could never be
		// published.
		return nil, fmt.Sprintf("event type too long: %q.<event type> must fit %d bytes", src.Name, maxRoutingKey)
	}
	contentType := r.Header.Get("Content-Type")
	if msg := contentTypeProblem(contentType); msg != "" {
		return nil, msg
	}
	headers, dropped := storedHeaders(r.Header, src.Verifier)
	if len(dropped) > 0 {
		log.Debug().Strs("headers", dropped).Msg("left header values that are not UTF-8 out of the stored headers")
	}
	ev := &webhook.Event{
		ID:             uuid.Must(uuid.NewV7()),
		Source:         src.Name,
		IdempotencyKey: res.IdempotencyKey,
		EventType:      res.EventType,
		ContentType:    contentType,
		Headers:        headers,
		Body:           body,
		ReceivedAt:     start,

		OrderingResource:   res.Ordering.Resource,
		OrderingVersion:    res.Ordering.Version,
		OrderingVersionNum: res.Ordering.VersionNum,
	}
	if src.DedupeBody {
		sum := sha256.Sum256(body)
		ev.BodySHA256 = sum[:]
	}
	return ev, ""
}

// commit stores ev with its outbox row, in a batch with the requests that
// arrive meanwhile (group commit), and answers 200 once committed; 503
// when it was not, so the sender retries; 400 when Postgres refused the
// event's data, which no retry would change. The batch is not bound to the
// request's context: a sender hanging up must not abort a commit half-way
// (the outcome would be unknown to both sides); the store timeout bounds it.
func (h *Handler) commit(w http.ResponseWriter, r *http.Request, ev *webhook.Event, log zerolog.Logger) (outcome, reason string) {
	var routing Routing
	if h.route != nil {
		routing = h.route(r.Context(), ev)
		h.metrics.filtered(routing, log)
	}
	routes := routing.Routes
	var span trace.Span
	if h.tracer != nil {
		_, span = h.tracer.Start(r.Context(), "store event", trace.WithAttributes(
			tracing.AttrEventID.String(ev.ID.String()), attribute.Int("hookrelay.routes", len(routes))))
	}
	// The wall clock, not h.now: the deadline bounds real waits.
	a := h.batcher.storeOne(webhook.Insert{Event: ev, Routes: routes, Addressed: routing.Addressed}, time.Now().Add(h.storeTimeout))
	if span != nil {
		span.SetAttributes(attribute.Int("hookrelay.batch.size", a.batch), attribute.Bool("hookrelay.duplicate", a.duplicate))
		if a.id != uuid.Nil && a.duplicate {
			span.SetAttributes(attribute.String("hookrelay.duplicate_of", a.id.String()))
		}
		if a.err != nil {
			span.RecordError(a.err)
			span.SetStatus(codes.Error, "not stored")
		}
		span.End()
	}
	if a.refused != "" {
		log.Warn().Err(a.err).Msg("storage refused the event")
		return reject(w, http.StatusBadRequest, "event cannot be stored: "+a.refused, "storage_refused")
	}
	if a.err != nil {
		log.Error().Err(a.err).Msg("storing event")
		httpserver.WriteError(w, http.StatusServiceUnavailable, "storage unavailable, retry later")
		return "error", "storage"
	}
	id, dup := a.id, a.duplicate
	httpserver.WriteJSON(w, http.StatusOK, Response{ID: id, Duplicate: dup})
	if dup {
		log.Debug().Stringer("event_id", id).Msg("duplicate event")
		return "duplicate", ""
	}
	log.Debug().Stringer("event_id", id).Str("event_type", ev.EventType).Msg("event stored")
	return "accepted", ""
}

// verify runs src's verifier on r, in a span when tracing.
func (h *Handler) verify(ctx context.Context, src Source, r *signature.Request) (signedID string, err error) {
	if h.tracer == nil {
		return verify(src.Verifier, r)
	}
	_, span := h.tracer.Start(ctx, "verify signature", trace.WithAttributes(attribute.String("hookrelay.source", src.Name)))
	defer span.End()
	signedID, err = verify(src.Verifier, r)
	if err != nil {
		var ve *signature.VerifyError
		if errors.As(err, &ve) {
			// The sender's mistake, not a secret: the reason is what the
			// 401 answers.
			span.SetAttributes(attribute.String("hookrelay.rejected", ve.Reason))
		}
		span.SetStatus(codes.Error, "signature not verified")
	}
	return signedID, err
}

// verify runs v on r and returns the message id its signature covers, ""
// when v's scheme signs none.
func verify(v signature.Verifier, r *signature.Request) (signedID string, err error) {
	if iv, ok := v.(signature.IDVerifier); ok {
		return iv.VerifyID(r)
	}
	return "", v.Verify(r)
}

// maxContentType is AMQP's limit on a short string: the Content-Type is
// published as the message's content-type property, and a longer one could
// be stored but never published.
const maxContentType = 255

// contentTypeProblem says why ct cannot be stored and published, or "".
// It must be printable ASCII (a tab allowed): Postgres text refuses invalid
// UTF-8, and no media type needs more. Go's server has already refused other
// control bytes in any header.
func contentTypeProblem(ct string) string {
	if len(ct) > maxContentType {
		return fmt.Sprintf("Content-Type is longer than %d bytes", maxContentType)
	}
	for i := 0; i < len(ct); i++ {
		if c := ct[i]; (c < ' ' && c != '\t') || c > '~' {
			return "Content-Type must be printable ASCII"
		}
	}
	return ""
}

// storedHeaders returns the request headers to store with the event: without
// credentials (those of credentialHeaders and the verifier's secret
// headers), and without values that are not valid UTF-8 or hold a NUL byte,
// which Postgres' jsonb cannot hold as sent. Go's HTTP server refuses NUL and
// other control bytes itself, but passes bytes above 0x7f; storing such a
// value would alter it, and a stored header is either what was sent or
// absent. dropped names the headers that lost a value.
func storedHeaders(h http.Header, v signature.Verifier) (stored http.Header, dropped []string) {
	stored = h.Clone()
	for _, k := range credentialHeaders {
		stored.Del(k)
	}
	if sh, ok := v.(interface{ SecretHeaders() []string }); ok {
		for _, k := range sh.SecretHeaders() {
			stored.Del(k)
		}
	}
	for k, vals := range stored {
		kept := vals[:0]
		for _, val := range vals {
			if utf8.ValidString(val) && strings.IndexByte(val, 0) < 0 {
				kept = append(kept, val)
			}
		}
		if len(kept) == len(vals) {
			continue
		}
		dropped = append(dropped, k)
		if len(kept) == 0 {
			delete(stored, k)
		} else {
			stored[k] = kept
		}
	}
	sort.Strings(dropped)
	return stored, dropped
}

// Metrics are the ingest counters.
type Metrics struct {
	requests  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	batchSize prometheus.Histogram
	fallbacks prometheus.Counter
	queued    prometheus.Gauge
	// orderingIgnored counts accepted events whose ordering was left out.
	orderingIgnored *prometheus.CounterVec
	// filteredTotal counts events a route's filter did not take.
	filteredTotal *prometheus.CounterVec
	// activity, when set, counts each request for the console's overview.
	activity *activity.Counter
	// ruleLogs spaces out the log lines of filters that fail, per route.
	ruleLogs sync.Map // route -> *time.Time of its last line
}

// CountActivity also counts each request in c (per minute, in Postgres).
func (m *Metrics) CountActivity(c *activity.Counter) { m.activity = c }

// NewMetrics registers the ingest metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookrelay_ingest_requests_total",
			Help: "Webhook requests by source, outcome (accepted, duplicate, rejected, error) and reason.",
		}, []string{"source", "outcome", "reason"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "hookrelay_ingest_duration_seconds",
			Help: "Time from request to response, by source and outcome.",
			// Ingest is one insert transaction: most answers take milliseconds.
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"source", "outcome"}),
	}
	m.batchSize = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "hookrelay_ingest_batch_size",
		Help: "Requests stored per group-commit batch (one statement, one transaction).",
		// Powers of two up to receiver.batch_size's largest sensible values.
		Buckets: prometheus.ExponentialBuckets(1, 2, 11),
	})
	m.fallbacks = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "hookrelay_ingest_batch_fallbacks_total",
		Help: "Batches in which Postgres refused a row's data, so their requests were stored one by one.",
	})
	m.queued = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "hookrelay_ingest_batch_queue",
		Help: "Requests waiting for a group-commit batch to take them.",
	})
	m.orderingIgnored = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hookrelay_ingest_ordering_ignored_total",
		Help: "Events stored without their resource's version, by source and reason (future_version: a time further ahead than the source's tolerance, which would have silenced the resource's later events).",
	}, []string{"source", "reason"})
	m.filteredTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hookrelay_route_filtered_total",
		Help: "Events a route's bindings matched that its filter did not take, by route and result (rejected: the filter yielded false; error: it could not judge the event, an error of the expression or past its cost). Neither makes a pair.",
	}, []string{"route", "result"})
	reg.MustRegister(m.requests, m.duration, m.batchSize, m.fallbacks, m.queued, m.orderingIgnored, m.filteredTotal)
	return m
}

// filtered counts the routes that did not take an event, and logs the
// filters that could not judge it: at most one line a route every
// ruleLogEvery, with the number of failures since, so a filter that fails
// on every event cannot flood the log.
func (m *Metrics) filtered(r Routing, log zerolog.Logger) {
	for _, name := range r.Filtered {
		m.filteredTotal.WithLabelValues(name, "rejected").Inc()
		m.activity.Add(activity.Delivery, name, "filtered", "rejected")
	}
	for _, f := range r.Failed {
		m.filteredTotal.WithLabelValues(f.Route, "error").Inc()
		m.activity.Add(activity.Delivery, f.Route, "filtered", "error")
		now := time.Now()
		last, _ := m.ruleLogs.LoadOrStore(f.Route, &ruleLog{})
		if l := last.(*ruleLog); l.due(now) {
			log.Warn().Str("route", f.Route).Err(f.Err).Int64("failures_since_last_line", l.take()).
				Msg("the route's filter could not judge an event: no pair made (counted in hookrelay_route_filtered_total{result=\"error\"})")
		}
	}
}

// ruleLogEvery spaces out a route's filter-failure log lines.
const ruleLogEvery = 10 * time.Second

// ruleLog is the log state of one route's filter failures.
type ruleLog struct {
	mu     sync.Mutex
	last   time.Time
	missed int64
}

// due counts a failure and says whether it gets a line now.
func (l *ruleLog) due(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.missed++
	if now.Sub(l.last) < ruleLogEvery {
		return false
	}
	l.last = now
	return true
}

// take returns the failures counted since the last line, and restarts.
func (l *ruleLog) take() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.missed
	l.missed = 0
	return n
}

// Routing is where an event goes, as RouteFunc says.
type Routing struct {
	// Routes get a pair each.
	Routes []string
	// Addressed are the routes of Routes with a filter: the event's copy
	// is addressed to them.
	Addressed []string
	// Filtered are routes whose bindings matched but whose filter said no;
	// Failed those whose filter could not judge the event. No pair for
	// either; both are counted.
	Filtered []string
	Failed   []RuleFailure
}

// RuleFailure is a filter that could not judge an event.
type RuleFailure struct {
	Route string
	Err   error
}
