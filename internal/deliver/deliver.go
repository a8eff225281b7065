// Package deliver is the dispatcher's handler: for one message of a route
// queue it locks the (event, route) delivery in Postgres, skips it if it was
// already delivered, POSTs the event to the route's URL with Standard
// Webhooks headers, records the attempt, and then either is done (2xx),
// republishes the message to the next retry tier, or parks it in the route's
// dead-letter queue. The caller acks only when Handle returns nil, so every
// outcome is stored (and any republish confirmed) before the ack.
package deliver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/backoff"
	"github.com/hookrelay/hookrelay/internal/signature"
	"github.com/hookrelay/hookrelay/internal/webhook"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"
)

// Lock is a locked (event, route) delivery.
type Lock interface {
	State() webhook.DeliveryState
	// Gen is the generation of the pair's current copy; only a message of
	// that generation is delivered.
	Gen() int64
	// Restart starts a new attempt series for a dead pair (its dead letter
	// was moved back by an operator) and returns the new generation; the
	// lock stays held.
	Restart(ctx context.Context) (int64, error)
	// Record stores the attempt, releases the lock, and returns the pair's
	// generation afterwards (a retry's copy is a new generation).
	Record(ctx context.Context, a *webhook.Attempt) (int64, error)
	// Release gives the lock back without recording.
	Release(ctx context.Context) error
}

// ErrEventMissing is returned by a Store when the event no longer exists
// (purged): no delivery can be recorded for it, ever.
var ErrEventMissing = errors.New("event not in the database")

// Store is what delivery needs from Postgres.
type Store interface {
	DeliveryLock(ctx context.Context, eventID uuid.UUID, route string) (Lock, error)
	// AttemptRecord stores an attempt without a held lock (the lock's
	// connection was lost during the attempt). The pair's state changes
	// only if it is still at a.Gen: current says so; gen is the pair's
	// generation afterwards.
	AttemptRecord(ctx context.Context, a *webhook.Attempt) (gen int64, current bool, err error)
}

// Publisher publishes retries and dead letters and waits, bounded, for the
// broker's confirm: nil means confirmed and routed.
type Publisher interface {
	Publish(ctx context.Context, exchange, key string, p amqp.Publishing) error
	// Blocked returns nil while the broker accepts publishes. While it
	// blocks them (a memory or disk alarm), it returns a channel that is
	// closed when the block lifts.
	Blocked() <-chan struct{}
}

// Route is one destination.
type Route struct {
	Name        string
	URL         string
	Timeout     time.Duration
	Headers     map[string]string
	NoRetry     map[int]bool
	MaxAttempts int
	// SigningKeys sign each delivery; every key adds a signature.
	SigningKeys [][]byte
	// Queue is the route queue, the routing key retries come back with.
	Queue string
	// DeadQueue receives what cannot be delivered.
	DeadQueue string
}

// Tier is a retry tier.
type Tier struct {
	// Name labels the tier in metrics, e.g. "10s".
	Name     string
	Delay    time.Duration
	Exchange string
}

// Config configures a Handler.
type Config struct {
	Routes []Route
	// Tiers are ordered by attempt: a failed attempt n goes to tier n-1 (the
	// last tier repeats).
	Tiers     []Tier
	Store     Store
	Publisher Publisher
	Client    *http.Client
	Metrics   *Metrics
	Logger    zerolog.Logger
	// NowFunc is the clock; time.Now when nil.
	NowFunc func() time.Time
	// StoreRetryFor bounds how long a Postgres failure is retried while the
	// message is held unacked. Holding does not count as a redelivery, so a
	// Postgres outage does not push messages toward the delivery limit; it
	// stays well under RabbitMQ's 30-minute consumer timeout. Default 10m.
	StoreRetryFor time.Duration
	// PublishHoldFor bounds how long a message whose outcome needs a
	// publish is held while the broker blocks publishing (a resource
	// alarm): no new POST and no requeue loop meanwhile. After it, the
	// message is requeued. Default 10m, well under RabbitMQ's 30-minute
	// consumer timeout.
	PublishHoldFor time.Duration
}

