package app_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // Kiwify signs with HMAC-SHA1
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/config"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"
	stripewebhook "github.com/stripe/stripe-go/v85/webhook"
	svix "github.com/svix/svix-webhooks/go"
)

const (
	stripeSecret   = "whsec_stripe_test_secret"
	standardSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	otherStandard  = "whsec_b3RoZXItc2VjcmV0LTEyMzQ1Njc4OTA="
)

// presetHarness is a receiver with one source per provider preset and a
// route that binds everything, so routing keys can be read back.
func presetHarness(t *testing.T) *harness {
	h := newHarness(t)
	src := func(name, preset string, verify config.Verify) config.Source {
		return config.Source{Name: name, Preset: preset, Verify: verify}
	}
	h.cfg.Sources = []config.Source{
		src("stripe", "stripe", config.Verify{Secrets: []string{stripeSecret}}),
		src("sw", "standard-webhooks", config.Verify{Secrets: []string{standardSecret}}),
		src("svix", "svix", config.Verify{Secrets: []string{standardSecret}}),
		src("github", "github", config.Verify{Secrets: []string{"gh-secret"}}),
		src("shopify", "shopify", config.Verify{Secrets: []string{"shop-secret"}}),
		src("slack", "slack", config.Verify{Secrets: []string{"slack-secret"}}),
		src("paddle", "paddle", config.Verify{Secrets: []string{"pdl-secret"}}),
		src("kiwify", "kiwify", config.Verify{Secrets: []string{"kiwify-token"}}),
		src("hotmart", "hotmart", config.Verify{Secrets: []string{"hottok"}}),
		src("asaas", "asaas", config.Verify{Secrets: []string{"asaas-token"}}),
	}
	// Fill in what the presets say, as config.Load does.
	h.cfg = applyPresets(t, h.cfg)
	h.cfg.Routes = append(h.cfg.Routes, testRoute("all", "http://127.0.0.1:9/", "#"))
	amqptestCleanup(t, h)
	h.start(app.ReceiverOptions{})
	return h
}

// applyPresets resolves presets through the real loader: it writes the
// sources to a file and loads it.
func applyPresets(t *testing.T, cfg *config.Config) *config.Config {
	t.Helper()
	yaml := "database: {url: \"postgres://x@127.0.0.1/x\"}\namqp: {url: \"amqp://x@127.0.0.1/\"}\nsources:\n"
	for _, s := range cfg.Sources {
		yaml += fmt.Sprintf("  - name: %s\n    preset: %s\n    verify: {secrets: [%q]}\n", s.Name, s.Preset, s.Verify.Secrets[0])
	}
	loaded, err := config.Load(writeTemp(t, yaml), func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	out := *cfg
	out.Sources = loaded.Sources
	return &out
}

func writeTemp(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

func mac(key, msg string) []byte {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(msg))
	return m.Sum(nil)
}

func (h *harness) storedEvents() int64 {
	h.t.Helper()
	n, err := h.db.EventCount(context.Background(), "")
	require.NoError(h.t, err)
	return n
}

// Genuine requests signed by the providers' own libraries are accepted;
// every kind of forgery is rejected with 401 and stores nothing.
func TestProviderLibrariesThroughReceiver(t *testing.T) {
	t.Parallel()
	h := presetHarness(t)
	now := time.Now()
	body := []byte(`{"id":"evt_lib_1","type":"invoice.paid","data":{"amount":100}}`)
	reserialised := []byte(`{"id": "evt_lib_1", "type": "invoice.paid", "data": {"amount": 100}}`)
	tampered := []byte(`{"id":"evt_lib_1","type":"invoice.paid","data":{"amount":999}}`)

	stripeHeader := func(secret string, at time.Time) http.Header {
		p := stripewebhook.GenerateTestSignedPayload(&stripewebhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: at})
		return http.Header{"Stripe-Signature": {p.Header}}
	}
	standardHeader := func(secret string, at time.Time, prefix string) http.Header {
		var sig string
		if prefix == "svix" {
			wh, err := svix.NewWebhook(secret)
			require.NoError(t, err)
			sig, err = wh.Sign("msg_lib_1", at, body)
			require.NoError(t, err)
		} else {
			wh, err := standardwebhooks.NewWebhook(secret)
			require.NoError(t, err)
			sig, err = wh.Sign("msg_lib_1", at, body)
			require.NoError(t, err)
		}
		h := http.Header{}
		h.Set(prefix+"-id", "msg_lib_1")
		h.Set(prefix+"-timestamp", strconv.FormatInt(at.Unix(), 10))
		h.Set(prefix+"-signature", sig)
		return h
	}

	type attempt struct {
		name   string
		source string
		body   []byte
		header http.Header
		status int
	}
	var attempts []attempt
	for _, p := range []struct {
		source string
		sign   func(secret string, at time.Time) http.Header
		secret string
		other  string
	}{
		{"stripe", stripeHeader, stripeSecret, "whsec_another_secret"},
		{"sw", func(s string, at time.Time) http.Header { return standardHeader(s, at, "webhook") }, standardSecret, otherStandard},
		{"svix", func(s string, at time.Time) http.Header { return standardHeader(s, at, "svix") }, standardSecret, otherStandard},
	} {
		attempts = append(attempts,
			attempt{p.source + " tampered body", p.source, tampered, p.sign(p.secret, now), http.StatusUnauthorized},
			attempt{p.source + " wrong secret", p.source, body, p.sign(p.other, now), http.StatusUnauthorized},
			attempt{p.source + " stale timestamp", p.source, body, p.sign(p.secret, now.Add(-10*time.Minute)), http.StatusUnauthorized},
			attempt{p.source + " future timestamp", p.source, body, p.sign(p.secret, now.Add(10*time.Minute)), http.StatusUnauthorized},
			attempt{p.source + " re-serialised JSON", p.source, reserialised, p.sign(p.secret, now), http.StatusUnauthorized},
			attempt{p.source + " missing headers", p.source, body, http.Header{}, http.StatusUnauthorized},
		)
	}
	for _, a := range attempts {
		r := h.post(a.source, a.body, a.header)
		require.Equal(t, a.status, r.status, "%s: %s", a.name, r.Error)
		require.NotEmpty(t, r.Error, a.name)
	}
	require.Zero(t, h.storedEvents(), "no rejected request stored anything")

	for _, g := range []struct {
		source string
		header http.Header
	}{
		{"stripe", stripeHeader(stripeSecret, now)},
		{"sw", standardHeader(standardSecret, now, "webhook")},
		{"svix", standardHeader(standardSecret, now, "svix")},
	} {
		r := h.post(g.source, body, g.header)
		require.Equal(t, http.StatusOK, r.status, "%s genuine: %s", g.source, r.Error)
	}
	require.EqualValues(t, 3, h.storedEvents())
}

