// Package config loads and validates hookrelay's configuration: a YAML file
// (config.yaml by default) overridden by HOOKRELAY_* environment variables,
// with ${VAR} references expanded from the environment. It is the only
// package that touches viper. Every invalid value is an error that names the
// key (routes[1].bindings[0]: ...); nothing falls back silently to a default.
package config

import (
	"net"
	"net/netip"
	"net/url"
	"time"
)

// Config is the whole configuration shared by receiver, dispatcher and the
// hookrelay CLI.
type Config struct {
	Database   Database   `mapstructure:"database"`
	AMQP       AMQP       `mapstructure:"amqp"`
	Receiver   Receiver   `mapstructure:"receiver"`
	Dispatcher Dispatcher `mapstructure:"dispatcher"`
	Outbox     Outbox     `mapstructure:"outbox"`
	Retry      Retry      `mapstructure:"retry"`
	Log        Log        `mapstructure:"log"`
	Admin      Admin      `mapstructure:"admin"`
	Retention  Retention  `mapstructure:"retention"`
	Reconcile  Reconcile  `mapstructure:"reconcile"`
	Debug      Debug      `mapstructure:"debug"`
	Secrets    Secrets    `mapstructure:"secrets"`
	Tracing    Tracing    `mapstructure:"tracing"`
	TeamRoutes TeamRoutes `mapstructure:"team_routes"`
	Rules      Rules      `mapstructure:"rules"`
	Alerts     Alerts     `mapstructure:"alerts"`
	Sources    []Source   `mapstructure:"sources" validate:"dive"`
	Routes     []Route    `mapstructure:"routes" validate:"dive"`
}

// Database configures the Postgres connection pool.
type Database struct {
	// URL is a postgres:// connection URL. Required.
	URL string `mapstructure:"url" validate:"required,postgres_url"`
	// MigrateURL is what hookrelay migrate connects with: the role that
	// owns the tables. With it set, migrate also creates (when missing)
	// and grants URL's role, which must own nothing: row-level security
	// keeps teams apart only for a role that does not own the tables.
	// Empty: migrate connects with URL (one role for everything; no team
	// but the platform team can then be created).
	MigrateURL string `mapstructure:"migrate_url" validate:"omitempty,postgres_url"`
	// MaxConns is the Postgres pool size of each receiver and of the
	// hookrelay CLI. Default 10. The dispatcher sizes its own pool with
	// dispatcher.max_conns.
	MaxConns int32 `mapstructure:"max_conns" validate:"gte=1,lte=1000"`
	// QueryTimeout bounds each Postgres call of the outbox publisher and
	// the dispatcher (a claim, a delivery lock, a record), so a connection
	// that stops answering fails the call instead of hanging it. Default 5s.
	QueryTimeout time.Duration `mapstructure:"query_timeout" validate:"gt=0"`
}

// AMQP configures the RabbitMQ connection and the names of everything
// hookrelay declares.
type AMQP struct {
	// URL is one broker's amqp:// or amqps:// URL. Set this or URLs, not
	// both.
	URL string `mapstructure:"url" validate:"omitempty,amqp_url"`
	// URLs are the nodes of a cluster, for example
	// [amqp://u:p@rmq1:5672/, amqp://u:p@rmq2:5672/, amqp://u:p@rmq3:5672/].
	// Each connection starts at a random node and moves to the next when
	// its node fails.
	URLs []string `mapstructure:"urls" validate:"dive,amqp_url"`
	// TLS configures amqps:// connections (files are read at start).
	TLS AMQPTLS `mapstructure:"tls"`
	// Prefix starts every exchange and queue name. Default "hookrelay".
	Prefix string `mapstructure:"prefix" validate:"required,amqp_name"`
	// ManagementURL is the management HTTP API, used to apply policies.
	// Without credentials in it, those of the AMQP URL are used. Set this or
	// ManagementURLs; with neither, http://<host>:15672 of each AMQP node.
	ManagementURL string `mapstructure:"management_url" validate:"omitempty,http_url"`
	// ManagementURLs are the management APIs of the cluster's nodes, tried
	// in order until one answers.
	ManagementURLs []string `mapstructure:"management_urls" validate:"dive,http_url"`
	// ConsumerTimeout is the brokers' consumer timeout (RabbitMQ's
	// consumer_timeout): how long a delivery may stay unacked before the
	// broker takes it back (3.x closes the channel, 4.3 cancels a quorum
	// queue's consumer) and requeues it. hookrelay does not read it from
	// the brokers: give theirs. Every route's longest hold (Config.RouteHold)
	// must stay a minute under it, and a delivery that waits for a failing
	// dependency gives its message back before it (Config.HoldBudget).
	// Default 30m, RabbitMQ's.
	ConsumerTimeout time.Duration `mapstructure:"consumer_timeout" validate:"gt=0"`
}

