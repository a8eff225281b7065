package config

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const validYAML = `
database: {url: "postgres://postgres@127.0.0.1:5432/hookrelay?sslmode=disable"}
amqp: {url: "amqp://guest:guest@127.0.0.1:5672/"}
retry: {backoff: [1s, 2s]}
sources:
  - name: acme
    verify: {scheme: hmac, secrets: ["${ACME_SECRET}"], header: X-Acme-Signature, prefix: "sha256="}
    idempotency: {json_paths: [order_id, event]}
    event_type: {json_path: event}
routes:
  - name: billing
    url: "http://127.0.0.1:9000/hooks"
    signing_secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    bindings: ["acme.invoice.*", "acme.#"]
`

func writeConfig(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

func envMap(m map[string]string) LookupEnvFunc {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestLoadValid(t *testing.T) {
	t.Parallel()
	cfg, err := Load(writeConfig(t, validYAML), envMap(map[string]string{"ACME_SECRET": "s3cret"}))
	require.NoError(t, err)
	require.Equal(t, "hookrelay", cfg.AMQP.Prefix)
	require.Equal(t, []time.Duration{time.Second, 2 * time.Second}, cfg.Retry.Backoff)
	require.Equal(t, []string{"s3cret"}, cfg.Sources[0].Verify.Secrets)
	require.Equal(t, 10*time.Second, cfg.Routes[0].Timeout)
	require.Equal(t, 1, cfg.Routes[0].Concurrency)
	require.Equal(t, 3, cfg.Routes[0].MaxAttempts, "defaults to len(backoff)+1")
	require.Equal(t, int64(1<<20), cfg.Receiver.MaxBodyBytes)
	require.Equal(t, 5*time.Second, cfg.Database.QueryTimeout)
}

func TestLoadEnvOverrides(t *testing.T) {
	t.Parallel()
	cfg, err := Load(writeConfig(t, validYAML), envMap(map[string]string{
		"ACME_SECRET":                 "x",
		"HOOKRELAY_DATABASE_URL":      "postgres://other:5432/db",
		"HOOKRELAY_RECEIVER_LISTEN":   "0.0.0.0:9999",
		"HOOKRELAY_OUTBOX_BATCH_SIZE": "7",
		"HOOKRELAY_RETRY_BACKOFF":     "5s,10s,20s",
	}))
	require.NoError(t, err)
	require.Equal(t, "postgres://other:5432/db", cfg.Database.URL)
	require.Equal(t, "0.0.0.0:9999", cfg.Receiver.Listen)
	require.Equal(t, 7, cfg.Outbox.BatchSize)
	require.Equal(t, []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second}, cfg.Retry.Backoff)
	require.Equal(t, 4, cfg.Routes[0].MaxAttempts)
}

func TestLoadInvalid(t *testing.T) {
	t.Parallel()
	env := envMap(map[string]string{"ACME_SECRET": "x"})
	tests := []struct {
		name    string
		edit    func(string) string
		env     LookupEnvFunc
		wantMsg string
	}{
		{
			name:    "missing required key",
			edit:    func(s string) string { return strings.Replace(s, `    url: "http://127.0.0.1:9000/hooks"`+"\n", "", 1) },
			wantMsg: "routes[billing].url: is required",
		},
		{
			name:    "duration without unit as number",
			edit:    func(s string) string { return strings.Replace(s, "backoff: [1s, 2s]", "backoff: [1s, 5]", 1) },
			wantMsg: `retry.backoff[1]: duration 5 has no unit`,
		},
		{
			name:    "duration without unit as string",
			edit:    func(s string) string { return s + `    timeout: "5"` + "\n" },
			wantMsg: `routes[billing].timeout: duration "5": write it with a unit`,
		},
		{
			name:    "duration without unit from env",
			edit:    func(s string) string { return s },
			env:     envMap(map[string]string{"ACME_SECRET": "x", "HOOKRELAY_OUTBOX_POLL_INTERVAL": "5"}),
			wantMsg: `outbox.poll_interval (from HOOKRELAY_OUTBOX_POLL_INTERVAL): duration "5": write it with a unit`,
		},
		{
			name:    "zero query timeout",
			edit:    func(s string) string { return s },
			env:     envMap(map[string]string{"ACME_SECRET": "x", "HOOKRELAY_DATABASE_QUERY_TIMEOUT": "0s"}),
			wantMsg: `database.query_timeout (from HOOKRELAY_DATABASE_QUERY_TIMEOUT): 0s must be greater than 0`,
		},
		{
			name:    "direct hold within the publish timeout",
			edit:    func(s string) string { return s },
			env:     envMap(map[string]string{"ACME_SECRET": "x", "HOOKRELAY_OUTBOX_DIRECT_HOLD": "10s"}),
			wantMsg: `outbox.direct_hold (from HOOKRELAY_OUTBOX_DIRECT_HOLD): 10s must be longer than outbox.publish_timeout (10s), or 0s to turn the direct publish off`,
		},
		{
			name:    "direct hold without a unit",
			edit:    func(s string) string { return s },
			env:     envMap(map[string]string{"ACME_SECRET": "x", "HOOKRELAY_OUTBOX_DIRECT_HOLD": "15"}),
			wantMsg: `outbox.direct_hold (from HOOKRELAY_OUTBOX_DIRECT_HOLD): duration "15": write it with a unit`,
		},
		{
			name:    "unknown top-level key",
			edit:    func(s string) string { return s + "recevier: {listen: x}\n" },
			wantMsg: "recevier: unknown key",
		},
		{
			name: "unknown nested key",
			edit: func(s string) string {
				return strings.Replace(s, "retry: {backoff", "retry: {bakoff: [1s], backoff", 1)
			},
			wantMsg: "retry.bakoff: unknown key",
		},
		{
			name:    "unknown key in a route",
			edit:    func(s string) string { return s + "    concurency: 3\n" },
			wantMsg: "concurency: unknown key",
		},
		{
			name:    "invalid database url",
			edit:    func(s string) string { return strings.Replace(s, "postgres://postgres@127.0.0.1:5432", "mysql://x", 1) },
			wantMsg: "database.url: must be a postgres:// URL",
		},
		{
			name:    "invalid route url",
			edit:    func(s string) string { return strings.Replace(s, "http://127.0.0.1:9000/hooks", "ftp:/nowhere", 1) },
			wantMsg: `routes[billing].url: must be an http:// or https:// URL`,
		},
		{
			name:    "invalid binding pattern",
			edit:    func(s string) string { return strings.Replace(s, `"acme.#"`, `"acme.inv*"`, 1) },
			wantMsg: `routes[billing].bindings[1]: "acme.inv*" is not a valid topic pattern`,
		},
		{
			name:    "empty binding word",
			edit:    func(s string) string { return strings.Replace(s, `"acme.#"`, `"acme..x"`, 1) },
			wantMsg: `routes[billing].bindings[1]: "acme..x" is not a valid topic pattern: word 2 is empty`,
		},
		{
			name:    "unset secret variable",
			edit:    func(s string) string { return s },
			env:     envMap(nil),
			wantMsg: "sources[acme].verify.secrets[0]: environment variable ACME_SECRET is not set",
		},
		{
			name:    "empty secret",
			edit:    func(s string) string { return s },
			env:     envMap(map[string]string{"ACME_SECRET": ""}),
			wantMsg: "sources[acme].verify.secrets[0] (from ${ACME_SECRET}, which is empty): is required",
		},
		{
			name:    "unknown scheme",
			edit:    func(s string) string { return strings.Replace(s, "scheme: hmac", "scheme: hmca", 1) },
			wantMsg: `sources[acme].verify.scheme: "hmca" is not a scheme; use one of: none, hmac,`,
		},
		{
			name:    "explicit zero concurrency is not replaced by the default",
			edit:    func(s string) string { return s + "    concurrency: 0\n" },
			wantMsg: "routes[billing].concurrency: 0 is less than 1",
		},
		{
			name:    "duplicate route name",
			edit:    func(s string) string { return s + "  - {name: billing, url: \"http://x/\", bindings: [\"a.b\"]}\n" },
			wantMsg: `routes[1].name: "billing" is already used by routes[0]`,
		},
		{
			name: "event type needs exactly one rule",
			edit: func(s string) string {
				return strings.Replace(s, "event_type: {json_path: event}", "event_type: {}", 1)
			},
			wantMsg: "sources[acme].event_type: set exactly one of header, json_path or json_paths",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := tt.env
			if e == nil {
				e = env
			}
			_, err := Load(writeConfig(t, tt.edit(validYAML)), e)
			require.Error(t, err)
			require.True(t, IsInvalid(err), "want a content error, got %v", err)
			require.Contains(t, err.Error(), tt.wantMsg)
			require.NotContains(t, err.Error(), "hunter2", "no credentials in errors")
			require.NotContains(t, err.Error(), "s3cret", "no secrets in errors")
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	t.Parallel()
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"), envMap(nil))
	require.Error(t, err)
	require.False(t, IsInvalid(err))
}

func TestPresetsFillWhatTheSourceLeavesOut(t *testing.T) {
	t.Parallel()
	yaml := strings.Replace(validYAML, "sources:\n", `sources:
  - name: gh
    preset: github
    verify: {secrets: [s]}
  - name: hot
    preset: hotmart
    verify: {secrets: [t]}
  - name: kiw
    preset: kiwify
    verify: {secrets: [k]}
    event_type: {json_path: type}
`, 1)
	cfg, err := Load(writeConfig(t, yaml), envMap(map[string]string{"ACME_SECRET": "x"}))
	require.NoError(t, err)
	gh, hot, kiw := cfg.Sources[0], cfg.Sources[1], cfg.Sources[2]
	require.Equal(t, "github", gh.Verify.Scheme)
	require.Equal(t, []string{"X-GitHub-Hook-ID", "X-GitHub-Delivery"}, gh.Idempotency.Headers)
	require.Equal(t, "X-GitHub-Event", gh.EventType.Header)
	require.Equal(t, "token", hot.Verify.Scheme)
	require.Equal(t, "X-HOTMART-HOTTOK", hot.Verify.Header)
	require.Equal(t, []string{"data.purchase.transaction", "event"}, hot.Idempotency.JSONPaths)
	require.Equal(t, []string{"order_id", "webhook_event_type"}, kiw.Idempotency.JSONPaths)
	require.Equal(t, "type", kiw.EventType.JSONPath, "the source's own event_type wins over the preset's")
}

func TestLoadExpandsDefaults(t *testing.T) {
	t.Parallel()
	yaml := strings.Replace(validYAML, `"http://127.0.0.1:9000/hooks"`, `"${BILLING_URL:-http://127.0.0.1:9000/hooks}"`, 1)
	cfg, err := Load(writeConfig(t, yaml), envMap(map[string]string{"ACME_SECRET": "x"}))
	require.NoError(t, err)
	require.Equal(t, "http://127.0.0.1:9000/hooks", cfg.Routes[0].URL, "unset: the default")
	cfg, err = Load(writeConfig(t, yaml), envMap(map[string]string{"ACME_SECRET": "x", "BILLING_URL": "http://dest:9000/h"}))
	require.NoError(t, err)
	require.Equal(t, "http://dest:9000/h", cfg.Routes[0].URL, "set: the value")
}

// Issue 12, item 3: --config, then HOOKRELAY_CONFIG, then ./config.yaml;
// the first given is used, and when it is missing the error names every
// place.
func TestFind(t *testing.T) {
	dir := t.TempDir()
	exists := filepath.Join(dir, "a.yaml")
	require.NoError(t, os.WriteFile(exists, nil, 0o600))
	missing := filepath.Join(dir, "missing.yaml")
	env := envMap(map[string]string{"HOOKRELAY_CONFIG": exists})

	p, err := Find(exists, envMap(nil))
	require.NoError(t, err)
	require.Equal(t, exists, p)
	p, err = Find("", env)
	require.NoError(t, err)
	require.Equal(t, exists, p)

	_, err = Find(missing, env)
	var nf *NotFoundError
	require.ErrorAs(t, err, &nf)
	require.Contains(t, err.Error(), "--config "+missing+": "+missing+" does not exist", "a missing --config never falls back")
	_, err = Find("", envMap(map[string]string{"HOOKRELAY_CONFIG": missing}))
	require.ErrorContains(t, err, "--config: not given")
	require.ErrorContains(t, err, "HOOKRELAY_CONFIG="+missing+": "+missing+" does not exist")

	t.Chdir(dir)
	_, err = Find("", envMap(nil))
	require.ErrorAs(t, err, &nf)
	require.Equal(t, []string{"--config: not given", "HOOKRELAY_CONFIG: not set", "./config.yaml: " + filepath.Join(dir, "config.yaml") + " does not exist"}, nf.Looked)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.yaml"), nil, 0o600))
	p, err = Find("", envMap(nil))
	require.NoError(t, err)
	require.Equal(t, DefaultPath, p)
}

// Issue 12, item 3: the operator commands' config leaves out the senders'
// secrets and the routes' delivery settings, so an unset ${VAR} there does
// not stop them; everything else is still checked.
func TestLoadOperatorLeavesOutTheDaemonsSecrets(t *testing.T) {
	t.Parallel()
	yaml := strings.NewReplacer(
		`"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"`, `"${BILLING_SIGNING_SECRET}"`,
		`url: "http://127.0.0.1:9000/hooks"`, `url: "${BILLING_URL}"`,
	).Replace(validYAML) + "admin: {listen: \"127.0.0.1:8082\", token: \"${ADMIN_TOKEN}\"}\n"
	path := writeConfig(t, yaml)
	_, err := Load(path, envMap(nil))
	for _, v := range []string{"ACME_SECRET", "BILLING_SIGNING_SECRET", "BILLING_URL", "ADMIN_TOKEN"} {
		require.ErrorContains(t, err, "environment variable "+v+" is not set", "the daemons need every one")
	}
	cfg, err := LoadOperator(path, envMap(nil))
	require.NoError(t, err)
	require.Nil(t, cfg.Sources)
	require.Equal(t, "billing", cfg.Routes[0].Name)
	require.Equal(t, []string{"acme.invoice.*", "acme.#"}, cfg.Routes[0].Bindings)
	require.Empty(t, cfg.Routes[0].SigningSecret)
	require.Equal(t, 3, cfg.Routes[0].MaxAttempts)

	// What the operator commands use is still required and checked.
	bad := strings.Replace(yaml, `postgres://postgres@127.0.0.1:5432/hookrelay?sslmode=disable`, `${DATABASE_URL}`, 1)
	bad = strings.Replace(bad, `["acme.invoice.*", "acme.#"]`, `["acme.inv*"]`, 1)
	_, err = LoadOperator(writeConfig(t, bad), envMap(nil))
	require.ErrorContains(t, err, "database.url: environment variable DATABASE_URL is not set")
	_, err = LoadOperator(writeConfig(t, bad), envMap(map[string]string{"DATABASE_URL": "postgres://h/db"}))
	require.ErrorContains(t, err, `routes[billing].bindings[0]: "acme.inv*" is not a valid topic pattern`)
}

// Issue 12, item 6: durations print the way they were written.
func TestFormatDuration(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"30d": "30d", "720h": "30d", "36h": "36h", "90m": "1h30m", "2m": "2m", "1h": "1h",
		"1h0m30s": "1h0m30s", "1.5s": "1.5s", "10ms": "10ms", "0s": "0s",
	} {
		d, err := ParseDuration(in)
		require.NoError(t, err, in)
		require.Equal(t, want, FormatDuration(d), in)
		back, err := ParseDuration(FormatDuration(d))
		require.NoError(t, err)
		require.Equal(t, d, back, "FormatDuration(%s) reads back", in)
	}
}

// The shipped config.yaml must stay loadable.
func TestRepositoryConfigLoads(t *testing.T) {
	t.Parallel()
	cfg, err := Load("../../config.yaml", envMap(map[string]string{
		"HOOKRELAY_DEMO_SECRET":  "x",
		"BILLING_SIGNING_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
	}))
	require.NoError(t, err)
	require.NotEmpty(t, cfg.Routes)
}

func TestAMQPNodes(t *testing.T) {
	t.Parallel()
	cluster := strings.Replace(validYAML, `amqp: {url: "amqp://guest:guest@127.0.0.1:5672/"}`,
		`amqp: {urls: ["amqp://u:p@rmq1:5672/", "amqps://u:p@rmq2/"]}`, 1)
	cfg, err := Load(writeConfig(t, cluster), envMap(map[string]string{"ACME_SECRET": "x"}))
	require.NoError(t, err)
	require.Equal(t, []string{"amqp://u:p@rmq1:5672/", "amqps://u:p@rmq2/"}, cfg.AMQP.Nodes())
	require.Equal(t, []string{"http://rmq1:15672", "https://rmq2:15671"}, cfg.AMQP.Management(),
		"without management_url(s), each node's management API")

	cfg, err = Load(writeConfig(t, validYAML), envMap(map[string]string{"ACME_SECRET": "x"}))
	require.NoError(t, err)
	require.Equal(t, []string{"amqp://guest:guest@127.0.0.1:5672/"}, cfg.AMQP.Nodes())
	require.Equal(t, []string{"http://127.0.0.1:15672"}, cfg.AMQP.Management())

	// The environment gives a list comma-separated; an empty url unsets
	// the file's one-node form.
	cfg, err = Load(writeConfig(t, validYAML), envMap(map[string]string{
		"ACME_SECRET":                    "x",
		"HOOKRELAY_AMQP_URL":             "",
		"HOOKRELAY_AMQP_URLS":            "amqp://a:5672/,amqp://b:5672/",
		"HOOKRELAY_AMQP_MANAGEMENT_URLS": "http://a:15672,http://b:15672",
	}))
	require.NoError(t, err)
	require.Equal(t, []string{"amqp://a:5672/", "amqp://b:5672/"}, cfg.AMQP.Nodes())
	require.Equal(t, []string{"http://a:15672", "http://b:15672"}, cfg.AMQP.Management())
}

func TestAMQPNodesInvalid(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		amqp string
		want string
	}{
		"both":             {`amqp: {url: "amqp://a/", urls: ["amqp://b/"]}`, "amqp: set url (one broker) or urls (a cluster's nodes), not both"},
		"neither":          {`amqp: {prefix: hookrelay}`, "amqp.url: is required (or amqp.urls, a cluster's nodes)"},
		"bad node":         {`amqp: {urls: ["amqp://a/", "http://b/"]}`, "amqp.urls[1]: must be an amqp:// or amqps:// URL with a host"},
		"two mgmt":         {`amqp: {url: "amqp://a/", management_url: "http://a:15672", management_urls: ["http://b:15672"]}`, "amqp: set management_url or management_urls, not both"},
		"missing ca":       {`amqp: {url: "amqps://a/", tls: {ca_file: /nonexistent/ca.pem}}`, `amqp.tls.ca_file: "/nonexistent/ca.pem" is not a readable file`},
		"cert without key": {`amqp: {url: "amqps://a/", tls: {cert_file: /etc/hostname}}`, "amqp.tls: cert_file and key_file go together"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			yaml := strings.Replace(validYAML, `amqp: {url: "amqp://guest:guest@127.0.0.1:5672/"}`, tc.amqp, 1)
			_, err := Load(writeConfig(t, yaml), envMap(map[string]string{"ACME_SECRET": "x"}))
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

// Item 18: the receiver's pool is sized for the receiver. Big route
// concurrency, which only the dispatcher needs connections for, must not
// force database.max_conns up.
func TestRouteConcurrencyDoesNotSizeTheReceiverPool(t *testing.T) {
	t.Parallel()
	yaml := validYAML + "    concurrency: 64\n" + `  - name: crm
    url: "http://127.0.0.1:9001/hooks"
    signing_secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    bindings: ["acme.#"]
    concurrency: 32
database: {url: "postgres://postgres@127.0.0.1:5432/hookrelay?sslmode=disable", max_conns: 10}
`
	yaml = strings.Replace(yaml, "database: {url: \"postgres://postgres@127.0.0.1:5432/hookrelay?sslmode=disable\"}\n", "", 1)
	cfg, err := Load(writeConfig(t, yaml), envMap(map[string]string{"ACME_SECRET": "x"}))
	require.NoError(t, err)
	require.EqualValues(t, 10, cfg.Database.MaxConns)
	require.EqualValues(t, 10, cfg.DispatcherMaxConns(), "derived: database.max_conns, whatever the route concurrency")
}

func TestDispatcherMaxConns(t *testing.T) {
	t.Parallel()
	env := envMap(map[string]string{"ACME_SECRET": "x"})
	yaml := validYAML + "    concurrency: 8\n"

	cfg, err := Load(writeConfig(t, yaml), env)
	require.NoError(t, err)
	require.EqualValues(t, 0, cfg.Dispatcher.MaxConns, "default: derive")
	require.EqualValues(t, cfg.Database.MaxConns, cfg.DispatcherMaxConns(), "derived: database.max_conns")

	cfg, err = Load(writeConfig(t, yaml+"dispatcher: {max_conns: 25}\n"), env)
	require.NoError(t, err)
	require.EqualValues(t, 25, cfg.DispatcherMaxConns(), "a set value wins")

	// Issue 11: deliveries hold no connection during a POST, so a pool
	// smaller than the route concurrency is fine.
	cfg, err = Load(writeConfig(t, yaml+"dispatcher: {max_conns: 2}\n"), env)
	require.NoError(t, err)
	require.EqualValues(t, 2, cfg.DispatcherMaxConns())
}

// Issue 11: the delivery lease margin has a default and needs a unit.
func TestDispatcherLeaseMargin(t *testing.T) {
	t.Parallel()
	env := envMap(map[string]string{"ACME_SECRET": "x"})
	cfg, err := Load(writeConfig(t, validYAML), env)
	require.NoError(t, err)
	require.Equal(t, 10*time.Second, cfg.Dispatcher.LeaseMargin)

	cfg, err = Load(writeConfig(t, validYAML+"dispatcher: {lease_margin: 2s}\n"), env)
	require.NoError(t, err)
	require.Equal(t, 2*time.Second, cfg.Dispatcher.LeaseMargin)

	for _, bad := range []string{"10", "1ms", "0s"} {
		_, err = Load(writeConfig(t, validYAML+"dispatcher: {lease_margin: "+bad+"}\n"), env)
		require.Error(t, err, bad)
		require.Contains(t, err.Error(), "dispatcher.lease_margin", bad)
	}
}

// Issue 11: grouped delivery writes have a default and a range.
func TestDispatcherBatchSize(t *testing.T) {
	t.Parallel()
	env := envMap(map[string]string{"ACME_SECRET": "x"})
	cfg, err := Load(writeConfig(t, validYAML), env)
	require.NoError(t, err)
	require.Equal(t, 64, cfg.Dispatcher.BatchSize)
	cfg, err = Load(writeConfig(t, validYAML+"dispatcher: {batch_size: 1}\n"), env)
	require.NoError(t, err)
	require.Equal(t, 1, cfg.Dispatcher.BatchSize)
	for _, bad := range []string{"0", "1001", "ten"} {
		_, err = Load(writeConfig(t, validYAML+"dispatcher: {batch_size: "+bad+"}\n"), env)
		require.Error(t, err, bad)
		require.Contains(t, err.Error(), "dispatcher.batch_size", bad)
	}
}

// Item 3: the listeners' timeouts have defaults and reject nonsense.
func TestListenerTimeouts(t *testing.T) {
	t.Parallel()
	env := envMap(map[string]string{"ACME_SECRET": "x"})
	cfg, err := Load(writeConfig(t, validYAML), env)
	require.NoError(t, err)
	require.Equal(t, Receiver{Listen: "127.0.0.1:8080", MetricsListen: "127.0.0.1:8083", MaxBodyBytes: 1 << 20, ShutdownTimeout: 10 * time.Second,
		ReadTimeout: 10 * time.Second, WriteTimeout: 20 * time.Second, IdleTimeout: time.Minute,
		BatchSize: 64, BatchWait: time.Millisecond}, cfg.Receiver)
	require.Equal(t, 10*time.Second, cfg.Dispatcher.ReadTimeout)
	require.Equal(t, 30*time.Second, cfg.Dispatcher.WriteTimeout)
	require.Equal(t, 2*time.Minute, cfg.Dispatcher.IdleTimeout)
	require.Equal(t, 10*time.Second, cfg.Admin.ReadTimeout)
	require.Equal(t, 10*time.Minute, cfg.Admin.WriteTimeout)
	require.Equal(t, time.Minute, cfg.Admin.IdleTimeout)

	for _, tt := range []struct{ name, yaml, want string }{
		{"zero", "receiver: {read_timeout: 0s}\n", "receiver.read_timeout: 0s must be greater than 0"},
		{"no unit", "admin: {idle_timeout: 5}\n", "admin.idle_timeout: duration 5 has no unit"},
		{"receiver write leaves no room for the store", "receiver: {read_timeout: 10s, write_timeout: 12s}\n",
			"receiver.write_timeout: 12s leaves no time to store and answer: set at least 15s"},
		{"admin write shorter than read", "admin: {read_timeout: 30s, write_timeout: 20s}\n",
			"admin.write_timeout: 20s must be longer than admin.read_timeout (30s)"},
		{"dispatcher write shorter than read", "dispatcher: {read_timeout: 30s, write_timeout: 20s}\n",
			"dispatcher.write_timeout: 20s must be longer than dispatcher.read_timeout (30s)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Load(writeConfig(t, validYAML+tt.yaml), env)
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.want)
		})
	}
}

// Issue 11: the group commit's settings have defaults, and a wait without
// a unit or out of range is refused naming the key.
func TestReceiverBatchSettings(t *testing.T) {
	t.Parallel()
	env := envMap(map[string]string{"ACME_SECRET": "x"})
	cfg, err := Load(writeConfig(t, validYAML+"receiver: {batch_size: 1, batch_wait: 0s}\n"), env)
	require.NoError(t, err)
	require.Equal(t, 1, cfg.Receiver.BatchSize)
	require.Zero(t, cfg.Receiver.BatchWait, "0s turns the wait off")

	for _, tt := range []struct{ name, yaml, want string }{
		{"wait without unit", "receiver: {batch_wait: 1}\n", "receiver.batch_wait: duration 1 has no unit"},
		{"negative wait", "receiver: {batch_wait: -1ms}\n", "receiver.batch_wait: -1ms is less than 0"},
		{"wait too long", "receiver: {batch_wait: 1s}\n", "receiver.batch_wait: 1s is more than 100ms"},
		{"size zero", "receiver: {batch_size: 0}\n", "receiver.batch_size: 0 is less than 1"},
		{"size too big", "receiver: {batch_size: 5000}\n", "receiver.batch_size: 5000 is more than 1000"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Load(writeConfig(t, validYAML+tt.yaml), env)
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.want)
		})
	}
}

