package deliver_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/deliver"
	"github.com/hookrelay/hookrelay/internal/netguard"
	"github.com/hookrelay/hookrelay/internal/netguard/netguardtest"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// guardedHandler returns a handler of route billing to url, guarded or
// not, whose guarded client dials through g and resolves names from
// hosts (in memory).
func guardedHandler(t *testing.T, b *bundle, url string, timeout time.Duration, guarded bool, g *netguard.Guard, hosts map[string][]netip.Addr) *deliver.Handler {
	t.Helper()
	b.reg = prometheus.NewRegistry()
	h, err := deliver.New(deliver.Config{
		Routes:        []deliver.Route{{Name: "billing", URL: url, Timeout: timeout, MaxAttempts: 5, SigningKeys: [][]byte{[]byte("key")}, Guarded: guarded}},
		Tiers:         tiers,
		Store:         b.store,
		Publisher:     b.pub,
		Metrics:       deliver.NewMetrics(b.reg, []string{"billing"}),
		GuardedClient: deliver.NewGuardedClient(g.Control, netguardtest.Resolver(hosts)),
	})
	require.NoError(t, err)
	return h
}

// lastAttempt handles one message of billing and returns the attempt
// recorded for it.
func lastAttempt(t *testing.T, b *bundle) *webhook.Attempt {
	t.Helper()
	require.NoError(t, b.handler.Handle(context.Background(), "billing", message(), make(chan struct{})))
	_, _, _, recorded := b.store.snapshot()
	require.NotEmpty(t, recorded)
	return recorded[len(recorded)-1]
}

// Issue 38, security 1, at connect time: a guarded route (a team's) goes
// through the guarded client, whose dialer refuses a loopback
// destination, here a name that resolves to it, before connecting: the
// attempt fails, retried, with the refusal's words only, and the
// destination sees no connection. The same destination on an unguarded
// route (the operator's) is delivered: the two clients share nothing.
func TestGuardedRouteIsRefusedBeforeConnecting(t *testing.T) {
	t.Parallel()
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	hosts := map[string][]netip.Addr{"rebind.test": {netip.MustParseAddr("127.0.0.1")}}
	url := fmt.Sprintf("http://rebind.test:%d/hooks", port)

	b := setup(t, time.Minute, status(200))
	b.handler = guardedHandler(t, b, url, 5*time.Second, true, netguard.New(nil), hosts)
	a := lastAttempt(t, b)
	require.Equal(t, webhook.StateRetrying, a.Outcome)
	require.Zero(t, a.Status)
	require.Equal(t, "destination refused: loopback address", a.Error)
	require.Zero(t, conns.Load(), "refused before connecting")

	// The operator's route to the same place: delivered (its client
	// resolves with the system's resolver: the literal address).
	b = setup(t, time.Minute, status(200))
	b.handler = guardedHandler(t, b, srv.URL, 5*time.Second, false, netguard.New(nil), hosts)
	a = lastAttempt(t, b)
	require.Equal(t, webhook.StateDelivered, a.Outcome, a.Error)
	require.EqualValues(t, 1, conns.Load())

	// And the team's, once the operator allows loopback.
	b = setup(t, time.Minute, status(200))
	b.handler = guardedHandler(t, b, url, 5*time.Second, true, netguard.New([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}), hosts)
	a = lastAttempt(t, b)
	require.Equal(t, webhook.StateDelivered, a.Outcome, a.Error)
	require.EqualValues(t, 2, conns.Load())
}

// What a failed attempt of a guarded route records names the failure's
// kind only, never an address, a port or the system's words, so a team
// cannot map a network through its attempts: a closed port and a
// connection cut before the answer both read "connection failed", a name
// that does not resolve "name not resolved", a slow answer "timeout
// after". (Loopback is allowed here, to have a closed port to try.)
func TestGuardedRouteFailuresNameNoAddress(t *testing.T) {
	t.Parallel()
	allowLoopback := netguard.New([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")})
	hangUp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		c, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = c.Close()
		}
	}))
	t.Cleanup(hangUp.Close)
	// Reading the body lets the server notice the client hang up.
	slow := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		<-r.Context().Done()
	}))
	t.Cleanup(slow.Close)
	closed := "http://127.0.0.1:1/hooks"

	for _, tc := range []struct {
		name, url, want string
		timeout         time.Duration
	}{
		{"closed port", closed, "connection failed", 5 * time.Second},
		{"cut before the answer", hangUp.URL, "connection failed", 5 * time.Second},
		{"unknown name", "http://nowhere.test:8080/", "name not resolved", 5 * time.Second},
		{"slow answer", slow.URL, "timeout after 300ms", 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, time.Minute, status(200))
			b.handler = guardedHandler(t, b, tc.url, tc.timeout, true, allowLoopback, nil)
			a := lastAttempt(t, b)
			require.Equal(t, webhook.StateRetrying, a.Outcome)
			require.Equal(t, tc.want, a.Error)
		})
	}

	// The operator's route keeps the system's words.
	b := setup(t, time.Minute, status(200))
	b.handler = guardedHandler(t, b, closed, 5*time.Second, false, allowLoopback, nil)
	require.Contains(t, lastAttempt(t, b).Error, "127.0.0.1:1: connect: connection refused")
}
