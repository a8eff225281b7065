package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// alarmEnv enables TestBrokerAlarm*. A memory alarm blocks every publisher
// on the broker, so these tests run alone, in a go test invocation of their
// own (scripts/test.sh), never beside other tests.
const alarmEnv = "HOOKRELAY_TEST_BROKER_ALARM"

// raiseMemoryAlarm sets a watermark the broker is always above, so it raises
// its memory alarm and blocks publishing connections; the returned func
// (also registered with t.Cleanup) restores the default watermark.
func raiseMemoryAlarm(t *testing.T) (clear func()) {
	t.Helper()
	rabbitmqctl(t, "set_vm_memory_high_watermark", "0.4") // fail early if it cannot be restored
	t.Cleanup(func() { rabbitmqctl(t, "set_vm_memory_high_watermark", "0.4") })
	rabbitmqctl(t, "set_vm_memory_high_watermark", "0.0000001")
	require.Eventually(t, memAlarm(t), testenv.Scaled(30*time.Second), 50*time.Millisecond, "the memory alarm never went off")
	return func() {
		rabbitmqctl(t, "set_vm_memory_high_watermark", "0.4")
		require.Eventually(t, func() bool { return !memAlarm(t)() }, testenv.Scaled(30*time.Second), 50*time.Millisecond, "the memory alarm never cleared")
	}
}

func rabbitmqctl(t *testing.T, args ...string) {
	t.Helper()
	path, err := exec.LookPath("rabbitmqctl")
	if err != nil {
		path = "/usr/sbin/rabbitmqctl"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, args...).CombinedOutput()
	if err != nil {
		t.Errorf("rabbitmqctl %v: %v\n%s", args, err, out)
	}
}

