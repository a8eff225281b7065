package main

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/testenv"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// adminRelay is startRelay with the admin API on: its URL, and a platform
// admin token, a team's operator token and the team's route made through
// the direct mode (as the platform's operator does once).
type adminRelay struct {
	*relay
	server               string
	adminTok, teamTok    string
	viewerTok, teamRoute string
}

func startAdminRelay(t *testing.T, dest *destination) *adminRelay {
	t.Helper()
	addr := freeAddr(t)
	r := startRelay(t, dest, map[string]string{
		"HOOKRELAY_ADMIN_LISTEN": addr, "HOOKRELAY_ADMIN_TOKEN": "config-admin-token-0123456789",
		"HOOKRELAY_SECRETS_KEY": base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef")),
		// The team's route delivers to this machine (a test's destination).
		"HOOKRELAY_TEAM_ROUTES_ALLOWED_NETWORKS": "127.0.0.0/8",
	})
	a := &adminRelay{relay: r, server: "http://" + addr, teamRoute: "payments:ledger"}
	require.Eventually(t, func() bool {
		resp, err := http.Get(a.server + "/api/v1/openapi.json")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, testenv.Scaled(30*time.Second), 50*time.Millisecond, "the admin API never answered")
	res := r.op.run("hookrelay", "teams", "create", "payments")
	require.Equal(t, 0, res.code, res)
	token := func(args ...string) string {
		res := r.op.run("hookrelay", append([]string{"tokens", "create"}, args...)...)
		require.Equal(t, 0, res.code, res)
		return strings.TrimSpace(res.stdout)
	}
	a.adminTok = token("platform-admin", "--role", "admin")
	a.viewerTok = token("platform-viewer", "--role", "viewer")
	a.teamTok = token("payments-dev", "--role", "operator", "--team", "payments")
	return a
}

// cli is a shell that knows the relay only by its admin URL and a token:
// no config file, no database or broker URL in its environment.
func (a *adminRelay) cli(t *testing.T, token string) *shell {
	t.Helper()
	s := newShell(t)
	s.env["HOOKRELAY_SERVER"], s.env["HOOKRELAY_TOKEN"] = a.server, token
	for _, kv := range s.environ() {
		require.NotRegexp(t, `postgres(ql)?://|amqps?://`, kv, "the CLI's environment names no database nor broker")
	}
	_, err := os.Stat(filepath.Join(s.dir, "config.yaml"))
	require.ErrorIs(t, err, os.ErrNotExist, "and it has no config file")
	return s
}

// ok runs a hookrelay command that must succeed and returns its stdout.
func ok(t *testing.T, s *shell, args ...string) string {
	t.Helper()
	res := s.run("hookrelay", args...)
	require.Equal(t, 0, res.code, "hookrelay %s: %s", strings.Join(args, " "), res)
	return res.stdout
}

// Issue 44: every operator command through /api/v1 with a token, from a
// shell that has neither the config nor a database or broker URL; a team's
// token sees its team's rows only, and a command its role may not run
// answers 403 naming the role it needs.
func TestCLIOverTheAdminAPI(t *testing.T) {
	t.Parallel()
	dest := newDestination(t)
	dest.accept.Store(true)
	a := startAdminRelay(t, dest)
	op := a.cli(t, a.adminTok)

	// Routes: make the team's route (the relay's own events about the
	// team's routes, delivered to a local destination), list, pause,
	// resume, test, update, rotate, delete.
	teamDest := newDestination(t)
	teamDest.accept.Store(true)
	out := ok(t, op, "routes", "create", a.teamRoute, "--url", teamDest.srv.URL+"/alerts", "--binding", "hookrelay.route.*")
	require.Contains(t, out, "route payments:ledger created for team payments")
	require.Regexp(t, `signing secret \(shown once\): whsec_`, out)
	out = ok(t, op, "routes")
	require.Contains(t, out, "billing")
	require.Contains(t, out, a.teamRoute)
	require.Contains(t, ok(t, op, "routes", "pause", "billing", "--reason", "cli test"), "route billing paused")
	require.Contains(t, ok(t, op, "routes"), "billing paused by token:platform-admin")
	require.Contains(t, ok(t, op, "routes", "resume", "billing"), "route billing resumed")
	require.Contains(t, ok(t, op, "routes", "update", a.teamRoute, "--binding", "hookrelay.route.*", "--binding", "hookrelay.job.*"), "updated to version 2")
	require.Contains(t, ok(t, op, "routes", "rotate-secret", a.teamRoute, "--overlap", "1h"), "signing secret (shown once): whsec_")

	// Events: one delivered, listed, shown by our id and by the sender's.
	id := a.send(t, "evt_remote_1")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, a.show(c, id).Deliveries[0].State, "delivered")
	}, testenv.Scaled(20*time.Second), 50*time.Millisecond)
	out = ok(t, op, "events", "list")
	require.Contains(t, out, id)
	require.Contains(t, out, "billing:delivered(1)")
	var ev struct {
		ID             string `json:"id"`
		IdempotencyKey string `json:"idempotency_key"`
	}
	require.NoError(t, json.Unmarshal([]byte(ok(t, op, "events", "show", "evt_remote_1", "--source", "demo", "--json")), &ev))
	require.Equal(t, id, ev.ID)
	require.Contains(t, ok(t, op, "events", "show", id), "evt_remote_1")
	out = ok(t, op, "routes", "test", "--event", id, "--filter", "body.amount == 4200")
	require.Contains(t, out, "filter: true: the route takes this event")

	// Jobs: a retry, a replay and a purge run as jobs, waited for.
	out = ok(t, op, "retry", "--event", id)
	require.Contains(t, out, "delivered")
	out = ok(t, op, "replay", "--event", id, "--include-delivered")
	require.Contains(t, out, "1 pair(s)")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Len(c, dest.posts(), 2, "the replay delivered it again")
	}, testenv.Scaled(20*time.Second), 50*time.Millisecond)
	out = ok(t, op, "purge", "--older-than", "30d", "--dry-run")
	require.Contains(t, out, "would purge")
	out = ok(t, op, "jobs", "list")
	require.Regexp(t, `retry\s+token:platform-admin\s+succeeded`, out)
	require.Regexp(t, `replay\s+token:platform-admin\s+succeeded`, out)
	require.Regexp(t, `purge\s+token:platform-admin\s+succeeded`, out)

	// Dead letters, versions, tokens, audit.
	out = ok(t, op, "dead", "list", "--route", "billing")
	require.Contains(t, out, "0 dead letter(s)")
	require.Contains(t, ok(t, op, "dead", "drop", "--route", "billing", "--delivered", "--dry-run"), "would drop 0")
	require.Contains(t, ok(t, op, "dead", "requeue", "--route", "billing"), "requeued 0 message(s)")
	res := op.run("hookrelay", "versions", "show", "--route", "billing", "--source", "demo", "--resource", "x")
	require.Equal(t, 1, res.code, res)
	require.Contains(t, res.stderr, "no version of demo x is kept on route billing")
	require.Contains(t, ok(t, op, "tokens", "list"), "payments-dev")
	out = ok(t, op, "tokens", "create", "ci-bot", "--role", "viewer")
	require.Regexp(t, `^hrt_`, out)
	require.Contains(t, ok(t, op, "tokens", "revoke", "ci-bot"), "revoked")
	out = ok(t, op, "audit", "--actor", "token:platform-admin")
	for _, action := range []string{"route.create", "route.pause", "route.resume", "route.update", "route.rotate_secret", "retry", "replay", "dead.requeue", "token.create", "token.revoke"} {
		require.Regexp(t, `token:platform-admin\s+`+regexp.QuoteMeta(action)+`\s`, out, "audited: %s", action)
	}

	// The team's CLI: its route only, none of the platform's events, its
	// own audit rows only; what its role may not do is 403 naming the role.
	team := a.cli(t, a.teamTok)
	out = ok(t, team, "routes")
	require.Contains(t, out, a.teamRoute)
	require.NotContains(t, out, "billing")
	require.Contains(t, ok(t, team, "routes", "pause", a.teamRoute), "paused")
	require.Contains(t, ok(t, team, "routes", "resume", a.teamRoute), "resumed")
	// Its events: the relay's own about its route (paused, resumed), not
	// the platform's billing events nor billing's pause.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res := team.runFor(c, "", "hookrelay", "events", "list", "--json")
		require.Equal(c, 0, res.code, res)
		var list struct {
			Items []struct {
				ID        string `json:"id"`
				Source    string `json:"source"`
				EventType string `json:"event_type"`
			} `json:"items"`
		}
		require.NoError(c, json.Unmarshal([]byte(res.stdout), &list))
		var types []string
		for _, e := range list.Items {
			require.NotEqual(c, id, e.ID)
			types = append(types, e.Source+"."+e.EventType)
		}
		assert.ElementsMatch(c, []string{"hookrelay.route.paused", "hookrelay.route.resumed"}, types)
	}, testenv.Scaled(20*time.Second), 200*time.Millisecond)
	out = ok(t, team, "audit")
	require.Contains(t, out, "token:payments-dev")
	require.NotContains(t, out, "token:platform-admin", "another team's rows are not shown")
	res = team.run("hookrelay", "tokens", "list")
	require.Equal(t, 1, res.code, res)
	require.Contains(t, res.stderr, "HTTP 403")
	require.Contains(t, res.stderr, "needs role admin")
	res = team.run("hookrelay", "purge", "--older-than", "30d", "--dry-run")
	require.Equal(t, 1, res.code, res)
	require.Contains(t, res.stderr, "HTTP 403", "purging is the platform's")
	res = team.run("hookrelay", "routes", "pause", "billing")
	require.Equal(t, 1, res.code, res)
	require.Contains(t, res.stderr, "HTTP 404", "another team's route is not there")
	viewer := a.cli(t, a.viewerTok)
	res = viewer.run("hookrelay", "retry", "--event", id)
	require.Equal(t, 1, res.code, res)
	require.Contains(t, res.stderr, "HTTP 403")
	require.Contains(t, res.stderr, "needs role operator")

	// The team's route goes last.
	require.Contains(t, ok(t, op, "routes", "delete", a.teamRoute, "--dead-letter"), "route payments:ledger deleted")
}