// Handler delivers messages.
type Handler struct {
	cfg    Config
	routes map[string]*Route
	logger zerolog.Logger
	now    func() time.Time
}

// New returns a Handler.
func New(cfg Config) (*Handler, error) {
	if cfg.Store == nil || cfg.Publisher == nil || cfg.Metrics == nil || len(cfg.Tiers) == 0 {
		return nil, errors.New("deliver: Store, Publisher, Metrics and at least one Tier are required")
	}
	if cfg.Client == nil {
		cfg.Client = NewClient()
	}
	if cfg.StoreRetryFor == 0 {
		cfg.StoreRetryFor = 10 * time.Minute
	}
	if cfg.PublishHoldFor == 0 {
		cfg.PublishHoldFor = 10 * time.Minute
	}
	h := &Handler{cfg: cfg, routes: map[string]*Route{}, logger: cfg.Logger.With().Str("component", "deliver").Logger(), now: cfg.NowFunc}
	if h.now == nil {
		h.now = time.Now
	}
	for i := range cfg.Routes {
		r := &cfg.Routes[i]
		if r.MaxAttempts < 1 || r.Timeout <= 0 || len(r.SigningKeys) == 0 {
			return nil, fmt.Errorf("deliver: route %q needs MaxAttempts, Timeout and a signing key", r.Name)
		}
		h.routes[r.Name] = r
	}
	return h, nil
}

// NewClient returns the HTTP client for deliveries: it does not follow
// redirects (a 3xx is a failed attempt, its Location recorded in the
// response headers), bounds connection setup, and reads at most
// MaxResponseHeaderBytes of response headers.
func NewClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	tr.ResponseHeaderTimeout = 0 // each request has its own deadline
	tr.MaxResponseHeaderBytes = MaxResponseHeaderBytes
	return &http.Client{
		Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// Message is a route queue message as the dispatcher reads it.
type Message struct {
	EventID        uuid.UUID
	Source         string
	EventType      string
	ContentType    string
	Body           []byte
	Attempt        int
	FirstAttemptAt time.Time
	// Gen is the generation of this copy (0 for an event's first copy).
	Gen int64
	// WasDead is set on a dead letter that an operator moved back to the
	// route queue (it carries the route header only dead letters have).
	WasDead bool
}

// Parse reads a Message from a delivery's properties and headers.
func Parse(d amqp.Delivery) (Message, error) {
	m := Message{ContentType: d.ContentType, Body: d.Body, Attempt: 1}
	id := headerString(d.Headers, webhook.HeaderEventID)
	if id == "" {
		id = d.MessageId
	}
	var err error
	if m.EventID, err = uuid.Parse(id); err != nil {
		return m, fmt.Errorf("message has no valid event id")
	}
	m.Source = headerString(d.Headers, webhook.HeaderSource)
	m.EventType = headerString(d.Headers, webhook.HeaderEventType)
	if n, ok := headerInt(d.Headers, webhook.HeaderAttempt); ok && n >= 1 {
		m.Attempt = n
	}
	if n, ok := headerInt(d.Headers, webhook.HeaderGen); ok && n >= 0 {
		m.Gen = int64(n)
	}
	if s := headerString(d.Headers, webhook.HeaderFirstAttemptAt); s != "" {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			m.FirstAttemptAt = t
		}
	}
	if _, wasDead := d.Headers[HeaderRoute]; wasDead {
		// Only dead letters carry the route header: this one was moved back
		// by an operator (the management UI's "Move messages" keeps every
		// header). It starts a fresh series instead of going straight back
		// to the dead-letter queue.
		m.Attempt, m.FirstAttemptAt, m.WasDead = 1, time.Time{}, true
	}
	return m, nil
}

func headerString(h amqp.Table, key string) string {
	if s, ok := h[key].(string); ok {
		return s
	}
	return ""
}

