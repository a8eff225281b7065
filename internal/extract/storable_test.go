package extract

import (
	"errors"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// Postgres refuses text holding NUL or invalid UTF-8. A key or event type
// like that could never be stored, so it is the sender's error (400), not a
// storage failure (503) the sender would retry for ever.
func TestUnstorableKeyOrTypeIsRejected(t *testing.T) {
	t.Parallel()
	paths := Config{IdempotencyPaths: []string{"id"}, EventTypePaths: []string{"type"}}
	headers := Config{IdempotencyHeaders: []string{"X-Delivery"}, EventTypeHeader: "X-Event"}
	signed := Config{IdempotencySignedID: true, EventTypePaths: []string{"type"}}
	tests := []struct {
		name     string
		cfg      Config
		header   http.Header
		signedID string
		body     string
		wantErr  string
	}{
		{name: "NUL in a JSON key", cfg: paths, body: `{"id":"evt\u0000x","type":"a"}`, wantErr: `idempotency key: field "id" contains a NUL byte`},
		{name: "invalid UTF-8 in a JSON key", cfg: paths, body: "{\"id\":\"evt\xff\xfe\",\"type\":\"a\"}", wantErr: `idempotency key: field "id" is not valid UTF-8`},
		{name: "NUL in a JSON type", cfg: paths, body: `{"id":"1","type":"a\u0000"}`, wantErr: "event type contains a NUL byte"},
		{name: "invalid UTF-8 in a JSON type", cfg: paths, body: "{\"id\":\"1\",\"type\":\"a\xff\"}", wantErr: "event type is not valid UTF-8"},
		{name: "invalid UTF-8 in a key header", cfg: headers, header: http.Header{"X-Delivery": {"d\xff"}, "X-Event": {"push"}}, body: `x`, wantErr: "idempotency key: header X-Delivery is not valid UTF-8"},
		{name: "NUL in a key header", cfg: headers, header: http.Header{"X-Delivery": {"d\x00"}, "X-Event": {"push"}}, body: `x`, wantErr: "idempotency key: header X-Delivery contains a NUL byte"},
		{name: "invalid UTF-8 in a type header", cfg: headers, header: http.Header{"X-Delivery": {"d"}, "X-Event": {"p\xc3"}}, body: `x`, wantErr: "event type is not valid UTF-8"},
		{name: "NUL in a signed id", cfg: signed, signedID: "msg\x00", body: `{"type":"a"}`, wantErr: "idempotency key: signed id contains a NUL byte"},
		{name: "invalid UTF-8 in a signed id", cfg: signed, signedID: "msg\xff", body: `{"type":"a"}`, wantErr: "idempotency key: signed id is not valid UTF-8"},
		{name: "no signed id", cfg: signed, body: `{"type":"a"}`, wantErr: "no signed message id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			x, err := New(tt.cfg)
			require.NoError(t, err)
			_, err = x.Extract(Input{Header: tt.header, Body: []byte(tt.body), SignedID: tt.signedID})
			var e *Error
			require.True(t, errors.As(err, &e), "want *Error, got %v", err)
			require.Contains(t, e.Message, tt.wantErr)
		})
	}
}

// Valid non-ASCII text is storable and kept as sent.
func TestNonASCIIKeyAndTypeAreKept(t *testing.T) {
	t.Parallel()
	x, err := New(Config{IdempotencyPaths: []string{"id"}, EventTypePaths: []string{"type"}})
	require.NoError(t, err)
	got, err := x.Extract(Input{Body: []byte(`{"id":"pedido-ç-1","type":"pagamento.aprovado-é"}`)})
	require.NoError(t, err)
	require.Equal(t, Result{IdempotencyKey: "pedido-ç-1", EventType: "pagamento.aprovado-é"}, got)
}