// hookrelay login stores the context with mode 0600 and the commands then
// use it with nothing in the environment; a wrong token is not stored.
func TestLoginStoresAContextTheCommandsUse(t *testing.T) {
	t.Parallel()
	a := startAdminRelay(t, newDestination(t))
	s := newShell(t)
	res := s.runInput("wrong-token", "hookrelay", "login", a.server, "--token-stdin")
	require.Equal(t, 1, res.code, res)
	require.Contains(t, res.stderr, "HTTP 401")
	_, err := os.Stat(filepath.Join(s.dir, ".config", "hookrelay", "config.yaml"))
	require.ErrorIs(t, err, os.ErrNotExist, "a refused token is not stored")
	res = s.run("hookrelay", "login", a.server)
	require.Equal(t, 1, res.code, res)
	require.Contains(t, res.stderr, "--token-stdin", "no terminal: it says how to give the token")

	res = s.runInput(a.teamTok+"\n", "hookrelay", "login", a.server, "--token-stdin", "--name", "local")
	require.Equal(t, 0, res.code, res)
	require.Contains(t, res.stdout, `context "local" is current`)
	path := filepath.Join(s.dir, ".config", "hookrelay", "config.yaml")
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	require.NotContains(t, res.stdout+res.stderr, a.teamTok, "the token is never printed")
	require.Contains(t, ok(t, s, "context", "list"), "*        local")
	out := ok(t, s, "routes")
	require.Contains(t, out, "0 route(s)", "the team's CLI: the team has no route")

	require.NoError(t, os.Chmod(path, 0o644))
	res = s.run("hookrelay", "routes")
	require.Equal(t, 1, res.code, res)
	require.Contains(t, res.stderr, "chmod 600")
	require.NoError(t, os.Chmod(path, 0o600))
	require.Contains(t, ok(t, s, "context", "use", "--direct"), "no context is current")
	res = s.run("hookrelay", "routes")
	require.NotEqual(t, 0, res.code, "direct now, and this shell has no config: %s", res)
	require.Contains(t, res.stderr, "config.yaml")
}

