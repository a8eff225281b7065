package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// relayEvent is the body of an event of the relay's own.
type relayEvent struct {
	Type    string `json:"type"`
	Team    string `json:"team"`
	Route   string `json:"route"`
	EventID string `json:"event_id"`
	Source  string `json:"source"`
	By      string `json:"by"`
}

// relayEventsOf returns the events of the relay's own that route got,
// each as many times as it got it.
func relayEventsOf(t *testing.T, dest *destination, route string) []relayEvent {
	t.Helper()
	var out []relayEvent
	for _, q := range dest.snapshot() {
		if q.route != route {
			continue
		}
		var ev relayEvent
		require.NoError(t, json.Unmarshal(q.body, &ev), "%s", q.body)
		require.Equal(t, "hookrelay", q.header.Get("X-Hookrelay-Source"))
		require.Equal(t, ev.Type, q.header.Get("X-Hookrelay-Event-Type"))
		out = append(out, ev)
	}
	return out
}

// waitRelayEventsSettled waits until every event of the relay's own is
// stored (system_events empty) and every pair of them is delivered.
func (h *harness) waitRelayEventsSettled() {
	h.t.Helper()
	require.EventuallyWithT(h.t, func(c *assert.CollectT) {
		var waiting, owed int
		require.NoError(c, h.db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM system_events`).Scan(&waiting))
		require.NoError(c, h.db.Pool().QueryRow(context.Background(), `
			SELECT count(*) FROM deliveries d JOIN events e ON e.id = d.event_id
			WHERE e.source = 'hookrelay' AND d.state <> 'delivered'`).Scan(&owed))
		require.Zero(c, waiting, "events of the relay's own waiting to be stored")
		require.Zero(c, owed, "pairs of them not delivered")
	}, testenv.Scaled(20*time.Second), 50*time.Millisecond)
}

// Issue 43: a circuit that opens on a route produces exactly one
// route.circuit_opened, written in the statement that opened it, so it
// is there even when the dispatcher that opened it is killed right after
// (before anything else of it ran); it reaches the team's alert route and
// the platform's, and no route of another team: that team's alert route
// gets no copy, not even in its queue.
func TestCircuitOpeningIsReportedOnceAndToItsTeamOnly(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.cfg.Database.URL = storetest.AppURL(t, h.dbURL) // a role row-level security holds
	for _, team := range []string{"team-a", "team-b"} {
		_, err := h.db.Pool().Exec(t.Context(), `INSERT INTO teams (name, created_by) VALUES ($1, 'test')`, team)
		require.NoError(t, err)
	}
	dest := newDestination(t, failingAt("a-flaky", http.StatusServiceUnavailable))
	flaky := testRoute("a-flaky", dest.url("a-flaky"), "acme.invoice.*")
	flaky.Team, flaky.Concurrency, flaky.MaxAttempts = "team-a", 1, 50
	flaky.Circuit = config.Circuit{Failures: 2, Cooldown: 5 * time.Minute}
	aAlerts := testRoute("a-alerts", dest.url("a-alerts"), "hookrelay.route.*")
	aAlerts.Team = "team-a"
	bAlerts := testRoute("b-alerts", dest.url("b-alerts"), "hookrelay.route.*")
	bAlerts.Team = "team-b"
	opsAlerts := testRoute("ops-alerts", dest.url("ops-alerts"), "hookrelay.#")
	h.cfg.Sources[0].Subscribers = []string{"team-a"}
	h.cfg.Routes = []config.Route{flaky, aAlerts, bAlerts, opsAlerts}
	h.start(app.ReceiverOptions{})

	// The dispatcher that opens the circuit is killed the moment it is
	// open; another delivers the report.
	cfg := h.processConfig("127.0.0.1:0")
	child, out := startDispatcherChild(t, &cfg)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("killed dispatcher's log:\n%s", out.String())
		}
	})
	for i := range 4 {
		h.postSigned(fmt.Sprintf("evt_open_%d", i), "invoice.paid")
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.Equal(c, webhook.CircuitOpen, h.routeState(c, "a-flaky").Circuit)
	}, testenv.Scaled(30*time.Second), 5*time.Millisecond, "the circuit opens")
	require.NoError(t, child.Process.Signal(syscall.SIGKILL))
	_ = child.Wait()
	h.startDispatcher(app.DispatcherOptions{})

	dest.waitFor(testenv.Scaled(20*time.Second), "the report at both alert routes", func(rs []received) bool {
		return len(dest.successes()) >= 2
	})
	h.waitRelayEventsSettled()
	for _, route := range []string{"a-alerts", "ops-alerts"} {
		got := relayEventsOf(t, dest, route)
		require.Len(t, got, 1, "%s: one report", route)
		require.Equal(t, relayEvent{Type: "route.circuit_opened", Team: "team-a", Route: "a-flaky"}, got[0], route)
	}
	require.Empty(t, relayEventsOf(t, dest, "b-alerts"), "team B hears nothing of team A's route")
	require.Zero(t, amqptest.Count(t, h.ch, h.names.RouteQueue("b-alerts")), "not even a copy in its queue")
	var stored int
	require.NoError(t, h.db.Pool().QueryRow(t.Context(),
		`SELECT count(*) FROM events WHERE source = 'hookrelay' AND event_type = 'route.circuit_opened'`).Scan(&stored))
	require.Equal(t, 1, stored)
}

// Issue 43: a route's dead letters are reported (delivery.dead_lettered,
// at most one a minute per route: a backlog dying does not flood), and so
// are a pause and a resume, with who did them, and the end of a job.
func TestDeadLettersAndPausesAreReported(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	dest := newDestination(t, failingAt("gone", http.StatusGone))
	gone := testRoute("gone", dest.url("gone"), "acme.invoice.*")
	watch := testRoute("watch", dest.url("watch"), "hookrelay.#")
	h.cfg.Routes = []config.Route{gone, watch}
	h.start(app.ReceiverOptions{})
	h.startDispatcher(app.DispatcherOptions{})

	var ids []string
	for i := range 3 {
		ids = append(ids, h.postSigned(fmt.Sprintf("evt_gone_%d", i), "invoice.paid").ID)
	}
	for _, id := range ids {
		h.waitPair(id, "gone", webhook.StateDead)
	}
	// Two jobs end: one failed, one succeeded (a cancelled one is not
	// reported).
	for i, errText := range []string{"boom", ""} {
		job := &store.Job{ID: uuid.Must(uuid.NewV7()), Kind: "replay", Actor: "alice", Owner: uuid.New()}
		_, _, err := h.db.JobCreate(t.Context(), job)
		require.NoError(t, err, "job %d", i)
		require.NoError(t, h.db.JobFinish(t.Context(), job.ID, job.Owner, nil, nil, errText, false))
	}
	changed, err := h.db.RoutePause(t.Context(), "gone", true, "alice")
	require.NoError(t, err)
	require.True(t, changed)
	changed, err = h.db.RoutePause(t.Context(), "gone", false, "alice")
	require.NoError(t, err)
	require.True(t, changed)
	h.waitRelayEventsSettled()

	byType := map[string][]relayEvent{}
	for _, ev := range relayEventsOf(t, dest, "watch") {
		byType[ev.Type] = append(byType[ev.Type], ev)
	}
	require.Len(t, byType["delivery.dead_lettered"], 1, "three dead letters within a minute: one report")
	dead := byType["delivery.dead_lettered"][0]
	require.Equal(t, "gone", dead.Route)
	require.Contains(t, ids, dead.EventID)
	require.Equal(t, []relayEvent{{Type: "route.paused", Team: "platform", Route: "gone", By: "alice"}}, byType["route.paused"])
	require.Equal(t, []relayEvent{{Type: "route.resumed", Team: "platform", Route: "gone", By: "alice"}}, byType["route.resumed"])
	require.Len(t, byType["job.failed"], 1)
	require.Len(t, byType["job.succeeded"], 1)
	require.Len(t, byType, 5, "nothing else: %v", byType)
}

// Issue 43: what no single change makes is checked (store.SystemEventsCheck,
// every 30s in each receiver; called here): a route whose oldest
// undelivered event is older than alerts.backlog_after gets route.backlog,
// and a source that rejected alerts.rejections_per_minute requests in a
// minute gets source.rejections, each once however often it is checked.
func TestBacklogAndRejectionsAreReported(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	dest := newDestination(t, failingAt("stuck", http.StatusServiceUnavailable))
	stuck := testRoute("stuck", dest.url("stuck"), "acme.invoice.*")
	stuck.MaxAttempts, stuck.Circuit.Failures = 50, 0
	watch := testRoute("watch", dest.url("watch"), "hookrelay.#")
	h.cfg.Routes = []config.Route{stuck, watch}
	h.start(app.ReceiverOptions{ActivityInterval: 100 * time.Millisecond})
	h.startDispatcher(app.DispatcherOptions{})

	h.postSigned("evt_stuck", "invoice.paid")
	body := []byte(`{"id":"evt_forged","type":"invoice.paid"}`)
	for range 3 {
		r := h.post("acme", body, http.Header{"X-Acme-Signature": {"sha256=00"}})
		require.Equal(t, http.StatusUnauthorized, r.status)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var n int
		require.NoError(c, h.db.Pool().QueryRow(context.Background(), `
			SELECT COALESCE(sum(n), 0) FROM activity_minutes WHERE kind = 'ingest' AND name = 'acme' AND outcome = 'rejected'`).Scan(&n))
		require.Equal(c, 3, n)
		var undelivered int
		require.NoError(c, h.db.Pool().QueryRow(context.Background(), `
			SELECT count(*) FROM deliveries WHERE route = 'stuck' AND state IN ('pending', 'retrying')`).Scan(&undelivered))
		require.Equal(c, 1, undelivered)
	}, testenv.Scaled(10*time.Second), 20*time.Millisecond)

	for range 3 { // as several receivers, or several checks, would
		_, err := h.db.SystemEventsCheck(t.Context(), time.Millisecond, 3)
		require.NoError(t, err)
	}
	h.waitRelayEventsSettled()
	got := map[string]int{}
	for _, ev := range relayEventsOf(t, dest, "watch") {
		got[ev.Type+" "+ev.Route+ev.Source]++
	}
	// At 1ms, watch's own pairs of these reports may count as a backlog
	// too: once at most.
	require.LessOrEqual(t, got["route.backlog watch"], 1)
	delete(got, "route.backlog watch")
	require.Equal(t, map[string]int{"route.backlog stuck": 1, "source.rejections acme": 1}, got)
}
