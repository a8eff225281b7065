package httpserver

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// A Degraded check shows its word, keeps /readyz at 200, and logs the
// detail without answering it.
func TestReadyzDegradedStaysReady(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	mux := http.NewServeMux()
	Health(mux, zerolog.New(&logs),
		Check{Name: "postgres", Func: func(context.Context) error { return nil }},
		Check{Name: "rabbitmq", Func: func(context.Context) error {
			return &Degraded{State: "blocked", Err: errors.New("amqp.example:5672 blocks publishing: low on memory")}
		}},
	)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.JSONEq(t, `{"postgres":"ok","rabbitmq":"blocked"}`, rec.Body.String())
	require.NotContains(t, rec.Body.String(), "amqp.example")
	require.Contains(t, logs.String(), "low on memory")
}