func headerInt(h amqp.Table, key string) (int, bool) {
	switch v := h[key].(type) {
	case int32:
		return int(v), true
	case int64:
		return int(v), true
	case int:
		return v, true
	case string:
		n, err := strconv.Atoi(v)
		return n, err == nil
	}
	return 0, false
}

// Handle delivers one message of route's queue. It returns nil when the
// outcome is stored and any republish confirmed: the caller then acks. Any
// error means "do not ack". Waits for a dependency (Postgres down, the
// broker blocking publishes) end early when stopping closes. Cancelling ctx
// aborts the delivery: an HTTP attempt in flight is cancelled and nothing
// is recorded for it.
func (h *Handler) Handle(ctx context.Context, route string, d amqp.Delivery, stopping <-chan struct{}) error {
	r, ok := h.routes[route]
	if !ok {
		return fmt.Errorf("no route %q", route)
	}
	log := h.logger.With().Str("route", route).Logger()
	msg, err := Parse(d)
	if err != nil {
		// Nothing to deliver or record against: park it for an operator.
		log.Error().Err(err).Str("message_id", d.MessageId).Msg("malformed message; dead-lettering")
		return h.publishDead(ctx, stopping, log, r, d, Message{Body: d.Body, ContentType: d.ContentType, Attempt: 1}, &webhook.Attempt{
			Route: route, Number: 0, StartedAt: h.now(), Error: err.Error(),
		}, "malformed")
	}
	log = log.With().Stringer("event_id", msg.EventID).Int("attempt", msg.Attempt).Logger()

	var lock Lock
	err = h.retryStore(ctx, stopping, log, "locking delivery", func() (err error) {
		lock, err = h.cfg.Store.DeliveryLock(ctx, msg.EventID, route)
		return err
	})
	if errors.Is(err, ErrEventMissing) {
		// Retrying cannot help, and delivering without a record would
		// break the at-most-once promise: park it for an operator.
		log.Error().Err(err).Msg("event purged; dead-lettering")
		return h.publishDead(ctx, stopping, log, r, d, msg, &webhook.Attempt{
			Route: route, Number: msg.Attempt, StartedAt: h.now(), Error: "event purged from the database",
		}, "event_missing")
	}
	if err != nil {
		return err
	}
	if done, err := h.current(ctx, stopping, log, r, d, &msg, lock); done || err != nil {
		return err
	}

	h.cfg.Metrics.inFlight.WithLabelValues(route).Inc()
	attempt, retryAfter := h.post(ctx, r, msg)
	h.cfg.Metrics.inFlight.WithLabelValues(route).Dec()
	if err := ctx.Err(); err != nil {
		// Aborted (shutdown timeout): the attempt's result, if any, is not
		// known to be the destination's answer. Record nothing; the message
		// is not acked, so it is delivered again after the restart.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if rerr := lock.Release(rctx); rerr != nil {
			log.Warn().Err(rerr).Msg("releasing delivery lock")
		}
		return fmt.Errorf("delivery aborted: %w", err)
	}
	h.cfg.Metrics.duration.WithLabelValues(route).Observe(attempt.Duration.Seconds())

	attempt.Gen = msg.Gen
	tier, deadReason := -1, ""
	switch {
	case attempt.Status >= 200 && attempt.Status < 300:
		attempt.Outcome = webhook.StateDelivered
	case attempt.Status == http.StatusGone || r.NoRetry[attempt.Status]:
		attempt.Outcome, deadReason = webhook.StateDead, "no_retry_status"
	case msg.Attempt >= r.MaxAttempts:
		attempt.Outcome, deadReason = webhook.StateDead, "max_attempts"
	default:
		attempt.Outcome = webhook.StateRetrying
		tier = h.tierFor(msg.Attempt, retryAfter)
		attempt.RetryIn = h.cfg.Tiers[tier].Delay
	}

	gen, err := lock.Record(ctx, attempt)
	if err != nil {
		// The lock's connection failed during the attempt: record in a
		// transaction of its own.
		log.Warn().Err(err).Msg("recording attempt failed; retrying")
		var current bool
		err = h.retryStore(ctx, stopping, log, "recording attempt", func() (err error) {
			gen, current, err = h.cfg.Store.AttemptRecord(ctx, attempt)
			return err
		})
		if err != nil {
			return err
		}
		if !current && attempt.Outcome != webhook.StateDelivered {
			// Another copy moved the pair on meanwhile: it owns what
			// comes next.
			h.cfg.Metrics.outcome(route, "superseded")
			log.Info().Msg("pair moved on while recording; this copy is done")
			return nil
		}
	}

	switch attempt.Outcome {
	case webhook.StateRetrying:
		msg.Gen = gen
		if err := h.publishRetry(ctx, stopping, log, r, msg, tier); err != nil {
			return err
		}
		h.cfg.Metrics.outcome(route, "retry_scheduled")
		h.cfg.Metrics.retries.WithLabelValues(route, h.cfg.Tiers[tier].Name).Inc()
		log.Info().Int("status", attempt.Status).Str("error", attempt.Error).Dur("retry_in", h.cfg.Tiers[tier].Delay).Msg("delivery failed; retry scheduled")
	case webhook.StateDead:
		if err := h.publishDead(ctx, stopping, log, r, d, msg, attempt, deadReason); err != nil {
			return err
		}
		h.cfg.Metrics.outcome(route, "dead")
		log.Warn().Int("status", attempt.Status).Str("error", attempt.Error).Msg("delivery dead-lettered")
	default:
		h.cfg.Metrics.outcome(route, "delivered")
		log.Debug().Int("status", attempt.Status).Msg("delivered")
	}
	return nil
}

