package app_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/netguard/netguardtest"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// guardHarness is a relay whose processes log in as a role that owns
// nothing, with team-a allowed to bind its routes to acme's events and
// an admin token of team-a. The receiver serves the admin API; no
// dispatcher runs until a test starts one, so nothing is dialled before.
type guardHarness struct {
	*harness
	api  *apiClient
	tokA string
}

func newGuardHarness(t *testing.T, opts app.ReceiverOptions, configure ...func(*config.Config)) *guardHarness {
	h := newHarness(t)
	h.cfg.Database.URL = storetest.AppURL(t, h.dbURL)
	_, err := h.db.Pool().Exec(t.Context(), `INSERT INTO teams (name, created_by) VALUES ('team-a', 'test')`)
	require.NoError(t, err)
	h.cfg.Sources[0].Subscribers = []string{"team-a"}
	h.cfg.Secrets = config.Secrets{Key: testSecretsKey, Overlap: time.Hour}
	h.cfg.Admin.Token = adminToken
	for _, f := range configure {
		f(h.cfg)
	}
	t.Cleanup(func() { deleteRuntimeRouteQueues(t, h) }) // after the processes stop
	adminLn, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	opts.AdminListener = adminLn
	h.start(opts)
	gh := &guardHarness{harness: h, api: newAPIClient(t, "http://"+adminLn.Addr().String())}
	a := gh.api.call("create-token", http.MethodPost, "/api/v1/tokens", adminToken,
		map[string]any{"name": "a-admin", "role": "admin", "team": "team-a"})
	require.Equal(t, http.StatusCreated, a.Status, "%s", a.Body)
	var tok ops.NewToken
	a.decode(t, &tok)
	gh.tokA = tok.Secret
	return gh
}