// Issue 25: the reconciler's margin covers the age of RabbitMQ's queue
// statistics, and strand_after is at least the margin.
func TestReconcileSettings(t *testing.T) {
	t.Parallel()
	env := envMap(map[string]string{"ACME_SECRET": "x"})
	cfg, err := Load(writeConfig(t, validYAML), env)
	require.NoError(t, err)
	require.Equal(t, Reconcile{Interval: 30 * time.Second, Margin: time.Minute, StrandAfter: 5 * time.Minute}, cfg.Reconcile)

	for _, tt := range []struct{ name, yaml, want string }{
		{"margin under the statistics' age", "reconcile: {margin: 10s}\n",
			"reconcile.margin: 10s is shorter than 15s, the age RabbitMQ's queue statistics can have"},
		{"strand_after under the margin", "reconcile: {margin: 2m, strand_after: 1m}\n",
			"reconcile.strand_after: 1m0s must be at least reconcile.margin (2m0s)"},
		{"no unit", "reconcile: {strand_after: 300}\n", "reconcile.strand_after: duration 300 has no unit"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Load(writeConfig(t, validYAML+tt.yaml), env)
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.want)
		})
	}
}

// Issue 18, item 11: a problem names what to fix. An empty ${VAR} is
// named, once; a HOOKRELAY_* variable that set a key is named; a route or
// source is named by its name; a YAML error says its line, counted from 1,
// with its text; a secret that is no whsec_ says how to make one.
func TestConfigErrorsNameWhatToFix(t *testing.T) {
	t.Parallel()
	load := func(yaml string, env map[string]string) string {
		t.Helper()
		if env == nil {
			env = map[string]string{}
		}
		env["ACME_SECRET"] = "x"
		_, err := Load(writeConfig(t, yaml), envMap(env))
		require.Error(t, err)
		return err.Error()
	}
	msg := load(strings.Replace(validYAML, `"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"`, `"${BILLING_SIGNING_SECRET}"`, 1),
		map[string]string{"BILLING_SIGNING_SECRET": ""})
	want := "routes[billing].signing_secret (from ${BILLING_SIGNING_SECRET}, which is empty): is empty: set signing_secret or signing_secrets"
	require.Contains(t, msg, want)
	require.Equal(t, 1, strings.Count(msg, "routes[billing].signing_secret"), "said once:\n%s", msg)

	msg = load(validYAML, map[string]string{"HOOKRELAY_RECEIVER_READ_TIMEOUT": "10"})
	require.Contains(t, msg, `receiver.read_timeout (from HOOKRELAY_RECEIVER_READ_TIMEOUT): duration "10": write it with a unit`)

	msg = load(validYAML+"    timeout: 5\n", nil)
	require.Contains(t, msg, "routes[billing].timeout: duration 5 has no unit")

	msg = load(strings.Replace(validYAML, `"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"`, `"whsec_abc"`, 1), nil)
	require.Contains(t, msg, "routes[billing].signing_secret: must be whsec_ followed by standard base64 (make one with `hookrelay secret new`)")

	_, err := Load(writeConfig(t, "database:\n  url: [unclosed\nreceiver: {listen: x}\n"), envMap(nil))
	require.ErrorContains(t, err, `YAML syntax error on line 2: did not find expected ',' or ']' (line 2: "  url: [unclosed")`)
	_, err = Load(writeConfig(t, "database:\n  url: \"x\"\n bad_indent: 1\n"), envMap(nil))
	require.ErrorContains(t, err, `YAML syntax error on line 3: did not find expected key (line 3: " bad_indent: 1")`)
	_, err = Load(writeConfig(t, "database:\n  url: \"x\"\n\tamqp: 1\n"), envMap(nil))
	require.ErrorContains(t, err, "YAML syntax error on line 3: found character that cannot start any token", "a scanner's error keeps its line")
}