// current decides, with the pair locked, whether msg is the copy to
// deliver now. It returns done (the message is handled, the lock released)
// for a pair already delivered, for a stale copy (another generation: a
// replay, a reconciled resend or a retry replaced it), and for a pair whose
// dead-lettering this very copy started but did not finish (its dead letter
// is published again, without a POST). A dead letter an operator moved back
// starts a new series and is delivered.
func (h *Handler) current(ctx context.Context, stopping <-chan struct{}, log zerolog.Logger, r *Route, d amqp.Delivery, msg *Message, lock Lock) (done bool, err error) {
	release := func() {
		if err := lock.Release(ctx); err != nil {
			log.Warn().Err(err).Msg("releasing delivery lock")
		}
	}
	state, gen := lock.State(), lock.Gen()
	switch {
	case state == webhook.StateDelivered:
		release()
		h.cfg.Metrics.outcome(r.Name, "skipped_duplicate")
		log.Debug().Msg("already delivered; skipping")
		return true, nil
	case msg.WasDead && state == webhook.StateDead && msg.Gen == gen:
		ng, err := lock.Restart(ctx)
		if err != nil {
			return true, err
		}
		log.Info().Int64("gen", ng).Msg("dead letter moved back by an operator; starting a new series")
		msg.Gen = ng
		return false, nil
	case msg.Gen != gen:
		release()
		h.cfg.Metrics.outcome(r.Name, "superseded")
		log.Info().Int64("gen", msg.Gen).Int64("current_gen", gen).Msg("stale copy of the pair; dropped without a POST")
		return true, nil
	case state == webhook.StateDead:
		// This copy was dead-lettered in Postgres, but its dead letter was
		// not confirmed before the message came back.
		release()
		return true, h.publishDead(ctx, stopping, log, r, d, *msg, &webhook.Attempt{
			Route: r.Name, Number: msg.Attempt, StartedAt: h.now(), Error: "dead-lettered before; dead letter published again",
		}, "max_attempts")
	}
	return false, nil
}