// AMQPTLS names the TLS files for amqps:// brokers; all optional (without
// them amqps:// verifies the broker against the system roots).
type AMQPTLS struct {
	// CAFile is a PEM bundle of the CAs that signed the brokers' certificates.
	CAFile string `mapstructure:"ca_file" validate:"omitempty,file"`
	// CertFile and KeyFile are a client certificate and its key (both or
	// neither).
	CertFile string `mapstructure:"cert_file" validate:"omitempty,file"`
	KeyFile  string `mapstructure:"key_file" validate:"omitempty,file"`
	// ServerName is checked in the brokers' certificates when it differs
	// from the URL's host.
	ServerName string `mapstructure:"server_name"`
}

// Nodes returns the broker URLs: URLs, or URL alone.
func (a AMQP) Nodes() []string {
	if len(a.URLs) > 0 {
		return a.URLs
	}
	if a.URL == "" {
		return nil
	}
	return []string{a.URL}
}

// Management returns the management API URLs: ManagementURLs,
// ManagementURL, or one derived from each AMQP node (http://<host>:15672,
// https://<host>:15671 for amqps).
func (a AMQP) Management() []string {
	if len(a.ManagementURLs) > 0 {
		return a.ManagementURLs
	}
	if a.ManagementURL != "" {
		return []string{a.ManagementURL}
	}
	var out []string
	for _, n := range a.Nodes() {
		u, err := url.Parse(n)
		if err != nil || u.Hostname() == "" {
			continue
		}
		scheme, port := "http", "15672"
		if u.Scheme == "amqps" {
			scheme, port = "https", "15671"
		}
		out = append(out, scheme+"://"+net.JoinHostPort(u.Hostname(), port))
	}
	return out
}

// Receiver configures the ingest HTTP server.
type Receiver struct {
	// Listen is host:port for webhooks and health: the public listener.
	// Default 127.0.0.1:8080.
	Listen string `mapstructure:"listen" validate:"required,hostname_port"`
	// MetricsListen is host:port for the metrics (and health), kept off
	// the public listener: metrics name sources, routes and rates that a
	// sender has no business reading. Default 127.0.0.1:8083; empty
	// serves no metrics.
	MetricsListen string `mapstructure:"metrics_listen" validate:"omitempty,hostname_port"`
	// MaxBodyBytes is the largest accepted request body. Default 1 MiB; at
	// most 16 MiB, RabbitMQ 4's default max_message_size (a bigger message
	// would be refused by the broker after the sender got its 200).
	MaxBodyBytes int64 `mapstructure:"max_body_bytes" validate:"gte=1,lte=16777216"`
	// ShutdownTimeout bounds how long in-flight requests may finish after
	// SIGTERM. Default 10s.
	ShutdownTimeout time.Duration `mapstructure:"shutdown_timeout" validate:"gt=0"`
	// ReadTimeout bounds reading one request, headers and body, from its
	// first byte: a sender that announces a body and stalls is cut after it,
	// gets no 200, and nothing is stored. Default 10s: a 1 MiB body takes
	// about a second even at 10 Mbit/s.
	ReadTimeout time.Duration `mapstructure:"read_timeout" validate:"gt=0"`
	// WriteTimeout bounds a request from the end of its headers to the last
	// byte of the answer, so it covers reading the body, the store
	// transaction (up to 5s) and writing the answer. Default 20s
	// (read_timeout + 5s + 5s to spare); at least read_timeout + 5s.
	WriteTimeout time.Duration `mapstructure:"write_timeout" validate:"gt=0"`
	// IdleTimeout closes a keep-alive connection that sends no new request
	// for this long. Default 60s: senders that post often keep their
	// connection, and idle ones do not pile up.
	IdleTimeout time.Duration `mapstructure:"idle_timeout" validate:"gt=0"`
	// BatchSize is the most webhook requests stored together in one
	// statement and one transaction (group commit): requests that arrive
	// while a batch commits are stored by the next one, and each is
	// answered after its batch committed. At most two batches are in
	// Postgres at once. Default 64; 1 stores every request on its own
	// (two at a time). At most 1000.
	BatchSize int `mapstructure:"batch_size" validate:"gte=1,lte=1000"`
	// BatchWait is how long a batch that already holds more than one
	// request, but fewer than batch_size, waits for more before it is
	// stored; a request that arrives alone is stored at once. Default 1ms;
	// 0s for no wait; at most 100ms (it adds to every answer under load).
	BatchWait time.Duration `mapstructure:"batch_wait" validate:"gte=0,lte=100ms"`
}

