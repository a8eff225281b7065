package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/stretchr/testify/require"
)

// postRaw sends body with exactly the given headers: unlike post, it does not
// set Content-Type.
func (h *harness) postRaw(source string, body []byte, header http.Header) reply {
	h.t.Helper()
	req, err := http.NewRequest(http.MethodPost, h.base+"/webhooks/"+source, bytes.NewReader(body))
	require.NoError(h.t, err)
	req.Header = header
	resp, err := h.client.Do(req)
	require.NoError(h.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(h.t, err)
	var r reply
	require.NoError(h.t, json.Unmarshal(raw, &r), "body %s", raw)
	r.status = resp.StatusCode
	return r
}

// inputHarness is the default harness plus a source that takes its key and
// type from headers.
func inputHarness(t *testing.T) *harness {
	h := newHarness(t)
	h.cfg.Sources = append(h.cfg.Sources, config.Source{
		Name:        "hdr",
		Verify:      config.Verify{Scheme: "hmac", Secrets: []string{acmeSecret}, Header: "X-Acme-Signature", Prefix: "sha256="},
		Idempotency: config.Idempotency{Header: "X-Delivery"},
		EventType:   config.EventType{Header: "X-Event"},
	})
	h.start(app.ReceiverOptions{DisablePublisher: true})
	return h
}

// A key, an event type or a Content-Type that Postgres (or RabbitMQ) could
// never take is the sender's error: 400 naming the problem, nothing stored.
// Before, each of these reached the insert, which failed, and the sender got
// 503 "retry later" for ever.
func TestUnstorableInputIsRejectedWith400(t *testing.T) {
	t.Parallel()
	h := inputHarness(t)

	signed := func(body string, extra http.Header) http.Header {
		hdr := http.Header{"Content-Type": {"application/json"}}
		for k, v := range extra {
			hdr[k] = v
		}
		hdr.Set("X-Acme-Signature", sign(acmeSecret, []byte(body)))
		return hdr
	}
	good := `{"id":"evt_ok","type":"invoice.paid"}`
	tests := []struct {
		name    string
		source  string
		body    string
		header  http.Header
		wantErr string
	}{
		{"NUL in the key", "acme", `{"id":"evt\u0000x","type":"invoice.paid"}`, nil, "contains a NUL byte"},
		{"invalid UTF-8 in the key", "acme", "{\"id\":\"evt\xff\xfe\",\"type\":\"invoice.paid\"}", nil, "is not valid UTF-8"},
		{"NUL in the event type", "acme", `{"id":"evt_3","type":"invoice.\u0000"}`, nil, "contains a NUL byte"},
		{"invalid UTF-8 in the event type", "acme", "{\"id\":\"evt_4\",\"type\":\"invoice.\xff\"}", nil, "is not valid UTF-8"},
		{"invalid UTF-8 in a key header", "hdr", `{}`, http.Header{"X-Delivery": {"d-\xff"}, "X-Event": {"push"}}, "header X-Delivery is not valid UTF-8"},
		{"invalid UTF-8 in a type header", "hdr", `{}`, http.Header{"X-Delivery": {"d-1"}, "X-Event": {"push\xc3"}}, "is not valid UTF-8"},
		{"Content-Type above 0x7f", "acme", good, http.Header{"Content-Type": {"application/json; charset=\xff"}}, "Content-Type must be printable ASCII"},
		{"Content-Type in UTF-8", "acme", good, http.Header{"Content-Type": {"application/jsön"}}, "Content-Type must be printable ASCII"},
		{"Content-Type over 255 bytes", "acme", good, http.Header{"Content-Type": {"application/json; x=" + strings.Repeat("a", 250)}}, "Content-Type is longer than 255 bytes"},
	}
	for _, tt := range tests {
		r := h.postRaw(tt.source, []byte(tt.body), signed(tt.body, tt.header))
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", tt.name, r.Error)
		require.Contains(t, r.Error, tt.wantErr, tt.name)
	}
	require.Zero(t, h.storedEvents(), "no rejected request stored an event")
	require.Zero(t, h.outboxBacklog(), "nor an outbox row")
}

// Go's HTTP server refuses NUL and other control bytes in headers itself;
// bytes above 0x7f reach us. A header value that is not UTF-8 cannot go into
// the stored jsonb as sent: it is left out of the stored headers, and the
// event (whose body is stored byte for byte) is still accepted.
func TestHeaderThatIsNotUTF8IsLeftOutOfStoredHeaders(t *testing.T) {
	t.Parallel()
	h := inputHarness(t)
	body := `{"id":"evt_hdr","type":"invoice.paid"}`
	hdr := http.Header{
		"Content-Type":     {"application/json"},
		"X-Acme-Signature": {sign(acmeSecret, []byte(body))},
		"X-Latin1":         {"caf\xe9"},
		"X-Utf8":           {"café"},
	}
	r := h.postRaw("acme", []byte(body), hdr)
	require.Equal(t, http.StatusOK, r.status, r.Error)

	var headers map[string][]string
	var key string
	require.NoError(t, h.db.Pool().QueryRow(context.Background(),
		`SELECT idempotency_key, headers FROM events WHERE id = $1`, r.ID).Scan(&key, &headers))
	require.Equal(t, "evt_hdr", key)
	require.NotContains(t, headers, "X-Latin1", "a value that is not UTF-8 is left out")
	require.Equal(t, []string{"café"}, headers["X-Utf8"], "valid UTF-8 is kept as sent")
}
