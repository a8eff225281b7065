package app_test

import (
	"net/http"
	"testing"

	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/stretchr/testify/require"
)

// Issue 38, first-time user 6: the API lists the events of a sender's id
// (their idempotency key), of any source or of one, as the CLI's events
// list --key and the console's find box do.
func TestAPIEventsBySendersID(t *testing.T) {
	t.Parallel()
	h := newAPIHarness(t, 20)
	viewer := h.tokens["viewer"]
	id := h.postSigned("evt_key_1", "invoice.paid").ID
	h.postSigned("evt_key_2", "invoice.paid")
	var page struct {
		Total int64              `json:"total"`
		Items []ops.EventSummary `json:"items"`
	}
	for path, want := range map[string]int64{
		"/api/v1/events?key=evt_key_1":             1,
		"/api/v1/events?key=evt_key_1&source=acme": 1,
		"/api/v1/events?key=evt_key_1&source=demo": 0,
		"/api/v1/events?key=evt_nothing":           0,
		"/api/v1/events":                           2,
	} {
		a := h.api.call("list-events", http.MethodGet, path, viewer, nil)
		require.Equal(t, http.StatusOK, a.Status, "%s: %s", path, a.Body)
		page.Items = nil
		a.decode(t, &page)
		require.Equal(t, want, page.Total, path)
		require.Len(t, page.Items, int(want), path)
		if path == "/api/v1/events?key=evt_key_1" {
			require.Equal(t, id, page.Items[0].ID.String())
			require.Equal(t, "evt_key_1", page.Items[0].IdempotencyKey)
		}
	}
}