// retryStore runs op until it succeeds, retrying with backoff for up to
// StoreRetryFor while the message stays unacked, or until stop closes.
func (h *Handler) retryStore(ctx context.Context, stop <-chan struct{}, log zerolog.Logger, what string, op func() error) error {
	err := op()
	if err == nil || errors.Is(err, ErrEventMissing) {
		return err // done, or permanent
	}
	deadline := time.Now().Add(h.cfg.StoreRetryFor)
	retry := backoff.Backoff{Min: 100 * time.Millisecond, Max: 10 * time.Second}
	for time.Now().Before(deadline) {
		wait := retry.Next()
		log.Warn().Err(err).Dur("retry_in", wait).Msgf("%s failed; holding the message", what)
		t := time.NewTimer(wait)
		select {
		case <-stop:
			t.Stop()
			return fmt.Errorf("%s: %w (shutting down)", what, err)
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-t.C:
		}
		if err = op(); err == nil || errors.Is(err, ErrEventMissing) {
			return err
		}
	}
	return fmt.Errorf("%s: %w", what, err)
}

// publish publishes and waits for the confirm. While the broker blocks
// publishing it holds the message (unacked, no new POST) until the block
// lifts, for up to PublishHoldFor, and publishes then; a publish already
// sent when the block began waits for its confirm within the same bound.
// stop ends a hold early, ctx any wait. Other failures return at once.
func (h *Handler) publish(ctx context.Context, stop <-chan struct{}, log zerolog.Logger, exchange, key string, p amqp.Publishing) error {
	pub := h.cfg.Publisher
	hctx, cancel := context.WithTimeout(ctx, h.cfg.PublishHoldFor)
	defer cancel()
	held := false
	for {
		lifted := pub.Blocked()
		if lifted == nil {
			err := pub.Publish(hctx, exchange, key, p)
			if err == nil || pub.Blocked() == nil {
				return err
			}
			continue // the block began meanwhile: hold
		}
		if !held {
			held = true
			log.Warn().Dur("hold_for", h.cfg.PublishHoldFor).Msg("rabbitmq blocks publishing; holding the message")
		}
		select {
		case <-lifted:
		case <-stop:
			return errors.New("rabbitmq blocks publishing (shutting down)")
		case <-hctx.Done():
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("rabbitmq blocks publishing: %w", err)
			}
			return fmt.Errorf("rabbitmq blocked publishing for longer than %s", h.cfg.PublishHoldFor)
		}
	}
}

// tierFor picks the tier after failed attempt n: tier n-1 (the last one
// repeats), or later when the destination asked for a longer pause with
// Retry-After.
func (h *Handler) tierFor(n int, retryAfter time.Duration) int {
	last := len(h.cfg.Tiers) - 1
	tier := min(n-1, last)
	for tier < last && h.cfg.Tiers[tier].Delay < retryAfter {
		tier++
	}
	return tier
}

const maxBodySnippet = 1024

// Limits on a destination's response headers. A destination (or whatever
// answers at its address) can send megabytes of headers; what the relay
// reads is bounded by MaxResponseHeaderBytes (the attempt fails with an
// error beyond it), and what it stores per attempt by MaxStoredHeaderBytes
// of names and values: enough for the headers an operator reads (status
// line companions like Content-Type, Location, Retry-After, a request id),
// small enough that a chatty destination cannot bloat delivery_attempts.
const (
	MaxResponseHeaderBytes = 64 << 10
	MaxStoredHeaderBytes   = 4 << 10
	// maxStoredHeaderValue cuts a single long value (a cookie, a CSP).
	maxStoredHeaderValue = 512
	// HeaderHeadersTruncated is added to stored response headers when some
	// were dropped or cut; its value says how many.
	HeaderHeadersTruncated = "X-Hookrelay-Headers-Truncated"
)

