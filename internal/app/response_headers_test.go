package app_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/deliver"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/stretchr/testify/require"
)

// A destination answering with huge response headers costs the relay at
// most what it reads (deliver.MaxResponseHeaderBytes) and stores (at most
// deliver.MaxStoredHeaderBytes of names and values per attempt, with a
// marker when something was cut): 1 MiB is an attempt that failed with a
// clear error, 40 KiB a delivery whose stored headers are cut.
func TestDestinationResponseHeadersAreCapped(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	dest := newDestination(t, func(w http.ResponseWriter, _ *http.Request, _ []byte, route string, _ int) int {
		n := 40 // 40 x 1 KiB
		if route == "huge" {
			n = 256 // 256 x 4 KiB = 1 MiB
		}
		for i := range n {
			w.Header().Set(fmt.Sprintf("X-Filler-%03d", i), strings.Repeat("v", 1024*(1+3*btoi(route == "huge"))))
		}
		w.Header().Set("Retry-After", "7")
		return http.StatusOK
	})
	huge := testRoute("huge", dest.url("huge"), "acme.huge.*")
	huge.MaxAttempts = 1
	big := testRoute("big", dest.url("big"), "acme.big.*")
	big.MaxAttempts = 1
	h.cfg.Routes = []config.Route{huge, big}
	amqptestCleanup(t, h)
	h.start(app.ReceiverOptions{})
	h.startDispatcher(app.DispatcherOptions{})

	hugeID := uuid.MustParse(h.postSigned("evt_huge_headers", "huge.sent").ID)
	bigID := uuid.MustParse(h.postSigned("evt_big_headers", "big.sent").ID)
	ctx := context.Background()
	final := func(id uuid.UUID, route string) bool {
		state, _, err := h.db.DeliveryGet(ctx, id, route)
		return err == nil && (state == webhook.StateDelivered || state == webhook.StateDead)
	}
	require.Eventually(t, func() bool { return final(hugeID, "huge") && final(bigID, "big") }, testenv.Scaled(30*time.Second), 20*time.Millisecond)

	hugeEv, err := h.db.EventShow(ctx, hugeID)
	require.NoError(t, err)
	require.Len(t, hugeEv.Deliveries, 1)
	require.Len(t, hugeEv.Deliveries[0].AttemptRows, 1, "the attempt is recorded")
	a := hugeEv.Deliveries[0].AttemptRows[0]
	require.LessOrEqual(t, headerBytes(a.ResponseHeaders), deliver.MaxStoredHeaderBytes, "stored headers within the cap")
	if a.Status == nil {
		require.NotNil(t, a.Error)
		require.Contains(t, *a.Error, "response headers", "a clear error")
	}
	var stored int
	require.NoError(t, h.db.Pool().QueryRow(ctx, `
		SELECT COALESCE(max(octet_length(a.response_headers::text)), 0) FROM delivery_attempts a`).Scan(&stored))
	require.Less(t, stored, 2*deliver.MaxStoredHeaderBytes, "no attempt row holds more than the cap (plus JSON quoting)")

	bigEv, err := h.db.EventShow(ctx, bigID)
	require.NoError(t, err)
	require.Equal(t, "delivered", bigEv.Deliveries[0].State, "40 KiB of headers is within what is read")
	b := bigEv.Deliveries[0].AttemptRows[0]
	require.Equal(t, 200, *b.Status)
	require.LessOrEqual(t, headerBytes(b.ResponseHeaders), deliver.MaxStoredHeaderBytes)
	require.Equal(t, "7", b.ResponseHeaders.Get("Retry-After"), "short headers are kept first")
	require.Contains(t, b.ResponseHeaders.Get(deliver.HeaderHeadersTruncated), "dropped", "a marker says headers were cut")
}

// headerBytes is the size of h's names and values.
func headerBytes(h http.Header) int {
	n := 0
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v)
		}
	}
	return n
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
