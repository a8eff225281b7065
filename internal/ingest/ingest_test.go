package ingest

import (
	"context"
	"testing"

	"github.com/hookrelay/hookrelay/internal/extract"
	"github.com/hookrelay/hookrelay/internal/signature"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

type nopStore struct{}

func (nopStore) EventInsertBatch(_ context.Context, batch []webhook.Insert) ([]webhook.Stored, error) {
	return make([]webhook.Stored, len(batch)), nil
}

// A source keyed on the signed id with a verifier that signs none would
// answer 400 to every request: it is refused when the handler is built.
func TestNewRefusesSignedIDWithoutIDVerifier(t *testing.T) {
	t.Parallel()
	x, err := extract.New(extract.Config{IdempotencySignedID: true, EventTypePaths: []string{"type"}})
	require.NoError(t, err)
	hmac, err := signature.NewHMAC(signature.HMACConfig{Secrets: []string{"s"}, Header: "X-Sig"})
	require.NoError(t, err)
	standard, err := signature.NewStandard(signature.StandardConfig{Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}})
	require.NoError(t, err)

	cfg := func(v signature.Verifier) Config {
		return Config{
			Sources:      []Source{{Name: "s", Verifier: v, Extractor: x}},
			Store:        nopStore{},
			MaxBodyBytes: 1024,
			Metrics:      NewMetrics(prometheus.NewRegistry()),
		}
	}
	_, err = New(cfg(hmac))
	require.ErrorContains(t, err, `source "s" keys on the signed id, but its verifier signs none`)
	_, err = New(cfg(standard))
	require.NoError(t, err)
}