// Issue 38, security 1: a team's route never reaches the relay's own
// side. Made or changed through the API towards a loopback, private,
// shared (CGNAT), link-local (the cloud's metadata address among them),
// unspecified or multicast address, literal or IPv4-mapped, it is
// refused with 422 destination_refused naming the address's class,
// whether the team's token or the platform's makes it for the team.
// Nothing is dialled: no dispatcher runs. The platform's own run-time
// routes stay the operator's choice, as config.yaml's do.
func TestTeamRouteToTheRelaysOwnSideIsRefused(t *testing.T) {
	t.Parallel()
	// Names resolve in memory: no query leaves the machine.
	h := newGuardHarness(t, app.ReceiverOptions{Resolver: netguardtest.Resolver(map[string][]netip.Addr{
		"db.internal.test": {netip.MustParseAddr("10.0.0.5")},
		"dual.test":        {netip.MustParseAddr("8.8.8.8"), netip.MustParseAddr("fe80::7")},
	})})
	c := h.api
	for _, tc := range []struct{ url, class string }{
		{"http://127.0.0.1:8081/debug/pprof/cmdline", "loopback"},
		{"http://10.0.0.5/internal", "private"},
		{"http://169.254.169.254/latest/meta-data/", "link-local"},
		{"http://[::1]:15672/api/overview", "loopback"},
		{"http://[::ffff:127.0.0.1]:8081/", "loopback"},
		{"http://[::ffff:a00:5]/", "private"},
		{"http://0.0.0.0:8081/", "unspecified"},
		{"http://100.64.0.7/", "shared"},
		{"http://172.16.3.4/", "private"},
		{"http://192.168.1.1/", "private"},
		{"http://[fd12:3456::5]/", "private"},
		{"http://[fe80::1%25eth0]/", "link-local"},
		{"http://224.0.0.251/", "multicast"},
		{"https://localhost:15672/", "loopback"}, // /etc/hosts
		{"http://db.internal.test/", "private"},
		{"http://dual.test:8443/", "link-local"},
	} {
		for who, body := range map[string]map[string]any{
			"team-a":   {"name": "team-a:sneaky", "url": tc.url, "bindings": []string{"acme.invoice.*"}},
			"platform": {"name": "team-a:sneaky", "team": "team-a", "url": tc.url, "bindings": []string{"acme.invoice.*"}},
		} {
			tok := map[string]string{"team-a": h.tokA, "platform": adminToken}[who]
			a := c.call("create-route", http.MethodPost, "/api/v1/routes", tok, body)
			require.Equal(t, http.StatusUnprocessableEntity, a.Status, "%s as %s: %s", tc.url, who, a.Body)
			var e apiErrorBody
			a.decode(t, &e)
			assert.Equal(t, "destination_refused", e.Code, "%s as %s", tc.url, who)
			assert.Contains(t, e.Message, "url: destination refused: ", tc.url)
			assert.Contains(t, e.Message, " "+tc.class+" address", tc.url)
		}
	}
	var n int
	require.NoError(t, h.db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM routes WHERE NOT declared`).Scan(&n))
	require.Zero(t, n, "no refused route was stored")

	// A change towards the relay's side is refused the same way; the
	// route keeps its destination. (No dispatcher runs: nothing dials the
	// public address.)
	a := c.call("create-route", http.MethodPost, "/api/v1/routes", h.tokA,
		map[string]any{"name": "team-a:a-ledger", "url": "http://8.8.8.8/hooks", "bindings": []string{"acme.invoice.*"}})
	require.Equal(t, http.StatusCreated, a.Status, "%s", a.Body)
	a = c.call("update-route", http.MethodPatch, "/api/v1/routes/team-a:a-ledger", h.tokA, map[string]any{"url": "http://169.254.169.254/latest/"})
	require.Equal(t, http.StatusUnprocessableEntity, a.Status, "%s", a.Body)
	require.Contains(t, string(a.Body), "link-local address")
	a = c.call("get-route", http.MethodGet, "/api/v1/routes/team-a:a-ledger", h.tokA, nil)
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	var d ops.RouteDetail
	a.decode(t, &d)
	require.Equal(t, "http://8.8.8.8/hooks", d.Settings.URL)

	// The platform's own run-time route: the operator's choice.
	a = c.call("create-route", http.MethodPost, "/api/v1/routes", adminToken,
		map[string]any{"name": "internal-audit", "url": "http://127.0.0.1:9/", "bindings": []string{"acme.invoice.*"}})
	require.Equal(t, http.StatusCreated, a.Status, "%s", a.Body)
}

// connCounter is a loopback destination that counts the connections it
// accepts, and the requests it answers (200).
type connCounter struct {
	srv             *httptest.Server
	conns, requests atomic.Int32
}

func newConnCounter(t *testing.T) *connCounter {
	c := &connCounter{}
	c.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		c.requests.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	c.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			c.conns.Add(1)
		}
	}
	c.srv.Start()
	t.Cleanup(c.srv.Close)
	return c
}

// waitAttempt waits for route's first attempt and returns its error and
// status (0 for none).
func (h *harness) waitAttempt(route string) (string, int) {
	h.t.Helper()
	var msg string
	var status int
	require.EventuallyWithT(h.t, func(c *assert.CollectT) {
		var e *string
		var s *int
		err := h.db.Pool().QueryRow(context.Background(), `SELECT a.error, a.status FROM delivery_attempts a
			JOIN deliveries d ON d.id = a.delivery_id WHERE d.route = $1 ORDER BY a.id LIMIT 1`, route).Scan(&e, &s)
		require.NoError(c, err)
		if e != nil {
			msg = *e
		}
		if s != nil {
			status = *s
		}
	}, testenv.Scaled(20*time.Second), 50*time.Millisecond, "an attempt of %s", route)
	return msg, status
}

// Issue 38, security 1, at connect time: a team's route whose
// destination is (now) on the relay's side is refused by the delivery
// dialer, after the address is resolved and before any connection: here
// a route saved while the operator allowed loopback, delivered by a
// dispatcher whose config no longer does. The attempt fails with the
// refusal as its error, naming no address or port; the destination never
// sees a connection.
func TestTeamRouteIsRefusedWhenDialled(t *testing.T) {
	t.Parallel()
	dest := newConnCounter(t)
	h := newGuardHarness(t, app.ReceiverOptions{}, func(cfg *config.Config) {
		cfg.TeamRoutes.AllowedNetworks = []string{"127.0.0.0/8"}
	})
	a := h.api.call("create-route", http.MethodPost, "/api/v1/routes", h.tokA,
		map[string]any{"name": "team-a:a-local", "url": dest.srv.URL + "/debug/pprof/cmdline", "bindings": []string{"acme.invoice.*"}, "max_attempts": 1})
	require.Equal(t, http.StatusCreated, a.Status, "%s", a.Body)
	// The operator no longer allows loopback.
	dcfg := *h.cfg
	dcfg.TeamRoutes.AllowedNetworks = nil
	h.startDispatcherWith(&dcfg, app.DispatcherOptions{})
	h.postSigned("evt_guard_dial", "invoice.paid")
	msg, status := h.waitAttempt("team-a:a-local")
	require.Equal(t, "destination refused: loopback address", msg)
	require.Zero(t, status)
	require.Zero(t, dest.conns.Load(), "refused before connecting")
	require.Zero(t, dest.requests.Load())
	require.False(t, strings.Contains(msg, dest.srv.Listener.Addr().String()))
}

// Issue 38, security 1, DNS rebinding: a team's route to a name that
// resolves to a public address when it is saved, and to loopback when
// the dispatcher connects, is refused by the dialer before it connects;
// the loopback destination never sees a connection. The same route on a
// dispatcher whose operator allows loopback delivers: the guard, not the
// name, decided. (Both resolvers answer in memory; the only address ever
// dialled is loopback.)
func TestTeamRouteToANameThatRebindsIsRefusedWhenDialled(t *testing.T) {
	t.Parallel()
	dest := newConnCounter(t)
	port := dest.srv.Listener.Addr().(*net.TCPAddr).Port
	h := newGuardHarness(t, app.ReceiverOptions{Resolver: netguardtest.Resolver(map[string][]netip.Addr{
		"rebind.test": {netip.MustParseAddr("8.8.8.8")}, // saved: a public address
	})})
	a := h.api.call("create-route", http.MethodPost, "/api/v1/routes", h.tokA,
		map[string]any{"name": "team-a:a-rebind", "url": fmt.Sprintf("http://rebind.test:%d/hooks", port), "bindings": []string{"acme.invoice.*"}, "max_attempts": 1})
	require.Equal(t, http.StatusCreated, a.Status, "%s", a.Body)
	dialled := netguardtest.Resolver(map[string][]netip.Addr{"rebind.test": {netip.MustParseAddr("127.0.0.1")}})
	stop := h.startDispatcher(app.DispatcherOptions{Resolver: dialled})
	h.postSigned("evt_rebind_1", "invoice.paid")
	msg, status := h.waitAttempt("team-a:a-rebind")
	require.Equal(t, "destination refused: loopback address", msg)
	require.Zero(t, status)
	require.Zero(t, dest.conns.Load(), "refused before connecting")
	stop()

	allowing := *h.cfg
	allowing.TeamRoutes.AllowedNetworks = []string{"127.0.0.0/8"}
	h.startDispatcherWith(&allowing, app.DispatcherOptions{Resolver: dialled})
	h.postSigned("evt_rebind_2", "invoice.paid")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.EqualValues(c, 1, dest.requests.Load())
	}, testenv.Scaled(20*time.Second), 50*time.Millisecond, "delivered where loopback is allowed")
}

// Issue 38, security 1, the console's half: signed in as team A, the new
// route form towards the cloud's metadata address answers 422 with the
// refusal, naming the address's class; nothing is stored.
func TestConsoleRefusesATeamsRouteToTheRelaysOwnSide(t *testing.T) {
	t.Parallel()
	h := newGuardHarness(t, app.ReceiverOptions{})
	ctx := browser(t)
	base := h.api.base
	signIn(t, ctx, base, h.tokA)
	waitText(t, ctx, "header form.who", "token:a-admin (admin, team team-a)")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/routes/new"),
		chromedp.WaitVisible(chromedp.CSS(`#new-route input[name=name]`)),
		chromedp.SendKeys(chromedp.CSS(`#new-route input[name=name]`), "team-a:a-metadata"),
		chromedp.SendKeys(chromedp.CSS(`#new-route input[name=url]`), "http://169.254.169.254/latest/meta-data/"),
		chromedp.SendKeys(chromedp.CSS(`#new-route input[name=bindings]`), "acme.invoice.*"),
		chromedp.Submit(chromedp.CSS(`#new-route input[name=name]`)),
	))
	waitText(t, ctx, "body", "url: destination refused: 169.254.169.254 is a link-local address")
	screenshot(t, ctx, "console-route-destination-refused")

	// The form's answer, as a script sees it: 422.
	form := url.Values{"name": {"team-a:a-metadata"}, "url": {"http://10.0.0.5/"}, "bindings": {"acme.invoice.*"}}
	req, err := http.NewRequest(http.MethodPost, base+"/routes", strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := sessionClient(t, ctx, base).Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode, "%s", body)
	require.Contains(t, string(body), "10.0.0.5 is a private address")
	var n int
	require.NoError(t, h.db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM routes WHERE NOT declared`).Scan(&n))
	require.Zero(t, n)
}

// Issue 43: a team's route of kind amqp is held to the same guard as its
// HTTP routes: a broker on the relay's side is refused when the route is
// saved, and, when the operator no longer allows it, when the dispatcher
// dials it, before any connection; the attempt names the refusal's kind
// only, and the URL's credentials show nowhere.
func TestTeamAMQPRouteToTheRelaysOwnSideIsRefused(t *testing.T) {
	t.Parallel()
	dest := newConnCounter(t)
	h := newGuardHarness(t, app.ReceiverOptions{})
	broker := "amqp://app:s3cret@" + dest.srv.Listener.Addr().String() + "/"
	a := h.api.call("create-route", http.MethodPost, "/api/v1/routes", h.tokA, map[string]any{"name": "team-a:a-queue", "kind": "amqp",
		"url": broker, "exchange": "ledger", "bindings": []string{"acme.invoice.*"}, "max_attempts": 1})
	require.Equal(t, http.StatusUnprocessableEntity, a.Status, "%s", a.Body)
	require.Contains(t, string(a.Body), "url: destination refused: ")
	require.Contains(t, string(a.Body), "loopback address")
	require.NotContains(t, string(a.Body), "s3cret")

	h2 := newGuardHarness(t, app.ReceiverOptions{}, func(cfg *config.Config) {
		cfg.TeamRoutes.AllowedNetworks = []string{"127.0.0.0/8"}
	})
	a = h2.api.call("create-route", http.MethodPost, "/api/v1/routes", h2.tokA, map[string]any{"name": "team-a:a-queue", "kind": "amqp",
		"url": broker, "exchange": "ledger", "bindings": []string{"acme.invoice.*"}, "max_attempts": 1})
	require.Equal(t, http.StatusCreated, a.Status, "%s", a.Body)
	require.NotContains(t, string(a.Body), "s3cret")
	var spec string
	require.NoError(t, h2.db.Pool().QueryRow(context.Background(), `SELECT spec::text FROM routes WHERE name = 'team-a:a-queue'`).Scan(&spec))
	require.NotContains(t, spec, "s3cret", "the broker's password is stored sealed")
	// The operator no longer allows loopback.
	dcfg := *h2.cfg
	dcfg.TeamRoutes.AllowedNetworks = nil
	h2.startDispatcherWith(&dcfg, app.DispatcherOptions{})
	h2.postSigned("evt_guard_amqp", "invoice.paid")
	msg, status := h2.waitAttempt("team-a:a-queue")
	require.Equal(t, "amqp: destination refused: loopback address", msg)
	require.Zero(t, status)
	require.Zero(t, dest.conns.Load(), "refused before connecting")
}