// localApp is a developer's app on localhost: it keeps what it got and
// when.
type localApp struct {
	srv  *httptest.Server
	mu   sync.Mutex
	got  []localHit
	code int
}

type localHit struct {
	at     time.Time
	header http.Header
	body   []byte
}

func newLocalApp(t *testing.T) *localApp {
	l := &localApp{code: http.StatusOK}
	l.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		l.mu.Lock()
		l.got = append(l.got, localHit{at: time.Now(), header: r.Header.Clone(), body: body})
		l.mu.Unlock()
		w.WriteHeader(l.code)
	}))
	t.Cleanup(l.srv.Close)
	return l
}

func (l *localApp) hits() []localHit {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]localHit(nil), l.got...)
}

// waitFor waits for n hits and returns them.
func (l *localApp) waitFor(t *testing.T, n int) []localHit {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.GreaterOrEqual(c, len(l.hits()), n)
	}, testenv.Scaled(20*time.Second), 10*time.Millisecond, "%d local request(s)", n)
	return l.hits()
}

var secretLine = regexp.MustCompile(`the signing secret .*: (whsec_[A-Za-z0-9+/=]+)`)

// startListener runs hookrelay listen as a developer does and returns the
// secret it printed.
func startListener(t *testing.T, s *shell, app *localApp, args ...string) (*proc, string) {
	t.Helper()
	p := s.start("hookrelay", append([]string{"listen", "--forward-to", app.srv.URL + "/hooks"}, args...)...)
	p.waitLine(t, "listening on", 30*time.Second)
	m := secretLine.FindStringSubmatch(p.waitLine(t, "signing secret", 10*time.Second))
	require.NotNil(t, m)
	return p, m[1]
}

