package app_test

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/stretchr/testify/require"
)

// bodyOnlyHarness is a receiver with github and shopify preset sources as
// config.Load makes them, plus the same two with dedupe_body: false.
func bodyOnlyHarness(t *testing.T) *harness {
	h := newHarness(t)
	yaml := "database: {url: \"postgres://x@127.0.0.1/x\"}\namqp: {url: \"amqp://x@127.0.0.1/\"}\nsources:\n"
	for _, s := range []struct{ name, preset, secret, extra string }{
		{"github", "github", "gh-secret", ""},
		{"shopify", "shopify", "shop-secret", ""},
		{"github-nodedupe", "github", "gh-secret", "    dedupe_body: false\n"},
		{"shopify-nodedupe", "shopify", "shop-secret", "    dedupe_body: false\n"},
	} {
		yaml += fmt.Sprintf("  - name: %s\n    preset: %s\n    verify: {secrets: [%q]}\n%s", s.name, s.preset, s.secret, s.extra)
	}
	loaded, err := config.Load(writeTemp(t, yaml), func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	h.cfg.Sources = loaded.Sources
	h.cfg.Routes = append(h.cfg.Routes, testRoute("all", "http://127.0.0.1:9/", "#"))
	amqptestCleanup(t, h)
	h.start(app.ReceiverOptions{})
	return h
}

func githubRequest(delivery, event, body string) http.Header {
	return http.Header{
		"X-Github-Hook-Id": {"4242"}, "X-Github-Delivery": {delivery}, "X-Github-Event": {event},
		"X-Hub-Signature-256": {"sha256=" + hex.EncodeToString(mac("gh-secret", body))},
	}
}

func shopifyRequest(id, topic, body string) http.Header {
	return http.Header{
		"X-Shopify-Webhook-Id": {id}, "X-Shopify-Topic": {topic},
		"X-Shopify-Hmac-Sha256": {base64.StdEncoding.EncodeToString(mac("shop-secret", body))},
	}
}

// GitHub and Shopify sign only the body, and their presets read the key and
// the event type from unsigned headers. A captured body resent with a new
// delivery id (or a new event type, to reach other routes) was a new event
// each time. With dedupe_body (on by default for both presets) an identical
// body is the same event whatever the headers say.
func TestGitHubAndShopifyBodyReplayIsDuplicate(t *testing.T) {
	t.Parallel()
	h := bodyOnlyHarness(t)
	ghBody := `{"ref":"refs/heads/main","after":"abc123"}`
	shopBody := `{"id":820982911946154508,"total_price":"10.00"}`

	for _, c := range []struct {
		source string
		first  http.Header
		replay []http.Header
	}{
		{"github", githubRequest("d-1", "push", ghBody), []http.Header{
			githubRequest("d-2", "push", ghBody),         // new delivery id
			githubRequest("d-3", "release", ghBody),      // new event type: other routes
			githubRequest("d-1", "workflow_run", ghBody), // same delivery, new type
		}},
		{"shopify", shopifyRequest("w-1", "orders/create", shopBody), []http.Header{
			shopifyRequest("w-2", "orders/create", shopBody),
			shopifyRequest("w-3", "orders/paid", shopBody),
		}},
	} {
		body := ghBody
		if c.source == "shopify" {
			body = shopBody
		}
		first := h.post(c.source, []byte(body), c.first)
		require.Equal(t, http.StatusOK, first.status, "%s genuine: %s", c.source, first.Error)
		require.False(t, first.Dup)
		for i, hdr := range c.replay {
			r := h.post(c.source, []byte(body), hdr)
			require.Equal(t, http.StatusOK, r.status, "%s replay %d: %s", c.source, i, r.Error)
			require.True(t, r.Dup, "%s replay %d: the same body is the same event", c.source, i)
			require.Equal(t, first.ID, r.ID, "%s replay %d answers the first event's id", c.source, i)
		}
		n, err := h.db.EventCount(context.Background(), c.source)
		require.NoError(t, err)
		require.EqualValues(t, 1, n, c.source)
	}

	// A different body is a new event, as before.
	r := h.post("github", []byte(`{"ref":"refs/heads/dev"}`), githubRequest("d-9", "push", `{"ref":"refs/heads/dev"}`))
	require.Equal(t, http.StatusOK, r.status, r.Error)
	require.False(t, r.Dup)

	// Only the first of each reached RabbitMQ, under its original type.
	h.waitOutboxEmpty(15 * time.Second)
	var keys []string
	for _, m := range amqptest.Drain(t, h.ch, h.names.RouteQueue("all")) {
		keys = append(keys, m.RoutingKey)
	}
	require.ElementsMatch(t, []string{"github.push", "shopify.orders/create", "github.push"}, keys)
}

// dedupe_body: false on a preset source turns it off: the headers decide,
// as they did before (for a sender that really sends identical bodies as
// distinct events).
func TestDedupeBodyCanBeTurnedOff(t *testing.T) {
	t.Parallel()
	h := bodyOnlyHarness(t)
	ghBody := `{"zen":"Keep it logically awesome."}`
	shopBody := `{"id":1}`
	for _, c := range []struct {
		source, body string
		a, b         http.Header
	}{
		{"github-nodedupe", ghBody, githubRequest("d-1", "ping", ghBody), githubRequest("d-2", "ping", ghBody)},
		{"shopify-nodedupe", shopBody, shopifyRequest("w-1", "orders/create", shopBody), shopifyRequest("w-2", "orders/create", shopBody)},
	} {
		require.False(t, h.post(c.source, []byte(c.body), c.a).Dup, c.source)
		require.False(t, h.post(c.source, []byte(c.body), c.b).Dup, "%s: a new delivery id is a new event", c.source)
		require.True(t, h.post(c.source, []byte(c.body), c.a).Dup, "%s: the same delivery id is still a duplicate", c.source)
	}
	var hashed int
	require.NoError(t, h.db.Pool().QueryRow(context.Background(),
		`SELECT count(*) FROM events WHERE body_sha256 IS NOT NULL`).Scan(&hashed))
	require.Zero(t, hashed, "no body hash is stored for a source without dedupe_body")
}
