package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// destination is a webhook target that fails with 503 until told to
// accept, and records the attempt header of every POST.
type destination struct {
	srv      *httptest.Server
	accept   atomic.Bool
	mu       sync.Mutex
	attempts []string
}

func newDestination(t *testing.T) *destination {
	d := &destination{}
	d.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		d.mu.Lock()
		d.attempts = append(d.attempts, r.Header.Get("X-Hookrelay-Attempt"))
		d.mu.Unlock()
		if !d.accept.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(d.srv.Close)
	return d
}

func (d *destination) posts() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.attempts...)
}

// relay is the repository's config run by the built receiver and
// dispatcher, delivering billing to dest; the operator's shell has none of
// the secrets and finds the config through HOOKRELAY_CONFIG.
type relay struct {
	op                    *shell
	cfg                   *config.Config
	receiver, dispatcher  *proc
	webhooks, dispatchURL string
}

func startRelay(t *testing.T, dest *destination, env map[string]string) *relay {
	t.Helper()
	daemons := newShell(t)
	dbURL := storetest.NewDatabase(t)
	amqptest.Dial(t)
	path := daemons.writeConfig("config.yaml", repoConfig(t, dbURL, amqptest.Prefix(t)))
	deleteTopologyOf(t, path)
	for k, v := range secretsEnv {
		daemons.env[k] = v
	}
	for k, v := range env {
		daemons.env[k] = v
	}
	daemons.env["BILLING_URL"] = dest.srv.URL + "/hooks"
	cfg, err := config.Load(path, func(k string) (string, bool) { v, ok := daemons.env[k]; return v, ok })
	require.NoError(t, err)
	r := &relay{op: newShell(t), cfg: cfg}
	r.op.env["HOOKRELAY_CONFIG"] = path
	r.receiver = daemons.start("receiver")
	r.dispatcher = daemons.start("dispatcher")
	r.webhooks = "http://" + cfg.Receiver.Listen + "/webhooks/"
	r.dispatchURL = "http://" + cfg.Dispatcher.Listen
	for _, u := range []string{"http://" + cfg.Receiver.Listen + "/readyz", r.dispatchURL + "/readyz"} {
		require.Eventually(t, func() bool {
			resp, err := http.Get(u)
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}, testenv.Scaled(30*time.Second), 50*time.Millisecond, "%s never ready", u)
	}
	return r
}

// send posts a demo event signed as the repository config's source wants
// and returns its id.
func (r *relay) send(t *testing.T, key string) string {
	t.Helper()
	body := fmt.Sprintf(`{"id":%q,"type":"invoice.paid","amount":4200}`, key)
	mac := hmac.New(sha256.New, []byte(secretsEnv["HOOKRELAY_DEMO_SECRET"]))
	mac.Write([]byte(body))
	req, err := http.NewRequest(http.MethodPost, r.webhooks+"demo", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Demo-Signature", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var got struct{ ID string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return got.ID
}

// show is `hookrelay events show ID --json`.
// t is the test, or EventuallyWithT's collector inside a condition.
func (r *relay) show(t require.TestingT, id string) ops.EventDetail {
	res := r.op.runFor(t, "", "hookrelay", "events", "show", id, "--json")
	require.Equal(t, 0, res.code, res)
	var ev ops.EventDetail
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &ev), res.stdout)
	return ev
}

// metric reads one sample of the dispatcher's /metrics, 0 when absent.
// t is the test, or EventuallyWithT's collector inside a condition.
func (r *relay) metric(t require.TestingT, series string) float64 {
	resp, err := http.Get(r.dispatchURL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, line := range bytes.Split(body, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte(series+" ")); ok {
			f, err := strconv.ParseFloat(string(v), 64)
			require.NoError(t, err)
			return f
		}
	}
	return 0
}

