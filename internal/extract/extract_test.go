package extract

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestExtract(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     Config
		header  http.Header
		body    string
		want    Result
		wantErr string
	}{
		{
			name: "json paths",
			cfg:  Config{IdempotencyPaths: []string{"id"}, EventTypePaths: []string{"type"}},
			body: `{"id":"evt_1","type":"invoice.paid"}`,
			want: Result{IdempotencyKey: "evt_1", EventType: "invoice.paid"},
		},
		{
			name: "nested and joined paths, escaped",
			cfg:  Config{IdempotencyPaths: []string{"order.id", "event"}, EventTypePaths: []string{"event"}},
			body: `{"order":{"id":"o:1"},"event":"order_approved"}`,
			want: Result{IdempotencyKey: `o\:1:order_approved`, EventType: "order_approved"},
		},
		{
			name: "big number kept exact",
			cfg:  Config{IdempotencyPaths: []string{"id"}, EventTypePaths: []string{"t"}},
			body: `{"id":12345678901234567890,"t":"x"}`,
			want: Result{IdempotencyKey: "12345678901234567890", EventType: "x"},
		},
		{
			name:   "headers",
			cfg:    Config{IdempotencyHeaders: []string{"X-Hook-Id", "X-Delivery"}, EventTypeHeader: "X-Event"},
			header: http.Header{"X-Hook-Id": {"7"}, "X-Delivery": {"d-1"}, "X-Event": {"push"}},
			body:   `not json is fine here`,
			want:   Result{IdempotencyKey: "7:d-1", EventType: "push"},
		},
		{
			name:   "no rule hashes the body",
			cfg:    Config{EventTypeHeader: "X-Event"},
			header: http.Header{"X-Event": {"push"}},
			body:   `abc`,
			want:   Result{IdempotencyKey: "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", EventType: "push"},
		},
		{
			name: "first present of several type paths",
			cfg:  Config{IdempotencyPaths: []string{"event_id"}, EventTypePaths: []string{"event.type", "type"}},
			body: `{"event_id":"Ev1","type":"url_verification"}`,
			want: Result{IdempotencyKey: "Ev1", EventType: "url_verification"},
		},
		{
			name: "first path wins when present",
			cfg:  Config{IdempotencyPaths: []string{"event_id"}, EventTypePaths: []string{"event.type", "type"}},
			body: `{"event_id":"Ev1","type":"event_callback","event":{"type":"message"}}`,
			want: Result{IdempotencyKey: "Ev1", EventType: "message"},
		},
		{
			name: "signed id first, then paths",
			cfg:  Config{IdempotencySignedID: true, IdempotencyPaths: []string{"n"}, EventTypePaths: []string{"type"}},
			body: `{"n":"2","type":"user.created"}`,
			want: Result{IdempotencyKey: "msg_1:2", EventType: "user.created"},
		},
		{name: "invalid json", cfg: Config{IdempotencyPaths: []string{"id"}, EventTypePaths: []string{"type"}}, body: `{"id":`, wantErr: "body is not valid JSON"},
		{name: "missing key", cfg: Config{IdempotencyPaths: []string{"id"}, EventTypePaths: []string{"type"}}, body: `{"type":"a"}`, wantErr: `idempotency key: field "id" is missing`},
		{name: "null key", cfg: Config{IdempotencyPaths: []string{"id"}, EventTypePaths: []string{"type"}}, body: `{"id":null,"type":"a"}`, wantErr: `field "id" is null`},
		{name: "object key", cfg: Config{IdempotencyPaths: []string{"id"}, EventTypePaths: []string{"type"}}, body: `{"id":{},"type":"a"}`, wantErr: `field "id" is not a string`},
		{name: "empty type", cfg: Config{IdempotencyPaths: []string{"id"}, EventTypePaths: []string{"type"}}, body: `{"id":"1","type":" "}`, wantErr: `event type: field "type" is empty`},
		{name: "missing header", cfg: Config{EventTypeHeader: "X-Event"}, body: `x`, wantErr: "missing header X-Event (event type)"},
		{name: "control char in type", cfg: Config{EventTypePaths: []string{"t"}}, body: `{"t":"a\u0001b"}`, wantErr: "control character"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			x, err := New(tt.cfg)
			require.NoError(t, err)
			got, err := x.Extract(Input{Header: tt.header, Body: []byte(tt.body), SignedID: "msg_1"})
			if tt.wantErr != "" {
				var e *Error
				require.True(t, errors.As(err, &e), "want *Error, got %v", err)
				require.Contains(t, e.Message, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

// FuzzExtract checks that whatever Extract accepts can be stored and routed:
// a non-empty key and event type, valid UTF-8 without NUL (Postgres text
// refuses both), within the length limits, and an event type without control
// characters. Anything else must be an *Error (a 400), never a value that
// fails later at the insert (a 503 the sender retries for ever). The string
// argument is both a header value and a verified signed id: either reaches
// Extract with any bytes above 0x7f.
func FuzzExtract(f *testing.F) {
	f.Add([]byte(`{"id":"evt_1","type":"invoice.paid"}`), "d-1")                                             // the happy path
	f.Add([]byte(`{"id":1e400,"type":true}`), "d-1")                                                         // odd scalars
	f.Add([]byte(`{"id":"a","type":"\u0000"}`), "d-1")                                                       // NUL in the type
	f.Add([]byte(`{"id":"a","data":{"purchase":{"transaction":"t\u0000"}},"type":"t"}`), "d-1")              // NUL in the key
	f.Add([]byte("{\"id\":\"\xff\xfe\",\"data\":{\"purchase\":{\"transaction\":1}},\"type\":\"t\"}"), "d-1") // key not UTF-8
	f.Add([]byte(`{"id":"\ud800","data":{"purchase":{"transaction":1}},"type":"t"}`), "d-1")                 // lone surrogate
	f.Add([]byte(`[{"id":1}]`), "d-1")                                                                       // not an object
	f.Add([]byte{0xff, 0xfe}, "d-1")                                                                         // not UTF-8
	f.Add([]byte(`{"id":"evt_1","type":"invoice.paid"}`), "d-\xff")                                          // header not UTF-8
	f.Add([]byte(`{"id":"evt_1","type":"invoice.paid"}`), "d\x00")                                           // NUL in a header
	f.Add([]byte(`{"id":"evt_1","type":"invoice.paid"}`), " \t ")                                            // blank header
	body, err := New(Config{IdempotencyPaths: []string{"id", "data.purchase.transaction"}, EventTypePaths: []string{"type"}})
	if err != nil {
		f.Fatal(err)
	}
	hdr, err := New(Config{IdempotencyHeaders: []string{"X-Delivery"}, EventTypePaths: []string{"type"}})
	if err != nil {
		f.Fatal(err)
	}
	signed, err := New(Config{IdempotencySignedID: true, EventTypeHeader: "X-Delivery"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw []byte, delivery string) {
		for _, x := range []*Extractor{body, hdr, signed} {
			res, err := x.Extract(Input{Header: http.Header{"X-Delivery": {delivery}}, Body: raw, SignedID: delivery})
			if err != nil {
				var e *Error
				if !errors.As(err, &e) {
					t.Fatalf("error is not *Error: %v", err)
				}
				continue
			}
			checkStorable(t, "idempotency key", res.IdempotencyKey, maxKeyLen)
			checkStorable(t, "event type", res.EventType, maxEventTypeLen)
			for _, r := range res.EventType {
				if unicode.IsControl(r) {
					t.Fatalf("accepted an event type with a control character: %q", res.EventType)
				}
			}
		}
	})
}

func checkStorable(t *testing.T, what, v string, maxLen int) {
	t.Helper()
	switch {
	case v == "":
		t.Fatalf("accepted an empty %s", what)
	case len(v) > maxLen:
		t.Fatalf("accepted %s of %d bytes, limit %d", what, len(v), maxLen)
	case strings.IndexByte(v, 0) >= 0:
		t.Fatalf("accepted %s with a NUL byte: %q", what, v)
	case !utf8.ValidString(v):
		t.Fatalf("accepted %s that is not UTF-8: %q", what, v)
	}
}