// Issue 38, security 1: team_routes.allowed_networks are networks in
// CIDR notation, from the file or the environment (comma-separated); an
// address, a network with bits past its length or an IPv4-mapped form is
// refused, naming the entry and what to write.
func TestTeamRoutesAllowedNetworks(t *testing.T) {
	t.Parallel()
	env := envMap(map[string]string{"ACME_SECRET": "x"})
	cfg, err := Load(writeConfig(t, validYAML), env)
	require.NoError(t, err)
	require.Empty(t, cfg.AllowedNetworks(), "default: none")

	cfg, err = Load(writeConfig(t, validYAML+"team_routes: {allowed_networks: [10.20.0.0/16, \"fd00:1::/32\"]}\n"), env)
	require.NoError(t, err)
	require.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16"), netip.MustParsePrefix("fd00:1::/32")}, cfg.AllowedNetworks())

	cfg, err = Load(writeConfig(t, validYAML), envMap(map[string]string{"ACME_SECRET": "x",
		"HOOKRELAY_TEAM_ROUTES_ALLOWED_NETWORKS": "127.0.0.0/8,::1/128"}))
	require.NoError(t, err)
	require.Equal(t, []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}, cfg.AllowedNetworks())

	for _, tt := range []struct{ entry, want string }{
		{"10.0.0.5", `team_routes.allowed_networks[0]: "10.0.0.5" is an address, not a network: write 10.0.0.5/32`},
		{"10.0.0.5/8", `team_routes.allowed_networks[0]: "10.0.0.5/8" has bits set past its length: write 10.0.0.0/8`},
		{"::ffff:10.0.0.0/104", `team_routes.allowed_networks[0]: "::ffff:10.0.0.0/104" is an IPv4-mapped network: write 10.0.0.0/8`},
		{"private", `team_routes.allowed_networks[0]: "private" is not a network in CIDR notation (10.20.0.0/16, fd00:1::/32)`},
	} {
		_, err := Load(writeConfig(t, validYAML+"team_routes: {allowed_networks: [\""+tt.entry+"\"]}\n"), env)
		require.Error(t, err, tt.entry)
		require.Contains(t, err.Error(), tt.want)
	}
}

