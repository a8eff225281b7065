package extract

import (
	"errors"
	"net/http"
	"testing"

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
		{name: "invalid json", cfg: Config{IdempotencyPaths: []string{"id"}, EventTypePaths: []string{"type"}}, body: `{"id":`, wantErr: "body is not valid JSON"},
		{name: "missing key", cfg: Config{IdempotencyPaths: []string{"id"}, EventTypePaths: []string{"type"}}, body: `{"type":"a"}`, wantErr: `idempotency key: field "id" is missing`},
		{name: "null key", cfg: Config{IdempotencyPaths: []string{"id"}, EventTypePaths: []string{"type"}}, body: `{"id":null,"type":"a"}`, wantErr: `field "id" is null`},
		{name: "object key", cfg: Config{IdempotencyPaths: []string{"id"}, EventTypePaths: []string{"type"}}, body: `{"id":{},"type":"a"}`, wantErr: `field "id" is not a string`},
		{name: "empty type", cfg: Config{IdempotencyPaths: []string{"id"}, EventTypePaths: []string{"type"}}, body: `{"id":"1","type":" "}`, wantErr: `event type: field "type" is empty`},
		{name: "missing header", cfg: Config{EventTypeHeader: "X-Event"}, body: `x`, wantErr: "missing header X-Event (event type)"},
		{name: "control char in type", cfg: Config{EventTypePaths: []string{"t"}}, body: `{"t":"a\u0000b"}`, wantErr: "control character"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			x, err := New(tt.cfg)
			require.NoError(t, err)
			got, err := x.Extract(tt.header, []byte(tt.body))
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

func FuzzExtract(f *testing.F) {
	f.Add([]byte(`{"id":"evt_1","type":"invoice.paid"}`)) // the happy path
	f.Add([]byte(`{"id":1e400,"type":true}`))             // odd scalars
	f.Add([]byte(`{"id":"a","type":"\u0000"}`))           // control char
	f.Add([]byte(`[{"id":1}]`))                           // not an object
	f.Add([]byte{0xff, 0xfe})                             // not UTF-8
	x, err := New(Config{IdempotencyPaths: []string{"id", "data.purchase.transaction"}, EventTypePaths: []string{"type"}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		res, err := x.Extract(http.Header{}, body)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error is not *Error: %v", err)
			}
			return
		}
		if res.IdempotencyKey == "" || res.EventType == "" {
			t.Fatalf("accepted empty values: %+v", res)
		}
	})
}
