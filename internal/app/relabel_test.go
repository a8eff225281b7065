package app_test

import (
	"encoding/hex"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/stretchr/testify/require"
	stripewebhook "github.com/stripe/stripe-go/v85/webhook"
	svix "github.com/svix/svix-webhooks/go"
)

// svixSigned returns the headers of a genuine request signed by Svix's own
// library, under the header family prefix ("svix" or "webhook").
func svixSigned(t *testing.T, prefix, id string, at time.Time, body []byte) http.Header {
	t.Helper()
	wh, err := svix.NewWebhook(standardSecret)
	require.NoError(t, err)
	sig, err := wh.Sign(id, at, body)
	require.NoError(t, err)
	h := http.Header{}
	h.Set(prefix+"-id", id)
	h.Set(prefix+"-timestamp", strconv.FormatInt(at.Unix(), 10))
	h.Set(prefix+"-signature", sig)
	return h
}

// moved copies the id, timestamp and signature of a captured request from
// one header family to the other, as an attacker replaying it would.
func moved(captured http.Header, from, to string) http.Header {
	h := http.Header{}
	for _, s := range []string{"-id", "-timestamp", "-signature"} {
		h.Set(to+s, captured.Get(from+s))
	}
	return h
}

// A captured Svix request replayed with its id, timestamp and signature under
// webhook-* and a new svix-id was a new event each time: the preset keyed on
// svix-id, which the verified webhook-* signature does not cover. The key is
// now the id whose signature matched; both families with different ids are
// a 401.
func TestSvixRelabelledRequestIsRejected(t *testing.T) {
	t.Parallel()
	h := presetHarness(t)
	now := time.Now()
	body := []byte(`{"type":"invoice.created","data":{"n":1}}`)

	for _, c := range []struct{ source, family, other string }{
		{"svix", "svix", "webhook"},
		{"sw", "webhook", "svix"},
	} {
		captured := svixSigned(t, c.family, "msg_"+c.source+"_1", now, body)
		first := h.post(c.source, body, captured)
		require.Equal(t, http.StatusOK, first.status, "%s genuine: %s", c.source, first.Error)
		require.False(t, first.Dup)

		// The signed headers moved to the other family, a new id under the
		// preset's old key header.
		relabelled := moved(captured, c.family, c.other)
		relabelled.Set(c.family+"-id", "msg_attacker_"+c.source)
		r := h.post(c.source, body, relabelled)
		require.Equal(t, http.StatusUnauthorized, r.status, "%s relabelled: %s", c.source, r.Error)
		require.Contains(t, r.Error, "webhook-id and svix-id differ", c.source)

		// Only moved: the same signed id, so the same event.
		r = h.post(c.source, body, moved(captured, c.family, c.other))
		require.Equal(t, http.StatusOK, r.status, "%s moved: %s", c.source, r.Error)
		require.True(t, r.Dup, "%s: the signed id is the key, whichever family carried it", c.source)
		require.Equal(t, first.ID, r.ID)
	}
	require.EqualValues(t, 2, h.storedEvents(), "three tries per source, one event each")
}

// A source written by hand with scheme standard-webhooks and a raw id header
// as its key cannot be relabelled either: the header it keys on must agree
// with the verified id, or the request is a 401.
func TestStandardWebhooksHeaderKeyCannotBeRelabelled(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, header := range []string{"svix-id", "webhook-id"} {
		h.cfg.Sources = append(h.cfg.Sources, config.Source{
			Name:        "by-" + header,
			Verify:      config.Verify{Scheme: "standard-webhooks", Secrets: []string{standardSecret}},
			Idempotency: config.Idempotency{Header: header},
			EventType:   config.EventType{JSONPath: "type"},
		})
	}
	h.start(app.ReceiverOptions{DisablePublisher: true})
	now := time.Now()
	body := []byte(`{"type":"user.created"}`)

	for _, c := range []struct{ header, family, other string }{
		{"svix-id", "svix", "webhook"},
		{"webhook-id", "webhook", "svix"},
	} {
		source := "by-" + c.header
		captured := svixSigned(t, c.family, "msg_"+c.family, now, body)
		first := h.post(source, body, captured)
		require.Equal(t, http.StatusOK, first.status, "%s genuine: %s", source, first.Error)

		relabelled := moved(captured, c.family, c.other)
		relabelled.Set(c.header, "msg_attacker")
		r := h.post(source, body, relabelled)
		require.Equal(t, http.StatusUnauthorized, r.status, "%s relabelled: %s", source, r.Error)

		// Both families, the key header new and the other one genuine.
		both := captured.Clone()
		for k, v := range moved(captured, c.family, c.other) {
			both[k] = v
		}
		both.Set(c.header, "msg_attacker_2")
		r = h.post(source, body, both)
		require.Equal(t, http.StatusUnauthorized, r.status, "%s both families: %s", source, r.Error)
	}
	require.EqualValues(t, 2, h.storedEvents(), "only the genuine requests")
}

// Stripe, Paddle and Slack sign the body, and their presets take the key and
// the event type from it: no header a replayer adds or changes makes a new
// event or reaches another route.
func TestSignedBodyPresetsIgnoreRelabelledHeaders(t *testing.T) {
	t.Parallel()
	h := presetHarness(t)
	now := time.Now()
	ts := strconv.FormatInt(now.Unix(), 10)

	stripeBody := `{"id":"evt_rl_1","type":"invoice.paid"}`
	p := stripewebhook.GenerateTestSignedPayload(&stripewebhook.UnsignedPayload{Payload: []byte(stripeBody), Secret: stripeSecret, Timestamp: now})
	paddleBody := `{"event_id":"evt_rl_p","event_type":"transaction.completed"}`
	slackBody := `{"event_id":"EvRL","type":"event_callback","event":{"type":"message"}}`
	for _, c := range []struct {
		source, body string
		header       http.Header
	}{
		{"stripe", stripeBody, http.Header{"Stripe-Signature": {p.Header}}},
		{"paddle", paddleBody, http.Header{"Paddle-Signature": {"ts=" + ts + ";h1=" + hex.EncodeToString(mac("pdl-secret", ts+":"+paddleBody))}}},
		{"slack", slackBody, http.Header{
			"X-Slack-Request-Timestamp": {ts},
			"X-Slack-Signature":         {"v0=" + hex.EncodeToString(mac("slack-secret", "v0:"+ts+":"+slackBody))},
		}},
	} {
		first := h.post(c.source, []byte(c.body), c.header)
		require.Equal(t, http.StatusOK, first.status, "%s genuine: %s", c.source, first.Error)
		require.False(t, first.Dup)

		relabelled := c.header.Clone()
		for k, v := range map[string]string{
			"Idempotency-Key": "new-key", "X-Event-Type": "customer.deleted", "X-Request-Id": "r-2",
			"webhook-id": "msg_new", "svix-id": "msg_new", "X-GitHub-Delivery": "d-new", "X-Shopify-Topic": "orders/paid",
		} {
			relabelled.Set(k, v)
		}
		r := h.post(c.source, []byte(c.body), relabelled)
		require.Equal(t, http.StatusOK, r.status, "%s relabelled: %s", c.source, r.Error)
		require.True(t, r.Dup, "%s: relabelled headers are the same event", c.source)
		require.Equal(t, first.ID, r.ID)
	}
	require.EqualValues(t, 3, h.storedEvents())
}