// Issue 38, reliability 3: the relay's own purge has a default age, an
// interval, and keeps dead pairs unless told; an age needs its unit, and
// one under an hour (a slip of 30m for 30d) is refused.
func TestRetentionSettings(t *testing.T) {
	t.Parallel()
	env := envMap(map[string]string{"ACME_SECRET": "x"})
	cfg, err := Load(writeConfig(t, validYAML), env)
	require.NoError(t, err)
	require.Equal(t, Retention{DedupeWindow: 30 * 24 * time.Hour, MaxAge: 30 * 24 * time.Hour, Interval: time.Hour}, cfg.Retention)

	cfg, err = Load(writeConfig(t, validYAML+"retention: {max_age: 90d, dead_max_age: 180d, interval: 15m}\n"), env)
	require.NoError(t, err)
	require.Equal(t, Retention{DedupeWindow: 30 * 24 * time.Hour, MaxAge: 90 * 24 * time.Hour, DeadMaxAge: 180 * 24 * time.Hour, Interval: 15 * time.Minute}, cfg.Retention)
	cfg, err = Load(writeConfig(t, validYAML+"retention: {max_age: 0s}\n"), env)
	require.NoError(t, err)
	require.Zero(t, cfg.Retention.MaxAge, "off")

	for _, tt := range []struct{ name, yaml, want string }{
		{"no unit", "retention: {max_age: 30}\n", "retention.max_age: duration 30 has no unit"},
		{"under an hour", "retention: {max_age: 30m}\n", "retention.max_age: 30m is under an hour"},
		{"dead before the rest", "retention: {max_age: 30d, dead_max_age: 7d}\n", "retention.dead_max_age: 7d must be at least retention.max_age (30d)"},
		{"dead without the purge", "retention: {max_age: 0s, dead_max_age: 90d}\n", "retention.dead_max_age: is set, but retention.max_age is 0s"},
		{"interval too short", "retention: {interval: 10s}\n", "retention.interval: 10s must be from 1m to 24h"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Load(writeConfig(t, validYAML+tt.yaml), env)
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.want)
		})
	}
}