// Issue 12, item 7: events show says when a retrying pair's next attempt
// is due; `hookrelay retry` delivers it now, once, and the copy that comes
// back from its retry tier later is counted as superseded, not delivered;
// a replay starts series 2, and events show numbers attempts within their
// series.
func TestRetryNowSupersedesTheTierCopyAndReplayStartsASeries(t *testing.T) {
	t.Parallel()
	dest := newDestination(t)
	r := startRelay(t, dest, nil)
	id := r.send(t, "evt_retry_now")

	// Attempt 1 fails; its copy waits in the 10s tier.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ev := r.show(c, id)
		require.Len(c, ev.Deliveries, 1)
		assert.Equal(c, "retrying", ev.Deliveries[0].State)
	}, testenv.Scaled(20*time.Second), 50*time.Millisecond)
	res := r.op.run("hookrelay", "events", "show", id)
	require.Equal(t, 0, res.code, res)
	t.Log("\n" + res.stdout)
	require.Regexp(t, `next attempt 2 of series 1 due \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \(in \d+s\); hookrelay retry --event `+id+` --route billing to attempt it now`, res.stdout)
	ev := r.show(t, id)
	require.NotNil(t, ev.Deliveries[0].NextAttemptAt)
	require.WithinDuration(t, time.Now().Add(10*time.Second), *ev.Deliveries[0].NextAttemptAt, 5*time.Second)

	res = r.op.run("hookrelay", "retry", "--route", "billing", "--state", "retrying", "--dry-run")
	require.Equal(t, 0, res.code, res)
	require.Contains(t, res.stdout, "would retry 1 pair(s) now")

	dest.accept.Store(true)
	res = r.op.run("hookrelay", "retry", "--event", id)
	require.Equal(t, 0, res.code, res)
	t.Log("\n" + res.stdout)
	require.Contains(t, res.stdout, "billing")
	require.Contains(t, res.stdout, "retried 1 pair(s) now, skipped 0")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ev := r.show(c, id)
		require.NotEmpty(c, ev.Deliveries)
		assert.Equal(c, "delivered", ev.Deliveries[0].State)
	}, testenv.Scaled(20*time.Second), 50*time.Millisecond)
	require.Equal(t, []string{"1", "2"}, dest.posts(), "retry-now is attempt 2 of the series, delivered once")

	// The tier copy comes back after its 10s and is dropped.
	superseded := `hookrelay_deliveries_total{outcome="superseded",route="billing"}`
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, 1.0, r.metric(c, superseded)) }, testenv.Scaled(30*time.Second), 100*time.Millisecond)
	require.Equal(t, []string{"1", "2"}, dest.posts(), "the superseded copy is not delivered")
	res = r.op.run("hookrelay", "retry", "--event", id)
	require.Equal(t, 0, res.code, res)
	require.Contains(t, res.stdout, "retried 0 pair(s) now, skipped 1")
	require.Contains(t, res.stdout, "delivered")

	// A replay starts series 2.
	res = r.op.run("hookrelay", "replay", "--event", id, "--include-delivered")
	require.Equal(t, 0, res.code, res)
	require.Eventually(t, func() bool { return len(dest.posts()) == 3 }, testenv.Scaled(20*time.Second), 50*time.Millisecond)
	require.Equal(t, "1", dest.posts()[2], "a new series starts at attempt 1")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ev := r.show(c, id)
		require.NotEmpty(c, ev.Deliveries)
		d := ev.Deliveries[0]
		assert.Equal(c, "delivered", d.State)
		assert.Len(c, d.AttemptRows, 3)
	}, testenv.Scaled(20*time.Second), 50*time.Millisecond)
	d := r.show(t, id).Deliveries[0]
	require.Equal(t, 2, d.Series)
	var series []string
	for _, a := range d.AttemptRows {
		series = append(series, fmt.Sprintf("%d.%d", a.Series, a.Attempt))
	}
	require.Equal(t, []string{"1.1", "1.2", "2.1"}, series)
	res = r.op.run("hookrelay", "events", "show", id)
	t.Log("\n" + res.stdout)
	require.Contains(t, res.stdout, "route billing: delivered after 3 attempt(s) in 2 series; the last was attempt 1 of series 2")
	// An attempt under a millisecond took 0s.
	require.Regexp(t, regexp.MustCompile(`(?m)^\s+2\s+1\s+\S+\s+(\d+ms|0s)\s+200\s+delivered`), res.stdout)
}

// Issue 12, item 7: retry of a route's retrying pairs, with progress; a
// pair that is not retrying is skipped, saying why.
func TestRetryRouteRetryingPairs(t *testing.T) {
	t.Parallel()
	dest := newDestination(t)
	r := startRelay(t, dest, nil)
	var ids []string
	for i := range 3 {
		ids = append(ids, r.send(t, fmt.Sprint("evt_route_", i)))
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res := r.op.runFor(c, "", "hookrelay", "events", "list", "--state", "retrying")
		assert.Equal(c, "3 event(s)", lastLine(res.stdout))
	}, testenv.Scaled(20*time.Second), 50*time.Millisecond)

	res := r.op.run("hookrelay", "retry", "--route", "billing")
	require.Equal(t, 2, res.code, res)
	require.Contains(t, res.stderr, "--state retrying")

	dest.accept.Store(true)
	res = r.op.run("hookrelay", "retry", "--route", "billing", "--state", "retrying")
	require.Equal(t, 0, res.code, res)
	require.Contains(t, res.stdout, "retried 3 pair(s) now, skipped 0")
	require.Contains(t, res.stderr, "retry: 3 of 3 pair(s)", "progress on stderr")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res := r.op.runFor(c, "", "hookrelay", "events", "list", "--state", "delivered")
		assert.Equal(c, "3 event(s)", lastLine(res.stdout))
	}, testenv.Scaled(20*time.Second), 50*time.Millisecond)
	require.Len(t, dest.posts(), 6, "each pair once more, not twice")
}