// A request shaped like each provider's is accepted, deduplicated on the
// preset's key and routed as "<source>.<event type>".
func TestPresetsEndToEnd(t *testing.T) {
	t.Parallel()
	h := presetHarness(t)
	now := time.Now()
	ts := strconv.FormatInt(now.Unix(), 10)

	type req struct {
		source string
		body   string
		header http.Header
		query  string
	}
	stripe := func(body string) req {
		p := stripewebhook.GenerateTestSignedPayload(&stripewebhook.UnsignedPayload{Payload: []byte(body), Secret: stripeSecret})
		return req{"stripe", body, http.Header{"Stripe-Signature": {p.Header}}, ""}
	}
	standard := func(source, prefix, id, body string) req {
		wh, err := standardwebhooks.NewWebhook(standardSecret)
		require.NoError(t, err)
		sig, err := wh.Sign(id, now, []byte(body))
		require.NoError(t, err)
		h := http.Header{}
		h.Set(prefix+"-id", id)
		h.Set(prefix+"-timestamp", ts)
		h.Set(prefix+"-signature", sig)
		return req{source, body, h, ""}
	}
	github := func(delivery, event, body string) req {
		return req{"github", body, http.Header{
			"X-Github-Hook-Id": {"4242"}, "X-Github-Delivery": {delivery}, "X-Github-Event": {event},
			"X-Hub-Signature-256": {"sha256=" + hex.EncodeToString(mac("gh-secret", body))},
		}, ""}
	}
	shopify := func(id, topic, body string) req {
		return req{"shopify", body, http.Header{
			"X-Shopify-Webhook-Id": {id}, "X-Shopify-Topic": {topic},
			"X-Shopify-Hmac-Sha256": {base64.StdEncoding.EncodeToString(mac("shop-secret", body))},
		}, ""}
	}
	slack := func(body string) req {
		return req{"slack", body, http.Header{
			"X-Slack-Request-Timestamp": {ts},
			"X-Slack-Signature":         {"v0=" + hex.EncodeToString(mac("slack-secret", "v0:"+ts+":"+body))},
		}, ""}
	}
	paddle := func(body string) req {
		return req{"paddle", body, http.Header{
			"Paddle-Signature": {"ts=" + ts + ";h1=" + hex.EncodeToString(mac("pdl-secret", ts+":"+body))},
		}, ""}
	}
	kiwify := func(body string) req {
		m := hmac.New(sha1.New, []byte("kiwify-token"))
		m.Write([]byte(body))
		return req{"kiwify", body, http.Header{}, "signature=" + hex.EncodeToString(m.Sum(nil))}
	}
	token := func(source, header, tok, body string) req {
		return req{source, body, http.Header{header: {tok}}, ""}
	}

	reqs := []struct {
		r       req
		dup     bool
		routing string
	}{
		{stripe(`{"id":"evt_1","type":"invoice.paid"}`), false, "stripe.invoice.paid"},
		{stripe(`{"id":"evt_1","type":"invoice.paid"}`), true, ""},
		{standard("sw", "webhook", "msg_1", `{"type":"user.created","data":{}}`), false, "sw.user.created"},
		{standard("sw", "webhook", "msg_1", `{"type":"user.created","data":{}}`), true, ""},
		{standard("svix", "svix", "msg_2", `{"type":"invoice.created"}`), false, "svix.invoice.created"},
		{github("d-1", "push", `{"ref":"main"}`), false, "github.push"},
		{github("d-1", "push", `{"ref":"main"}`), true, ""},
		// GitHub signs only the body: a new delivery id on the same body is
		// the same event (dedupe_body), a new body is a new one.
		{github("d-2", "push", `{"ref":"main"}`), true, ""},
		{github("d-3", "push", `{"ref":"dev"}`), false, "github.push"},
		{shopify("w-1", "orders/create", `{"id":1}`), false, "shopify.orders/create"},
		{shopify("w-1", "orders/create", `{"id":1}`), true, ""},
		{slack(`{"event_id":"Ev1","type":"event_callback","event":{"type":"message"}}`), false, "slack.message"},
		{slack(`{"event_id":"Ev1","type":"event_callback","event":{"type":"message"}}`), true, ""},
		{paddle(`{"event_id":"evt_p1","event_type":"transaction.completed"}`), false, "paddle.transaction.completed"},
		// The same Kiwify order sends several events: each is kept once.
		{kiwify(`{"order_id":"o-1","webhook_event_type":"order_approved"}`), false, "kiwify.order_approved"},
		{kiwify(`{"order_id":"o-1","webhook_event_type":"order_refunded"}`), false, "kiwify.order_refunded"},
		{kiwify(`{"order_id":"o-1","webhook_event_type":"order_approved"}`), true, ""},
		{token("hotmart", "X-HOTMART-HOTTOK", "hottok", `{"event":"PURCHASE_APPROVED","data":{"purchase":{"transaction":"HP1"}}}`), false, "hotmart.PURCHASE_APPROVED"},
		{token("hotmart", "X-HOTMART-HOTTOK", "hottok", `{"event":"PURCHASE_REFUNDED","data":{"purchase":{"transaction":"HP1"}}}`), false, "hotmart.PURCHASE_REFUNDED"},
		{token("asaas", "asaas-access-token", "asaas-token", `{"id":"evt_a1","event":"PAYMENT_RECEIVED"}`), false, "asaas.PAYMENT_RECEIVED"},
		{token("asaas", "asaas-access-token", "asaas-token", `{"id":"evt_a1","event":"PAYMENT_RECEIVED"}`), true, ""},
	}
	var wantKeys []string
	for i, c := range reqs {
		source := c.r.source
		if c.r.query != "" {
			source += "?" + c.r.query
		}
		r := h.post(source, []byte(c.r.body), c.r.header)
		require.Equal(t, http.StatusOK, r.status, "request %d (%s): %s", i, c.r.source, r.Error)
		require.Equal(t, c.dup, r.Dup, "request %d (%s)", i, c.r.source)
		if !c.dup {
			wantKeys = append(wantKeys, c.routing)
		}
	}
	h.waitOutboxEmpty(15 * time.Second)
	var gotKeys []string
	for _, m := range amqptest.Drain(t, h.ch, h.names.RouteQueue("all")) {
		gotKeys = append(gotKeys, m.RoutingKey)
	}
	sort.Strings(wantKeys)
	sort.Strings(gotKeys)
	require.Equal(t, wantKeys, gotKeys)

	// Tokens are credentials: they are not stored with the event.
	var stored int
	require.NoError(t, h.db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM events WHERE headers ? 'X-Hotmart-Hottok' OR headers ? 'Asaas-Access-Token'`).Scan(&stored))
	require.Zero(t, stored)

	// A token or signature that does not match is a 401 for every preset.
	for _, bad := range []req{
		token("hotmart", "X-HOTMART-HOTTOK", "wrong", `{"event":"E","data":{"purchase":{"transaction":"HP9"}}}`),
		{"kiwify", `{"order_id":"o-9","webhook_event_type":"x"}`, http.Header{}, "signature=" + hex.EncodeToString(make([]byte, 20))},
		{"github", `{}`, http.Header{"X-Github-Delivery": {"d"}, "X-Github-Event": {"push"}, "X-Hub-Signature-256": {"sha256=00"}}, ""},
	} {
		source := bad.source
		if bad.query != "" {
			source += "?" + bad.query
		}
		require.Equal(t, http.StatusUnauthorized, h.post(source, []byte(bad.body), bad.header).status, bad.source)
	}
}