// Dispatcher configures the delivery process.
type Dispatcher struct {
	// Listen is host:port for health and metrics. Default 127.0.0.1:8081.
	Listen string `mapstructure:"listen" validate:"required,hostname_port"`
	// ShutdownTimeout bounds how long in-flight deliveries may finish after
	// SIGTERM. Default 30s.
	ShutdownTimeout time.Duration `mapstructure:"shutdown_timeout" validate:"gt=0"`
	// DeliveryLimit parks a message in its route's dead-letter queue after
	// this many redeliveries without an outcome (a message that crashes
	// dispatchers). Applied as a RabbitMQ policy, so changing it never needs
	// a queue deleted. Default 20.
	DeliveryLimit int `mapstructure:"delivery_limit" validate:"gte=1,lte=10000"`
	// MaxConns is the dispatcher's Postgres pool size. Default 0, which
	// means database.max_conns. A delivery uses a connection only for its
	// claim and its record, not during the POST, so a few connections
	// serve any route concurrency.
	MaxConns int32 `mapstructure:"max_conns" validate:"gte=0,lte=1000"`
	// LeaseMargin is added to a route's timeout for the lease a delivery
	// takes on its (event, route) pair. A dispatcher killed mid-POST leaves
	// a lease that a redelivered message waits out: route timeout plus this.
	// It must cover the claim before the POST and the record after it.
	// Default 10s.
	LeaseMargin time.Duration `mapstructure:"lease_margin" validate:"gte=100ms,lte=1h"`
	// BatchSize is the most claims, and the most records, of concurrent
	// deliveries written together in one statement (group commit: a lone
	// delivery waits for nothing). 1 writes each alone. Default 64.
	BatchSize int `mapstructure:"batch_size" validate:"gte=1,lte=1000"`
	// ReadTimeout bounds reading one request to the health and metrics
	// listener (GETs without a body). Default 10s.
	ReadTimeout time.Duration `mapstructure:"read_timeout" validate:"gt=0"`
	// WriteTimeout bounds answering one request, from the end of its
	// headers. Default 30s: /metrics queries Postgres, and Prometheus'
	// default scrape timeout is 10s.
	WriteTimeout time.Duration `mapstructure:"write_timeout" validate:"gt=0"`
	// IdleTimeout closes a keep-alive connection that sends no new request
	// for this long. Default 2m, so a scraper polling every minute keeps
	// one connection.
	IdleTimeout time.Duration `mapstructure:"idle_timeout" validate:"gt=0"`
	// SummaryInterval is how often the dispatcher logs, at info, a line
	// per route with what its messages came to since the last one
	// (delivered, retrying, dead, superseded); a route with nothing to
	// report logs nothing. Default 1m, at least 1s.
	SummaryInterval time.Duration `mapstructure:"summary_interval" validate:"gte=1s"`
}

// Outbox configures the publisher that drains the outbox into RabbitMQ.
type Outbox struct {
	// BatchSize is how many rows one claim takes. Default 100.
	BatchSize int `mapstructure:"batch_size" validate:"gte=1,lte=10000"`
	// PollInterval is the fallback poll when no NOTIFY arrives. Default 1s.
	PollInterval time.Duration `mapstructure:"poll_interval" validate:"gt=0"`
	// PublishTimeout bounds the wait for a batch's publisher confirms.
	// Default 10s.
	PublishTimeout time.Duration `mapstructure:"publish_timeout" validate:"gt=0"`
	// DirectHold turns on the receiver's direct publish: it publishes the
	// events it stored right after their commit, and their outbox rows,
	// the safety net, are due for a publisher only this long after it
	// (outbox.Direct). 0s turns it off: every event goes through the
	// outbox publisher. When set, longer than PublishTimeout. Default 15s.
	DirectHold time.Duration `mapstructure:"direct_hold" validate:"gte=0"`
}

// Retry configures redelivery.
type Retry struct {
	// Backoff is one delay per retry tier, each at least 10ms. Default
	// [10s, 1m, 5m, 15m, 1h, 3h, 6h, 12h].
	Backoff []time.Duration `mapstructure:"backoff" validate:"required,min=1,max=32,dive,gte=10ms"`
}

// Admin configures the admin HTTP API, served by the receiver.
type Admin struct {
	// Listen is host:port; empty (the default) turns the API off.
	Listen string `mapstructure:"listen" validate:"omitempty,hostname_port"`
	// Token is the bearer token every request must carry; required, at
	// least 16 characters, when Listen is set. Give it from the environment:
	// token: "${HOOKRELAY_ADMIN_TOKEN}".
	Token string `mapstructure:"token"`
	// ReadTimeout bounds reading one request, headers and body (small JSON
	// filters). Default 10s.
	ReadTimeout time.Duration `mapstructure:"read_timeout" validate:"gt=0"`
	// WriteTimeout bounds a request from the end of its headers to the last
	// byte of the answer. Default 10m: a replay (at most 1000 events per
	// request, paced by the dispatchers) runs inside the request, and the
	// operator waits for its answer.
	WriteTimeout time.Duration `mapstructure:"write_timeout" validate:"gt=0"`
	// IdleTimeout closes a keep-alive connection that sends no new request
	// for this long. Default 60s.
	IdleTimeout time.Duration `mapstructure:"idle_timeout" validate:"gt=0"`
	// AuthFailuresPerMinute is how many failed authentications one client
	// address may make in a minute; then the admin listener answers its
	// wrong tokens 429 until the minute ends (a right token always
	// passes). Default 20.
	AuthFailuresPerMinute int `mapstructure:"auth_failures_per_minute" validate:"gte=1,lte=100000"`
	// CookieSecure marks the console's session cookie Secure, so a
	// browser sends it over HTTPS only. The listener speaks plain HTTP: set
	// it when the console is reached through a proxy that terminates TLS
	// (the way to serve it beyond localhost). Default false.
	CookieSecure bool `mapstructure:"cookie_secure"`
}