// post makes one HTTP attempt and reports it, with the Retry-After delay
// asked for by a 429 or 503.
func (h *Handler) post(ctx context.Context, r *Route, msg Message) (*webhook.Attempt, time.Duration) {
	start := h.now()
	a := &webhook.Attempt{EventID: msg.EventID, Route: r.Name, Number: msg.Attempt, StartedAt: start}
	ctx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL, strings.NewReader(string(msg.Body)))
	if err != nil {
		a.Error = "building request: " + err.Error()
		return a, 0
	}
	for k, v := range r.Headers {
		req.Header.Set(k, v)
	}
	contentType := msg.ContentType
	if contentType == "" {
		contentType = "application/octet-stream"
	}
	id := msg.EventID.String()
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("User-Agent", "hookrelay")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(start.Unix(), 10))
	req.Header.Set("webhook-signature", signature.SignStandard(r.SigningKeys, id, start, msg.Body))
	req.Header.Set("X-Hookrelay-Source", msg.Source)
	req.Header.Set("X-Hookrelay-Event-Type", msg.EventType)
	req.Header.Set("X-Hookrelay-Attempt", strconv.Itoa(msg.Attempt))

	resp, err := h.cfg.Client.Do(req)
	a.Duration = time.Since(start)
	if err != nil {
		a.Error = describeError(err, r.Timeout)
		return a, 0
	}
	defer resp.Body.Close()
	a.Status = resp.StatusCode
	a.ResponseHeaders = capHeaders(resp.Header)
	// The status decides the outcome; the body is kept for the operator, so
	// a failure to read it is recorded with a failed attempt, not fatal.
	body, readErr := io.ReadAll(io.LimitReader(resp.Body, maxBodySnippet))
	a.ResponseBody = body
	// Read a little more so the connection can be reused; a huge body is
	// cut off by Close instead. An error here only costs the reuse.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	a.Duration = time.Since(start)
	if a.Status < 200 || a.Status >= 300 {
		a.Error = "HTTP " + strconv.Itoa(a.Status)
		if readErr != nil {
			a.Error += " (reading the response: " + describeError(readErr, r.Timeout) + ")"
		}
	}
	var retryAfter time.Duration
	if a.Status == http.StatusTooManyRequests || a.Status == http.StatusServiceUnavailable {
		retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), h.now())
	}
	return a, retryAfter
}

// capHeaders returns what is stored of a response's headers: at most
// MaxStoredHeaderBytes of names and values, shortest headers first (the
// ones an operator reads are short; a filler or a cookie is long), each
// value cut to maxStoredHeaderValue bytes. When anything was dropped or
// cut, HeaderHeadersTruncated says how much; its own size is reserved in
// the budget.
func capHeaders(h http.Header) http.Header {
	type field struct {
		name  string
		value string
	}
	var fields []field
	for k, vs := range h {
		for _, v := range vs {
			fields = append(fields, field{k, v})
		}
	}
	// Shortest first, then by name and value, so what is kept does not
	// depend on map order.
	slices.SortFunc(fields, func(a, b field) int {
		if n := cmp.Compare(len(a.name)+len(a.value), len(b.name)+len(b.value)); n != 0 {
			return n
		}
		if n := cmp.Compare(a.name, b.name); n != 0 {
			return n
		}
		return cmp.Compare(a.value, b.value)
	})
	const reserve = len(HeaderHeadersTruncated) + 160 // room for the marker
	out := http.Header{}
	size, dropped, cut := 0, 0, 0
	for _, f := range fields {
		v := f.value
		if len(v) > maxStoredHeaderValue {
			v = strings.ToValidUTF8(v[:maxStoredHeaderValue], "") + "…"
			cut++
		}
		if size+len(f.name)+len(v) > MaxStoredHeaderBytes-reserve {
			dropped++
			continue
		}
		size += len(f.name) + len(v)
		out[f.name] = append(out[f.name], v)
	}
	if dropped > 0 || cut > 0 {
		out.Set(HeaderHeadersTruncated, fmt.Sprintf("%d of %d header value(s) dropped, %d cut to %d bytes: %d bytes of headers received, at most %d stored",
			dropped, len(fields), cut, maxStoredHeaderValue, headerSize(h), MaxStoredHeaderBytes))
	}
	return out
}

func headerSize(h http.Header) int {
	n := 0
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v)
		}
	}
	return n
}