// Issue 44: hookrelay listen POSTs each event of a route to a local
// address within a second, signed with the secret it printed (the same on
// a restart); --replay-from sends the stored ones first; two listeners
// both get each; killing one leaves the route's deliveries as they were.
func TestListenForwardsEachEventToALocalAddress(t *testing.T) {
	t.Parallel()
	dest := newDestination(t)
	dest.accept.Store(true)
	a := startAdminRelay(t, dest)
	dev := a.cli(t, a.adminTok)
	before := a.send(t, "evt_before_listen")

	app1, app2 := newLocalApp(t), newLocalApp(t)
	l1, secret := startListener(t, dev, app1, "--route", "billing")
	l2, secret2 := startListener(t, dev, app2, "--events", "demo.invoice.*")
	require.Equal(t, secret, secret2, "one secret per developer, kept")

	sent := time.Now()
	id := a.send(t, "evt_listen_1")
	accepted := time.Now()
	for _, app := range []*localApp{app1, app2} {
		hits := app.waitFor(t, 1)
		require.Len(t, hits, 1, "only the event sent after the start: %v", hits)
		h := hits[0]
		latency := h.at.Sub(accepted)
		t.Logf("accepted→local: %s (sent→local %s)", latency.Round(time.Millisecond), h.at.Sub(sent).Round(time.Millisecond))
		require.Less(t, latency, testenv.Scaled(time.Second), "within a second of the receiver's 200")
		require.Equal(t, id, h.header.Get("webhook-id"))
		require.JSONEq(t, `{"id":"evt_listen_1","type":"invoice.paid","amount":4200}`, string(h.body))
		wh, err := standardwebhooks.NewWebhook(secret)
		require.NoError(t, err)
		require.NoError(t, wh.Verify(h.body, h.header), "signed with the printed secret")
	}

	// A third listener from 10 minutes back gets the stored events first.
	app3 := newLocalApp(t)
	_, secret3 := startListener(t, dev, app3, "--route", "billing", "--replay-from", "10m")
	require.Equal(t, secret, secret3, "the same secret on a restart")
	hits := app3.waitFor(t, 2)
	require.Equal(t, []string{before, id}, []string{hits[0].header.Get("webhook-id"), hits[1].header.Get("webhook-id")}, "stored ones, oldest first")

	// Killing a listener changes nothing for the route: each event is
	// delivered to billing once, and the next one still is.
	require.NoError(t, l1.cmd.Process.Signal(syscall.SIGKILL))
	l1.exited(t, 10*time.Second)
	next := a.send(t, "evt_after_kill")
	app2.waitFor(t, 2)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Len(c, dest.posts(), 3, "billing got each of the 3 events once")
	}, testenv.Scaled(20*time.Second), 50*time.Millisecond)
	for _, e := range []string{before, id, next} {
		ev := a.show(t, e)
		require.Equal(t, "delivered", ev.Deliveries[0].State, e)
		require.Len(t, ev.Deliveries[0].AttemptRows, 1, "one attempt: %s", e)
	}

	// Ctrl-C ends a listener cleanly.
	require.NoError(t, l2.cmd.Process.Signal(os.Interrupt))
	require.Equal(t, 0, l2.exited(t, 10*time.Second), l2.output())
	require.Len(t, app1.hits(), 1, "the killed listener sent nothing more")
}