// Secrets seal the signing secrets of routes made at run time (hookrelay
// routes create): Postgres holds them encrypted with AES-256-GCM under Key.
// Give the keys from the environment (HOOKRELAY_SECRETS_KEY, or key:
// "${VAR}"), never in a file checked in. Without Key, routes cannot be
// made at run time, and a dispatcher does not deliver those that exist.
type Secrets struct {
	// Key is standard base64 of 32 random bytes (hookrelay secret key).
	Key string `mapstructure:"key" validate:"omitempty,aes_key"`
	// PreviousKeys still open secrets sealed before the last key
	// rotation; hookrelay routes reseal seals every secret with Key, after
	// which they can go (docs/operating.md, "Rotating the secrets key").
	PreviousKeys []string `mapstructure:"previous_keys" validate:"dive,aes_key"`
	// Overlap is how long a route's previous signing secret still signs
	// after hookrelay routes rotate-secret, unless the rotation says
	// otherwise: both signatures go out meanwhile, so the destination can
	// switch. Default 24h.
	Overlap time.Duration `mapstructure:"overlap" validate:"gte=0,lte=720h"`
}

// TeamRoutes bounds where a team's routes made at run time deliver.
// Such a route never reaches the relay's own side: loopback, private
// (RFC 1918, RFC 4193), shared (RFC 6598), link-local, unspecified,
// multicast and the other addresses that are not globally reachable are
// refused when the route is saved and again when each delivery connects
// (internal/netguard). The routes of config.yaml, and the platform
// team's own run-time routes, are the operator's and are not checked.
type TeamRoutes struct {
	// AllowedNetworks are networks, in CIDR notation (10.20.0.0/16,
	// fd00:1::/32), that a team's route may reach although they are on
	// the relay's side: the platform's own internal destinations. Default
	// none.
	AllowedNetworks []string `mapstructure:"allowed_networks" validate:"dive,network"`
}

