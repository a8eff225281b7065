package deliver_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/deliver"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// fakeOrdering is deliver.OrderingStore: it answers stale (or not), after
// failing errs calls, and counts the calls.
type fakeOrdering struct {
	mu    sync.Mutex
	stale *deliver.Staleness
	errs  []error
	calls int
}

func (o *fakeOrdering) DeliveryStale(context.Context, uuid.UUID, string) (*deliver.Staleness, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls++
	if len(o.errs) > 0 {
		err := o.errs[0]
		o.errs = o.errs[1:]
		return nil, err
	}
	return o.stale, nil
}

// A route with DropStale records a stale event without a POST (final: no
// retry, no dead letter, counted), delivers one that is not stale, and
// holds the message while the check cannot be made. A route without it,
// and a pair already handled, never ask.
func TestHandleDropsStaleEvents(t *testing.T) {
	t.Parallel()
	older := &deliver.Staleness{Resource: "sub_A", Version: "100", Delivered: "200"}
	for _, tc := range []struct {
		name      string
		dropStale bool
		state     webhook.DeliveryState
		stale     *deliver.Staleness
		errs      []error
		calls     int
		post      bool
		outcome   string
	}{
		{name: "stale: recorded, not sent", dropStale: true, stale: older, calls: 1, outcome: "stale"},
		{name: "not stale: sent", dropStale: true, calls: 1, post: true, outcome: "delivered"},
		{name: "the check fails: held, then made", dropStale: true, stale: older, errs: []error{errors.New("connection refused")}, calls: 2, outcome: "stale"},
		{name: "route without drop_stale: not asked", stale: older, post: true, outcome: "delivered"},
		{name: "already delivered: not asked", dropStale: true, state: webhook.StateDelivered, stale: older, outcome: "skipped_duplicate"},
		// A copy of a pair already recorded stale (its ack was lost) is a
		// duplicate: not checked, not recorded again, and not POSTed even
		// if the route stopped dropping stale events meanwhile.
		{name: "already stale: not asked", dropStale: true, state: webhook.StateStale, stale: older, outcome: "skipped_duplicate"},
		{name: "already stale, route no longer drops: not sent", state: webhook.StateStale, outcome: "skipped_duplicate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			posts := make(chan struct{}, 4)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.ReadAll(r.Body)
				posts <- struct{}{}
			}))
			t.Cleanup(srv.Close)
			store, pub, ord := newFakeStore(), newFakePublisher(), &fakeOrdering{stale: tc.stale, errs: tc.errs}
			if tc.state != "" {
				store.state = tc.state
			}
			b := &bundle{store: store, pub: pub, reg: prometheus.NewRegistry()}
			h, err := deliver.New(deliver.Config{
				Routes: []deliver.Route{{
					Name: "billing", URL: srv.URL, Timeout: 30 * time.Second, MaxAttempts: 5,
					SigningKeys: [][]byte{[]byte("key")}, DropStale: tc.dropStale,
				}},
				Tiers: tiers, Store: store, Publisher: pub, Ordering: ord,
				Metrics:       deliver.NewMetrics(b.reg, []string{"billing"}),
				Logger:        zerolog.New(zerolog.NewTestWriter(t)),
				StoreRetryFor: time.Minute,
			})
			require.NoError(t, err)
			require.NoError(t, h.Handle(context.Background(), "billing", message(), make(chan struct{})))

			require.Equal(t, tc.calls, ord.calls)
			_, released, _, recorded := store.snapshot()
			if tc.post {
				require.Len(t, posts, 1)
			} else {
				require.Empty(t, posts, "no POST")
			}
			switch tc.outcome {
			case "stale":
				require.Len(t, recorded, 1)
				require.Equal(t, webhook.StateStale, recorded[0].Outcome)
				require.Zero(t, recorded[0].Status)
				require.Contains(t, recorded[0].Error, `version "100" of resource "sub_A" is older than version "200"`)
				require.Zero(t, released, "recording released the lock")
			case "skipped_duplicate":
				require.Empty(t, recorded)
				require.Equal(t, 1, released)
			default:
				require.Len(t, recorded, 1)
				require.Equal(t, webhook.StateDelivered, recorded[0].Outcome)
			}
			retries, deads := published(store, pub)
			require.Empty(t, retries)
			require.Empty(t, deads, "never dead-lettered")
			require.Equal(t, map[string]float64{tc.outcome: 1}, b.outcomes(t))
		})
	}
}