// describeError names a network failure without the URL (which may carry
// credentials in its query).
func describeError(err error, timeout time.Duration) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return fmt.Sprintf("timeout after %s", timeout)
	}
	return err.Error()
}

// parseRetryAfter reads delta-seconds or an HTTP date; 0 when absent or
// invalid.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

func (h *Handler) publishRetry(ctx context.Context, stop <-chan struct{}, log zerolog.Logger, r *Route, msg Message, tier int) error {
	first := msg.FirstAttemptAt
	if first.IsZero() {
		first = h.now()
	}
	id := msg.EventID.String()
	err := h.publish(ctx, stop, log, h.cfg.Tiers[tier].Exchange, r.Queue, amqp.Publishing{
		DeliveryMode: amqp.Persistent,
		ContentType:  msg.ContentType,
		MessageId:    id,
		Type:         msg.EventType,
		AppId:        "hookrelay",
		Timestamp:    h.now(),
		Headers: amqp.Table{
			webhook.HeaderEventID:        id,
			webhook.HeaderSource:         msg.Source,
			webhook.HeaderEventType:      msg.EventType,
			webhook.HeaderAttempt:        int32(msg.Attempt + 1),
			webhook.HeaderFirstAttemptAt: first.UTC().Format(time.RFC3339Nano),
			webhook.HeaderGen:            msg.Gen,
		},
		Body: msg.Body,
	})
	if err != nil {
		return fmt.Errorf("scheduling retry: %w", err)
	}
	return nil
}

// Dead-letter headers an operator reads in the management UI.
const (
	HeaderRoute         = "x-hookrelay-route"
	HeaderAttempts      = "x-hookrelay-attempts"
	HeaderLastStatus    = "x-hookrelay-last-status"
	HeaderLastError     = "x-hookrelay-last-error"
	HeaderLastAttemptAt = "x-hookrelay-last-attempt-at"
	// HeaderDeadReason is max_attempts, no_retry_status (410 or a route's
	// no_retry_statuses), malformed or event_missing (purged). RabbitMQ's own parking for the
	// delivery limit shows in x-death instead.
	HeaderDeadReason = "x-hookrelay-dead-reason"
)

func (h *Handler) publishDead(ctx context.Context, stop <-chan struct{}, log zerolog.Logger, r *Route, d amqp.Delivery, msg Message, a *webhook.Attempt, reason string) error {
	first := msg.FirstAttemptAt
	if first.IsZero() {
		first = a.StartedAt
	}
	// Our own headers only: x-death from the retry tiers' TTL hops would
	// tell an operator "expired", which is not why it is dead.
	headers := amqp.Table{}
	for k, v := range d.Headers {
		if strings.HasPrefix(k, "x-hookrelay-") {
			headers[k] = v
		}
	}
	if msg.EventID != uuid.Nil {
		headers[webhook.HeaderEventID] = msg.EventID.String()
	}
	headers[HeaderRoute] = r.Name
	headers[webhook.HeaderGen] = msg.Gen
	headers[HeaderDeadReason] = reason
	headers[HeaderAttempts] = int32(msg.Attempt)
	headers[HeaderLastStatus] = int32(a.Status)
	headers[HeaderLastError] = a.Error
	headers[webhook.HeaderFirstAttemptAt] = first.UTC().Format(time.RFC3339Nano)
	headers[HeaderLastAttemptAt] = a.StartedAt.UTC().Format(time.RFC3339Nano)
	err := h.publish(ctx, stop, log, "", r.DeadQueue, amqp.Publishing{
		DeliveryMode: amqp.Persistent,
		ContentType:  d.ContentType,
		MessageId:    d.MessageId,
		Type:         d.Type,
		AppId:        "hookrelay",
		Timestamp:    h.now(),
		Headers:      headers,
		Body:         d.Body,
	})
	if err != nil {
		return fmt.Errorf("dead-lettering: %w", err)
	}
	return nil
}