// AllowedNetworks returns team_routes.allowed_networks, parsed (Load
// checked them).
func (c *Config) AllowedNetworks() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range c.TeamRoutes.AllowedNetworks {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// Tracing configures OpenTelemetry traces (internal/tracing): one trace per
// event, across the receiver, the broker and the dispatcher. Where they go
// (endpoint, protocol, headers, sampler, batch sizes) is read from the
// standard OTEL_* environment variables.
type Tracing struct {
	// Enabled exports spans over OTLP; OTEL_TRACES_EXPORTER=otlp enables
	// it too. Default false.
	Enabled bool `mapstructure:"enabled"`
	// LinkTemplate links a trace id to the operator's tracing UI in the
	// console, the admin API and hookrelay events show: an http(s) URL
	// where {trace_id} stands for the id, e.g.
	// http://localhost:16686/trace/{trace_id} (Jaeger). Default none.
	LinkTemplate string `mapstructure:"link_template" validate:"omitempty,trace_link"`
}

// Debug configures diagnostics that expose the process's internals.
type Debug struct {
	// Pprof serves net/http/pprof under /debug/pprof/ on the receiver's
	// admin listener (behind admin.token; nothing without admin.listen) and
	// on the dispatcher's health and metrics listener (no token there: keep
	// that listener private). Never on the public webhook listener.
	// Default false.
	Pprof bool `mapstructure:"pprof"`
}

// Alerts are the thresholds of the relay's own events that no single
// change makes (docs/alerts.md); the others (a circuit, a pause, a dead
// letter, a job) are written with their change.
type Alerts struct {
	// BacklogAfter: a route whose oldest undelivered event is older than
	// this (and that is not paused) gets route.backlog, at most one every
	// ten minutes. Default 15m; 0s turns it off.
	BacklogAfter time.Duration `mapstructure:"backlog_after" validate:"gte=0"`
	// RejectionsPerMinute: a source that rejects at least this many
	// requests in a minute (bad signatures, bodies too large, ...) gets
	// source.rejections, at most one a minute. Default 10; 0 turns it
	// off.
	RejectionsPerMinute int `mapstructure:"rejections_per_minute" validate:"gte=0"`
}

// Retention configures what purge keeps, and the purge the relay runs by
// itself.
type Retention struct {
	// DedupeWindow keeps an event's deduplication key this long, so a late
	// resend is still recognised; longer than any provider retries. Default
	// 30d.
	DedupeWindow time.Duration `mapstructure:"dedupe_window" validate:"gt=0"`
	// MaxAge: the relay purges by itself, every Interval, the events
	// received longer ago than this with nothing undelivered, as
	// `hookrelay purge --older-than` would, except that no pair is ever
	// taken as abandoned (an event pending or retrying on any route is
	// kept) and dead pairs keep their events (see DeadMaxAge). One process
	// purges at a time. 0s turns it off (then run `hookrelay purge` from
	// cron). Default 30d; at least 1h.
	MaxAge time.Duration `mapstructure:"max_age" validate:"gte=0"`
	// DeadMaxAge: the relay's purge also deletes the events older than this
	// whose pairs are all delivered or dead (`purge --include-dead`): their
	// dead letters stay in RabbitMQ, and a requeue then parks them as
	// event_missing. 0s (the default): an event with a dead pair is kept
	// until an operator requeues, replays or drops it, or purges it. At
	// least max_age.
	DeadMaxAge time.Duration `mapstructure:"dead_max_age" validate:"gte=0"`
	// Interval is the time between the relay's purges; the first is
	// Interval after a process starts, at most 5m. Default 1h; 1m to 24h.
	Interval time.Duration `mapstructure:"interval" validate:"gt=0"`
}

// Reconcile configures the dispatcher's reconciler, which sends a pair
// again when the broker lost its message (Postgres is the source of truth).
type Reconcile struct {
	// Interval is the pause between rounds. Default 30s.
	Interval time.Duration `mapstructure:"interval" validate:"gt=0"`
	// Margin is how far past its due time (acceptance, or the end of its
	// retry tier's delay) an undelivered pair must be before it is sent
	// again, with its route's queue drained and no retry tier holding a
	// message to dead-letter (nothing in the broker can hold its copy).
	// Default 1m, at least 15s: long enough for a dispatcher to take a
	// message that just arrived and for RabbitMQ's queue statistics to
	// catch up, short enough that a lost message is repaired long before
	// any sender or destination notices.
	Margin time.Duration `mapstructure:"margin" validate:"gt=0"`
	// StrandAfter is how long a retry tier must hold messages it has not
	// dead-lettered yet, at every reading, before it is taken to strand
	// them, and then how far past its due time a pair must be to be sent
	// again: RabbitMQ can strand such messages after a leader change, until
	// its dead-letter worker's confirm timeout (dead_letter_worker_
	// publisher_confirm_timeout, 2 or 3 minutes by default) makes it try
	// again. While a tier holds them for less, nothing is sent again.
	// Longer than a slow tier's backlog lasts. Default 5m.
	StrandAfter time.Duration `mapstructure:"strand_after" validate:"gt=0"`
}

// Log configures the logger.
type Log struct {
	// Level is debug, info, warn or error. Default info.
	Level string `mapstructure:"level" validate:"oneof=debug info warn error"`
	// Format is json or console. Default json.
	Format string `mapstructure:"format" validate:"oneof=json console"`
}

// Source is one webhook sender, reached at POST /webhooks/{name}.
type Source struct {
	Name string `mapstructure:"name" validate:"required,ident"`
	// Team owns the source; default the platform team.
	Team string `mapstructure:"team" validate:"omitempty,ident"`
	// Subscribers are the teams that may bind their routes to the
	// source's events; "*" admits every team.
	Subscribers []string `mapstructure:"subscribers" validate:"dive,ident|eq=*"`
	// Preset fills verify.scheme (and its header), idempotency and
	// event_type for a known provider; whatever the source sets itself
	// wins. See Presets.
	Preset      string      `mapstructure:"preset" validate:"omitempty,preset"`
	Verify      Verify      `mapstructure:"verify"`
	Idempotency Idempotency `mapstructure:"idempotency"`
	EventType   EventType   `mapstructure:"event_type"`
	// DedupeBody makes a body identical to one already stored for this
	// source (within retention.dedupe_window) a duplicate, whatever the
	// headers say: for senders that sign only the body, whose key and event
	// type come from unsigned headers a replayer can change. Default true
	// for the github and shopify presets, false otherwise; an explicit false
	// turns it off. Use DedupesBody to read it.
	DedupeBody *bool `mapstructure:"dedupe_body"`
	// Ordering names the resource an event is about and its version, for
	// routes that drop stale events (routes[].ordering: drop_stale, which
	// needs both) or deliver in order (fifo, the resource alone).
	// Default none, or the preset's.
	Ordering Ordering `mapstructure:"ordering"`
	// TrustTraceparent continues the sender's traceparent (its trace
	// becomes the event's) when tracing. Default false: a sender is
	// outside, so each event starts a trace of its own, linked to the
	// sender's.
	TrustTraceparent bool `mapstructure:"trust_traceparent"`
}

// Ordering declares where a source's events carry the resource they are
// about (a subscription id) and its version: a sequence number or the
// provider's creation time of the event, never the delivery time (a retry
// would look newer). The version is optional: without it, events are
// ordered on fifo routes and never stale. An event that lacks the
// resource carries no ordering; one that lacks the version is never
// stale.
type Ordering struct {
	Resource OrderingField `mapstructure:"resource"`
	Version  OrderingField `mapstructure:"version"`
	// AllowUnsigned lets the resource or the version come from a header
	// the source's scheme does not sign. Default false: only signed
	// material may order events, because a replayed body with a forged
	// far-future version would silence every later event of its resource
	// on routes that drop stale events.
	AllowUnsigned bool `mapstructure:"allow_unsigned"`
}

// IsZero reports whether no ordering is declared.
func (o Ordering) IsZero() bool { return o == Ordering{} }

// OrderingField is where one ordering value comes from: a header or a
// JSON path (gjson syntax, as event_type), exactly one.
type OrderingField struct {
	Header   string `mapstructure:"header" validate:"omitempty,header_name"`
	JSONPath string `mapstructure:"json_path"`
}

// DedupesBody reports whether the source deduplicates on the body.
func (s Source) DedupesBody() bool { return s.DedupeBody != nil && *s.DedupeBody }

// Verify says how a source's requests are authenticated.
type Verify struct {
	// Scheme is one of signature.SchemeNames(). Required, unless a preset
	// sets it.
	Scheme string `mapstructure:"scheme" validate:"required,scheme"`
	// Secrets are accepted keys (tokens for token, passwords for basic);
	// several allow rotation.
	Secrets []string `mapstructure:"secrets" validate:"dive,required"`
	// Algorithm is sha1, sha256 or sha512 (hmac). Default sha256.
	Algorithm string `mapstructure:"algorithm" validate:"omitempty,oneof=sha1 sha256 sha512"`
	// Encoding is hex or base64 (hmac). Default hex.
	Encoding string `mapstructure:"encoding" validate:"omitempty,oneof=hex base64"`
	// Header carries the signature (hmac) or the token (token).
	Header string `mapstructure:"header" validate:"omitempty,header_name"`
	// Query names the query parameter that carries the signature (hmac),
	// instead of Header.
	Query string `mapstructure:"query"`
	// Prefix is stripped from the signature, e.g. "sha256=" (hmac).
	Prefix string `mapstructure:"prefix"`
	// TimestampHeader carries a Unix timestamp signed with the body (hmac).
	TimestampHeader string `mapstructure:"timestamp_header" validate:"omitempty,header_name"`
	// SignedContent is what is signed when TimestampHeader is set, with
	// {timestamp} and {body}. Default "{timestamp}.{body}" (hmac).
	SignedContent string `mapstructure:"signed_content"`
	// Tolerance is how far a signed timestamp may be from now, either way
	// (standard-webhooks, stripe, slack, paddle, hmac). Default 5m.
	Tolerance time.Duration `mapstructure:"tolerance" validate:"gte=0"`
	// AllowSHA1 accepts GitHub's legacy X-Hub-Signature when the SHA-256
	// header is absent (github). Default false.
	AllowSHA1 bool `mapstructure:"allow_sha1"`
	// Username is the expected user (basic).
	Username string `mapstructure:"username"`
}

// Idempotency says where a source's deduplication key comes from: the signed
// id, headers and JSON paths, joined in that order. With none set, the key is
// the SHA-256 of the raw body (the weakest choice: a re-serialised resend is
// a new event).
type Idempotency struct {
	// SignedID takes the message id the signature covers: webhook-id or
	// svix-id, whichever family's signature matched (scheme
	// standard-webhooks only). Unlike a raw header, a replayer cannot change
	// it. Default false; the standard-webhooks and svix presets set it.
	SignedID  bool     `mapstructure:"signed_id"`
	Header    string   `mapstructure:"header" validate:"omitempty,header_name"`
	Headers   []string `mapstructure:"headers" validate:"dive,header_name"`
	JSONPath  string   `mapstructure:"json_path"`
	JSONPaths []string `mapstructure:"json_paths" validate:"dive,required"`
}

// EventType says where a source's event type comes from: a header, a JSON
// path, or a list of JSON paths of which the first present wins (Slack's
// event.type, then type). Exactly one of the three.
type EventType struct {
	Header    string   `mapstructure:"header" validate:"omitempty,header_name"`
	JSONPath  string   `mapstructure:"json_path"`
	JSONPaths []string `mapstructure:"json_paths" validate:"dive,required"`
}

// Route is one destination, fed by the events its bindings match.
type Route struct {
	Name string `mapstructure:"name" validate:"required,ident"`
	// Team owns the route: its tokens see the route, its deliveries and
	// the events it received. Default the platform team. The team must
	// exist (hookrelay teams create).
	Team string `mapstructure:"team" validate:"omitempty,ident"`
	// Kind is how the route delivers: http (the default) POSTs each event
	// to URL; amqp publishes it to Exchange on the broker at URL
	// (docs/amqp-routes.md).
	Kind string `mapstructure:"kind" validate:"omitempty,oneof=http amqp"`
	// URL receives the deliveries: an http:// or https:// URL, or for
	// kind amqp an amqp:// or amqps:// URL (any broker and vhost).
	URL string `mapstructure:"url" validate:"required"`
	// Exchange is where an amqp route publishes (it must exist; the
	// relay's own exchanges, named with amqp.prefix, are refused).
	Exchange string `mapstructure:"exchange"`
	// RoutingKey is an amqp route's routing key, a template over the
	// event: {source}, {event_type}, {event_id}, {body.PATH}. Default
	// {source}.{event_type}.
	RoutingKey string `mapstructure:"routing_key"`
	// Bindings are topic patterns over "<source>.<event_type>".
	Bindings []string `mapstructure:"bindings" validate:"required,min=1,dive,topic_pattern"`
	// Timeout bounds one delivery attempt. Default 10s, at most 5m: a
	// delivery must finish far inside the broker's consumer timeout (with
	// the lease it may wait out and the route controls' wait, it must fit
	// under amqp.consumer_timeout: Config.RouteHold).
	Timeout time.Duration `mapstructure:"timeout" validate:"gt=0,lte=5m"`
	// Concurrency is the number of consumers, each with prefetch 1. Default 1.
	Concurrency int `mapstructure:"concurrency" validate:"gte=1,lte=256"`
	// SigningSecret signs deliveries (Standard Webhooks: whsec_ followed by
	// base64). This or SigningSecrets is required.
	SigningSecret string `mapstructure:"signing_secret" validate:"omitempty,whsec"`
	// SigningSecrets all sign every delivery (webhook-signature carries one
	// signature each), so a destination can rotate without downtime.
	SigningSecrets []string `mapstructure:"signing_secrets" validate:"dive,whsec"`
	// Headers are added to every delivery. Checked at load: a valid header
	// name, a value without control characters (a tab is allowed), and not a
	// header hookrelay sets itself (Content-Type, User-Agent, webhook-*,
	// X-Hookrelay-*) or the HTTP client owns (Content-Length, Host, ...).
	// Default none.
	Headers map[string]string `mapstructure:"headers"`
	// NoRetryStatuses go straight to the dead-letter queue, like 410.
	NoRetryStatuses []int `mapstructure:"no_retry_statuses" validate:"dive,gte=100,lte=599"`
	// MaxAttempts is the number of attempts before dead-lettering. Default
	// len(retry.backoff)+1.
	MaxAttempts int `mapstructure:"max_attempts" validate:"gte=1"`
	// Circuit is the route's circuit breaker.
	Circuit Circuit `mapstructure:"circuit"`
	// RateLimit is the most deliveries per second for the route as a
	// whole, across every dispatcher (kept in Postgres). Default 0: no
	// limit.
	RateLimit float64 `mapstructure:"rate_limit" validate:"gte=0,lte=100000"`
	// Burst is how many deliveries may go at once after a quiet spell,
	// above the steady rate_limit. Default 1 (none above the rate).
	Burst int `mapstructure:"burst" validate:"gte=1,lte=100000"`
	// Ordering is none (the default), drop_stale or fifo, each by the
	// resource of sources[].ordering (events of sources without it are
	// never stale and never wait). drop_stale: an event whose version is
	// older than one already delivered on this route for the same
	// resource is recorded stale and not sent. fifo: the events of one
	// resource are delivered one at a time, in the order they were
	// accepted; one that fails holds its resource, and only its resource,
	// through its retries (docs/ordering.md).
	Ordering string `mapstructure:"ordering" validate:"omitempty,oneof=none drop_stale fifo"`
	// OnDead is what a fifo route does when an event of a resource goes
	// to the dead letters: block (the default) holds the resource's later
	// events until an operator requeues the dead letter; skip lets the
	// next one go. Only with ordering fifo.
	OnDead string `mapstructure:"on_dead" validate:"omitempty,oneof=block skip"`
	// SendTraceparent sends the delivery's trace context (traceparent,
	// tracestate) to the destination when tracing, so its own spans join
	// the event's trace. Default true; false keeps it out of the requests.
	// Use SendsTraceparent to read it.
	SendTraceparent *bool `mapstructure:"send_traceparent"`
	// Filter is a CEL expression over the event (body, headers, source,
	// event_type, received_at: docs/rules.md): the route takes an event
	// its bindings match only when the filter yields true. Compiled when
	// the config loads; an event it cannot judge (an error, past its cost)
	// makes no pair and is counted. Default none: every matched event.
	Filter string `mapstructure:"filter"`
	// Transform is a CEL expression that yields the body to deliver (a
	// map or list is sent as JSON, a string as it is). Default none: the
	// event's body as received. The stored event is never changed.
	Transform string `mapstructure:"transform"`
	// TransformHeaders is a CEL expression that yields a map of headers
	// to add to each delivery. Default none.
	TransformHeaders string `mapstructure:"transform_headers"`
}

// RelaySource is the built-in source of the relay's own events: no
// source of the config may take its name (store.RelaySource).
const RelaySource = "hookrelay"

// Route kinds.
const (
	KindHTTP = "http"
	KindAMQP = "amqp"
)

// IsAMQP reports whether the route publishes to an exchange.
func (r Route) IsAMQP() bool { return r.Kind == KindAMQP }

// SendsTraceparent reports whether the route's requests carry the trace
// context (when tracing).
func (r Route) SendsTraceparent() bool { return r.SendTraceparent == nil || *r.SendTraceparent }

// Circuit configures a route's circuit breaker: after Failures consecutive
// failed attempts (no answer, 408, 429, 5xx) across every dispatcher, the
// route's consumers stop for Cooldown (doubling while probes fail, at most
// 10m); then one probe delivery decides.
type Circuit struct {
	// Failures opens the circuit. Default 10; 0 turns the breaker off.
	Failures int `mapstructure:"failures" validate:"gte=0,lte=100000"`
	// Cooldown is how long the circuit stays open before a probe. Default
	// 30s, at least 1s, at most 10m.
	Cooldown time.Duration `mapstructure:"cooldown" validate:"gte=1s,lte=10m"`
}

// Rules bounds what the expressions of routes (filter, transform) may
// cost on one event: an evaluation past a bound fails for that event only.
type Rules struct {
	// CostLimit is CEL's cost limit of one evaluation (about one unit per
	// operation, each element a comprehension visits counted). Default
	// 50000.
	CostLimit uint64 `mapstructure:"cost_limit" validate:"gte=100,lte=100000000"`
	// MaxOutputBytes bounds a transformation's body and headers together.
	// Default 1MiB, at least 1KiB, at most 16MiB.
	MaxOutputBytes int `mapstructure:"max_output_bytes" validate:"gte=1024,lte=16777216"`
	// Timeout guards one evaluation's time besides its cost. Default 1s.
	Timeout time.Duration `mapstructure:"timeout" validate:"gte=10ms,lte=10s"`
}

// Route ordering values.
const (
	OrderingNone      = "none"
	OrderingDropStale = "drop_stale"
	OrderingFIFO      = "fifo"
)

// Route on_dead values (ordering fifo).
const (
	OnDeadBlock = "block"
	OnDeadSkip  = "skip"
)

// routeDefaults are applied to a route item that does not set the key.
// max_attempts is derived from retry.backoff after decoding.
var routeDefaults = map[string]any{
	"timeout":     "10s",
	"concurrency": 1,
	"burst":       1,
}

// circuitDefaults are applied to a route's circuit that does not set the
// key.
var circuitDefaults = map[string]any{
	"failures": 10,
	"cooldown": "30s",
}

func setDefaults(set func(key string, value any)) {
	set("database.max_conns", 10)
	set("database.query_timeout", "5s")
	set("amqp.prefix", "hookrelay")
	set("amqp.consumer_timeout", "30m")
	set("receiver.listen", "127.0.0.1:8080")
	set("receiver.metrics_listen", "127.0.0.1:8083")
	set("receiver.max_body_bytes", 1<<20)
	set("receiver.shutdown_timeout", "10s")
	set("receiver.read_timeout", "10s")
	set("receiver.write_timeout", "20s")
	set("receiver.idle_timeout", "60s")
	set("receiver.batch_size", 64)
	set("receiver.batch_wait", "1ms")
	set("dispatcher.listen", "127.0.0.1:8081")
	set("dispatcher.shutdown_timeout", "30s")
	set("dispatcher.delivery_limit", 20)
	set("dispatcher.max_conns", 0)
	set("dispatcher.lease_margin", "10s")
	set("dispatcher.batch_size", 64)
	set("dispatcher.read_timeout", "10s")
	set("dispatcher.write_timeout", "30s")
	set("dispatcher.idle_timeout", "2m")
	set("dispatcher.summary_interval", "1m")
	set("admin.read_timeout", "10s")
	set("admin.write_timeout", "10m")
	set("admin.idle_timeout", "60s")
	set("admin.auth_failures_per_minute", 20)
	set("admin.cookie_secure", false)
	set("outbox.batch_size", 100)
	set("outbox.poll_interval", "1s")
	set("outbox.publish_timeout", "10s")
	set("outbox.direct_hold", "15s")
	set("retry.backoff", []string{"10s", "1m", "5m", "15m", "1h", "3h", "6h", "12h"})
	set("retention.dedupe_window", "30d")
	set("retention.max_age", "30d")
	set("retention.dead_max_age", "0s")
	set("retention.interval", "1h")
	set("reconcile.interval", "30s")
	set("reconcile.margin", "1m")
	set("reconcile.strand_after", "5m")
	set("log.level", "info")
	set("log.format", "json")
	set("debug.pprof", false)
	set("secrets.overlap", "24h")
	set("tracing.enabled", false)
	set("rules.cost_limit", 50_000)
	set("alerts.backlog_after", "15m")
	set("alerts.rejections_per_minute", 10)
	set("rules.max_output_bytes", 1<<20)
	set("rules.timeout", "1s")
	set("tracing.link_template", "")
}
