package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/stretchr/testify/require"
)

// Issue 8, item 17: the dispatcher reports pairs pending or retrying on
// routes that are not in its config, which no dispatcher delivers, so
// on-call learns of a removed route (or config skew) before anyone asks
// where the events went.
func TestDispatcherReportsUnservedRoutePairs(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	for i, routes := range [][]string{{"billing", "legacy"}, {"legacy"}, {"legacy", "old"}} {
		_, _, err := h.db.EventInsert(ctx, &webhook.Event{
			ID: uuid.Must(uuid.NewV7()), Source: "acme", IdempotencyKey: "evt_" + string(rune('a'+i)), EventType: "invoice.paid",
			ContentType: "application/json", Body: []byte(`{}`), ReceivedAt: time.Now(),
		}, routes)
		require.NoError(t, err)
	}
	_, err := h.db.Pool().Exec(ctx, `UPDATE deliveries SET state = 'retrying' WHERE route = 'old'`)
	require.NoError(t, err)
	h.startDispatcher(app.DispatcherOptions{})

	m := scrape(t, h.dispatcherBase)
	require.Equal(t, 3.0, m[`hookrelay_route_unserved_undelivered{route="legacy"}`])
	require.Equal(t, 1.0, m[`hookrelay_route_unserved_undelivered{route="old"}`])
	_, billing := m[`hookrelay_route_unserved_undelivered{route="billing"}`]
	require.False(t, billing, "billing is served")
	require.Equal(t, 1.0, m[`hookrelay_route_undelivered{route="billing"}`])
	names, err := app.MetricNames()
	require.NoError(t, err)
	require.Contains(t, names, "hookrelay_route_unserved_undelivered")
}