// memAlarm reports whether any broker node has its memory alarm on.
func memAlarm(t *testing.T) func() bool {
	return func() bool {
		resp, err := http.Get(testenv.ManagementURL() + "/api/nodes")
		if err != nil {
			t.Logf("reading nodes: %v", err)
			return false
		}
		defer resp.Body.Close()
		var nodes []struct {
			MemAlarm bool `json:"mem_alarm"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&nodes); err != nil {
			t.Logf("reading nodes: %v", err)
			return false
		}
		for _, n := range nodes {
			if n.MemAlarm {
				return true
			}
		}
		return false
	}
}

// readyz returns base's /readyz status and body.
func readyz(t tb, base string) (int, map[string]string) {
	t.Helper()
	resp, err := http.Get(base + "/readyz")
	require.NoError(t, err)
	defer resp.Body.Close()
	var body map[string]string
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	return resp.StatusCode, body
}

// Issue 8, item 10: a broker resource alarm blocks publishing. Ingest keeps
// answering 200 (the outbox grows), the dispatcher keeps delivering: a
// failed attempt's retry copy goes into the outbox with its record (issue
// 25), so only a dead letter needs the dispatcher to publish, and that
// delivery holds its message without a new POST. Both binaries show the
// block in /readyz and hookrelay_rabbitmq_blocked, and once the alarm
// clears everything is delivered, each pair once.
func TestBrokerAlarmHoldsPublishesAndLosesNothing(t *testing.T) {
	if os.Getenv(alarmEnv) != "1" {
		if testenv.InCI() {
			t.Skipf("runs alone in its own go test invocation (%s=1 go test -run '^TestBrokerAlarm', see scripts/test.sh): a broker alarm blocks every test's publishers", alarmEnv)
		}
		t.Skipf("set %s=1 and run it alone: it raises the broker's memory alarm", alarmEnv)
	}
	amqptest.RequireManagement(t)
	h := newHarness(t)
	h.cfg.Routes[0].Concurrency = 2
	h.cfg.Routes[0].Timeout = time.Minute // the test answers the held requests itself
	h.cfg.Retry.Backoff = []time.Duration{200 * time.Millisecond}
	releaseRetry, releaseGone := make(chan struct{}), make(chan struct{})
	arrived := make(chan string, 4)
	dest := newDestination(t, func(_ http.ResponseWriter, r *http.Request, body []byte, _ string, prior int) int {
		var ev struct{ ID string }
		_ = json.Unmarshal(body, &ev)
		if prior > 0 {
			return http.StatusOK
		}
		switch ev.ID {
		case "evt_retry":
			arrived <- ev.ID
			<-releaseRetry
			return http.StatusInternalServerError // retried: its copy goes into the outbox
		case "evt_gone":
			arrived <- ev.ID
			<-releaseGone
			return http.StatusGone // dead: its dead letter needs a publish
		}
		return http.StatusOK
	})
	h.cfg.Routes[0].URL = dest.url("billing")
	// Registered after the destination's own cleanup, so it runs first: a
	// failed test does not leave requests hanging on these.
	released := map[chan struct{}]bool{}
	release := func(c chan struct{}) {
		if !released[c] {
			released[c] = true
			close(c)
		}
	}
	t.Cleanup(func() {
		release(releaseRetry)
		release(releaseGone)
	})
	h.start(app.ReceiverOptions{})
	h.startDispatcher(app.DispatcherOptions{})

	ids := map[string]string{}
	for _, k := range []string{"evt_retry", "evt_gone"} {
		r := h.postSigned(k, "invoice.paid")
		require.Equal(t, http.StatusOK, r.status)
		ids[k] = r.ID
	}
	// Both consumers are busy with these two...
	for range 2 {
		select {
		case <-arrived:
		case <-time.After(testenv.Scaled(20 * time.Second)):
			t.Fatal("the first deliveries never reached the destination")
		}
	}
	// ...so the next one waits in the queue.
	r := h.postSigned("evt_next", "invoice.paid")
	require.Equal(t, http.StatusOK, r.status)
	ids["evt_next"] = r.ID
	amqptest.WaitCount(t, h.ch, h.names.RouteQueue("billing"), 1, 10*time.Second)

	clearAlarm := raiseMemoryAlarm(t)
	alarmOn := time.Now()

	// Ingest needs only Postgres: it answers 200 and the outbox grows.
	for i := range 10 {
		k := fmt.Sprint("evt_during_", i)
		r := h.postSigned(k, "invoice.paid")
		require.Equal(t, http.StatusOK, r.status, r.Error)
		ids[k] = r.ID
	}
	require.Equal(t, int64(10), h.outboxBacklog(), "nothing is published while the broker blocks")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		status, body := readyz(c, h.base)
		require.Equal(c, http.StatusOK, status)
		require.Equal(c, "blocked", body["rabbitmq"])
	}, testenv.Scaled(10*time.Second), 50*time.Millisecond, "the receiver stays ready and shows the block")
	require.Equal(t, 1.0, scrape(t, h.metricsBase)[`hookrelay_rabbitmq_blocked{connection="receiver_publisher"}`])

	// evt_retry fails: its retry copy waits in the outbox with the events,
	// the message is acked, and its consumer delivers evt_next during the
	// alarm.
	release(releaseRetry)
	dest.waitFor(20*time.Second, "evt_next delivered during the alarm", func(rs []received) bool {
		for _, q := range rs {
			if q.eventID == ids["evt_next"] {
				return true
			}
		}
		return false
	})
	require.Equal(t, int64(11), h.outboxBacklog(), "the retry copy waits in the outbox")

	// evt_gone is dead: its dead letter needs a publish, and the
	// dispatcher holds it.
	release(releaseGone)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		status, body := readyz(c, h.dispatcherBase)
		require.Equal(c, http.StatusOK, status)
		require.Equal(c, "blocked", body["rabbitmq"])
	}, testenv.Scaled(10*time.Second), 50*time.Millisecond, "the dispatcher shows the block")
	require.Equal(t, 1.0, scrape(t, h.dispatcherBase)[`hookrelay_rabbitmq_blocked{connection="dispatcher_publisher"}`])
	require.True(t, memAlarm(t)(), "the alarm was still on")
	posts := map[string]int{}
	for _, q := range dest.snapshot() {
		posts[q.eventID]++
	}
	require.Equal(t, 1, posts[ids["evt_retry"]], "the retry waits for its copy")
	require.Equal(t, 1, posts[ids["evt_gone"]], "the held message is not POSTed again during the block")

	clearAlarm()
	t.Logf("alarm on for %s", time.Since(alarmOn).Round(time.Millisecond))

	h.waitOutboxEmpty(60 * time.Second)
	gone := ids["evt_gone"]
	delete(ids, "evt_gone")
	dest.waitFor(60*time.Second, "every event delivered", func([]received) bool {
		return len(dest.successes()) == len(ids)
	})
	amqptest.WaitCount(t, h.ch, h.names.DeadQueue("billing"), 1, 30*time.Second)
	dead := amqptest.Drain(t, h.ch, h.names.DeadQueue("billing"))
	require.Len(t, dead, 1)
	require.Equal(t, gone, dead[0].MessageId)
	h.waitQueuesEmpty(10 * time.Second)
	want := map[string]int{}
	for _, id := range ids {
		want["billing "+id] = 1
	}
	require.Equal(t, want, dest.successes(), "every pair delivered once")
	for _, q := range dest.snapshot() {
		if q.eventID == ids["evt_retry"] && q.status == http.StatusOK {
			require.Equal(t, "2", q.attempt, "evt_retry succeeded on its retry")
		}
		if q.eventID == gone {
			require.Equal(t, http.StatusGone, q.status, "evt_gone was POSTed once")
		}
	}
	for _, base := range []string{h.base, h.dispatcherBase} {
		status, body := readyz(t, base)
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, "ok", body["rabbitmq"])
	}
	require.Equal(t, 0.0, scrape(t, h.metricsBase)[`hookrelay_rabbitmq_blocked{connection="receiver_publisher"}`])
	require.Equal(t, 0.0, scrape(t, h.dispatcherBase)[`hookrelay_rabbitmq_blocked{connection="dispatcher_publisher"}`])
	// The receiver's direct publish of the events stored during the block
	// failed at once; it handed their rows to the outbox publisher instead
	// of leaving them to wait out outbox.direct_hold.
	require.Equal(t, 10.0, scrape(t, h.metricsBase)[`hookrelay_outbox_direct_total{outcome="released"}`])
}
