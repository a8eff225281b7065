package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/stretchr/testify/require"
)

// daemonShell is a new shell with the repository's config on a migrated
// database and a prefix of its own, amqp.url replaced by amqpURL, and the
// secrets the daemons need.
func daemonShell(t *testing.T, amqpURL string) *shell {
	t.Helper()
	s := newShell(t)
	dbURL := storetest.NewDatabase(t)
	amqptest.Dial(t)
	cfg := strings.Replace(repoConfig(t, dbURL, amqptest.Prefix(t)), fmt.Sprintf("%q", testenv.AMQPURL()), fmt.Sprintf("%q", amqpURL), 1)
	path := s.writeConfig("config.yaml", cfg)
	deleteTopologyOf(t, path)
	for k, v := range secretsEnv {
		s.env[k] = v
	}
	return s
}

// Issue 12, item 8: a broker that refuses the credentials stops both
// daemons at start, with an error naming the setting, before anything
// says "started" or "ready"; the dispatcher blames RabbitMQ, not the
// management API.
func TestStartupRefusedCredentialsExitNamingTheSetting(t *testing.T) {
	t.Parallel()
	wrong := strings.Replace(testenv.AMQPURL(), "guest:guest@", "guest:wrong@", 1)
	require.NotEqual(t, wrong, testenv.AMQPURL(), "the test broker's URL has guest:guest")
	s := daemonShell(t, wrong)
	for _, bin := range []string{"receiver", "dispatcher"} {
		p := s.start(bin)
		code := p.exited(t, 30*time.Second)
		log := p.output()
		require.Equal(t, 1, code, "%s:\n%s", bin, log)
		require.Contains(t, log, "credentials refused (check the user and password in amqp.url/urls)", bin)
		require.Contains(t, log, `"level":"error"`, bin)
		require.NotContains(t, log, "started", bin)
		require.NotContains(t, log, "ready", bin)
		require.NotContains(t, log, "management", bin)
		require.NotContains(t, log, "401", bin)
	}
}

// Issue 12, item 8, and issue 18, item 9: a broker that does not answer
// (a wrong port) is retried, saying so at warn every few seconds and
// naming the setting; the dispatcher does not start consuming meanwhile,
// its /healthz answers from the first second (a liveness probe must not
// restart it in a loop), /readyz says what it waits for, and SIGINT while
// it waits stops it cleanly, saying so.
func TestStartupUnreachableBrokerSaysSoEveryFewSeconds(t *testing.T) {
	t.Parallel()
	s := daemonShell(t, "amqp://guest:guest@"+freeAddr(t)+"/")
	listen := freeAddr(t)
	s.env["HOOKRELAY_DISPATCHER_LISTEN"] = listen
	d := s.start("dispatcher")
	line := d.waitLine(t, "rabbitmq does not answer", 30*time.Second)
	require.Contains(t, line, `"level":"warn"`)
	require.Contains(t, line, "amqp.url/urls")
	resp, err := http.Get("http://" + listen + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, err = http.Get("http://" + listen + "/readyz")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.JSONEq(t, `{"status":"starting","postgres":"ok","rabbitmq":"waiting"}`, string(body))
	require.Eventually(t, func() bool { return strings.Count(d.output(), "rabbitmq does not answer") >= 3 }, testenv.Scaled(20*time.Second), 50*time.Millisecond,
		"said again every few seconds")
	require.NotContains(t, d.output(), `"level":"error"`, "waiting is no error")
	require.NotContains(t, d.output(), "ready")
	d.stop(t)
	require.Equal(t, 0, d.exited(t, 10*time.Second), "SIGINT while waiting stops it cleanly")
	require.Contains(t, d.output(), "dispatcher stopped while waiting for rabbitmq")
}

// Issue 12, item 8: the ready line lists the webhook URLs and the routes;
// deliveries show in a summary line per route at info; durations in the
// log carry their unit.
func TestReadyLineSummaryAndDurationUnits(t *testing.T) {
	t.Parallel()
	dest := newDestination(t)
	r := startRelay(t, dest, map[string]string{"HOOKRELAY_DISPATCHER_SUMMARY_INTERVAL": "1s"})
	line := r.receiver.waitLine(t, "ready: POST ", 10*time.Second)
	require.Contains(t, line, `"message":"ready: POST `+r.webhooks+`demo"`)
	require.Contains(t, line, `"routes":["billing: demo.invoice.* demo.payment.#"]`)
	line = r.dispatcher.waitLine(t, "ready: delivering", 10*time.Second)
	require.Contains(t, line, `ready: delivering billing to `+dest.srv.URL+`/hooks`)

	id := r.send(t, "evt_summary")
	line = r.dispatcher.waitLine(t, "delivery failed; retry scheduled", 20*time.Second)
	require.Contains(t, line, `"retry_in":"10s"`, "a duration with its unit")
	line = r.dispatcher.waitLine(t, "route summary", 10*time.Second)
	require.Contains(t, line, `"level":"info"`)
	require.Contains(t, line, `"route":"billing","delivered":0,"retrying":1,"dead":0`)
	require.Contains(t, line, `"interval":"1s"`)

	dest.accept.Store(true)
	res := r.op.run("hookrelay", "retry", "--event", id)
	require.Equal(t, 0, res.code, res)
	line = r.dispatcher.waitLine(t, `"delivered":1`, 20*time.Second)
	require.Contains(t, line, "route summary")
}
