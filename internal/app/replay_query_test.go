package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bulkForCustomers inserts n events of source acme received an hour ago,
// every other one of customer cus_bulk (the others of cus_other), each
// with a delivery to route in state, and returns the ids of cus_bulk's.
func bulkForCustomers(t *testing.T, db *store.DB, n int, route, state string) []string {
	t.Helper()
	rows, err := db.Pool().Query(context.Background(), `
		WITH ev AS (
			INSERT INTO events (id, source, idempotency_key, event_type, content_type, body, received_at, keyed)
			SELECT hookrelay_uuid7(now() - interval '1 hour' + i * interval '1 millisecond'), 'acme', 'evt_q_' || i, 'invoice.paid', 'application/json',
				convert_to('{"id":"evt_q_' || i || '","type":"invoice.paid","data":{"object":{"customer":"'
					|| CASE WHEN i % 2 = 0 THEN 'cus_bulk' ELSE 'cus_other' END || '"}}}', 'UTF8'),
				now() - interval '1 hour' + i * interval '1 millisecond', true
			FROM generate_series(1, $1::int) AS i
			RETURNING id, convert_from(body, 'UTF8') LIKE '%cus_bulk%' AS bulk),
		d AS (
			INSERT INTO deliveries (event_id, route, state, attempts, last_status)
			SELECT id, $2, $3, 1, 200 FROM ev)
		SELECT id::text, bulk FROM ev`, n, route, state)
	require.NoError(t, err)
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		var bulk bool
		require.NoError(t, rows.Scan(&id, &bulk))
		if bulk {
			ids = append(ids, id)
		}
	}
	require.NoError(t, rows.Err())
	require.Len(t, ids, n/2)
	return ids
}

// queryHarness is a receiver with the admin API and a dispatcher whose
// billing route delivers to a counting destination at most rate a second.
func queryHarness(t *testing.T, rate float64) (*harness, *countingDestination, *apiClient) {
	t.Helper()
	h := newHarness(t)
	dest := newCountingDestination(t)
	r := &h.cfg.Routes[0]
	r.URL = dest.srv.URL + "/billing"
	r.Concurrency = 4
	r.RateLimit, r.Burst = rate, 1
	h.cfg.Database.MaxConns = 20
	h.cfg.Admin.Token = adminToken
	adminLn, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	h.start(app.ReceiverOptions{AdminListener: adminLn})
	h.startDispatcher(app.DispatcherOptions{})
	return h, dest, newAPIClient(t, "http://"+adminLn.Addr().String())
}

// Issue 42: a bulk replay by a search over the body, through a route
// limited to 50 deliveries a second: every event the search finds is
// delivered once, none it does not find, at no more than the route's
// rate, while live events keep their latency.
//
// 1,000 matching events (20 s at 50/s) in CI;
// HOOKRELAY_TEST_QUERY_REPLAY=5000 runs the 5,000 (100 s).
func TestBulkReplayByQueryKeepsTheRouteRateAndLiveLatency(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("integration test")
	}
	matching := 1000
	if v := os.Getenv("HOOKRELAY_TEST_QUERY_REPLAY"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "HOOKRELAY_TEST_QUERY_REPLAY")
		matching = n
	}
	const rate, maxLive = 50, 5 * time.Second
	h, dest, c := queryHarness(t, rate)
	ids := bulkForCustomers(t, h.db, 2*matching, "billing", "dead")

	// The dry run counts; the job replays.
	a := c.call("replay", http.MethodPost, "/api/v1/replay", adminToken, map[string]any{"dry_run": true,
		"filter": map[string]any{"where": `body.data.object.customer == "cus_bulk"`, "since": "2h", "route": "billing", "state": "dead"}})
	require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
	var job ops.Job
	a.decode(t, &job)
	job, _ = c.waitJob(adminToken, job.ID.String(), 60*time.Second)
	require.Equal(t, "succeeded", job.State, job.Error)
	var dry ops.ReplayResult
	require.NoError(t, json.Unmarshal(job.Result, &dry))
	require.Equal(t, matching, dry.ReplayedCount, "the dry run counts the search's pairs")

	traffic := startLiveTraffic(h, 250*time.Millisecond, "evt_qlive_")

	a = c.call("replay", http.MethodPost, "/api/v1/replay", adminToken, map[string]any{
		"filter": map[string]any{"where": `body.data.object.customer == "cus_bulk"`, "since": "2h", "route": "billing", "state": "dead"}})
	require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
	a.decode(t, &job)
	job, _ = c.waitJob(adminToken, job.ID.String(), time.Duration(matching/rate)*time.Second+120*time.Second)
	require.Equal(t, "succeeded", job.State, job.Error)
	var res ops.ReplayResult
	require.NoError(t, json.Unmarshal(job.Result, &res))
	require.Equal(t, matching, res.ReplayedCount)
	require.Eventually(t, func() bool {
		n, _ := dest.counts()
		got := 0
		for _, id := range ids {
			got += min(n[id], 1)
		}
		return got == matching
	}, testenv.Scaled(60*time.Second), 50*time.Millisecond, "every pair the search found delivered")
	lives, liveErr := traffic.stop()
	require.NoError(t, liveErr)
	require.NotEmpty(t, lives)
	require.Eventually(t, func() bool {
		n, _ := dest.counts()
		return len(n) == matching+len(lives)
	}, testenv.Scaled(30*time.Second), 50*time.Millisecond, "every live event delivered, and nothing the search did not find")

	n, at := dest.counts()
	var times []time.Time
	for _, id := range ids {
		require.Equal(t, 1, n[id], "pair %s delivered once", id)
		times = append(times, at[id])
	}
	// The route's rate: in no second did more than rate (plus its burst
	// of 1) of the replayed pairs arrive, live events aside.
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	most := 0
	for i, j := 0, 0; i < len(times); i++ {
		for times[i].Sub(times[j]) >= time.Second {
			j++
		}
		most = max(most, i-j+1)
	}
	span := times[len(times)-1].Sub(times[0])
	t.Logf("%d replayed pairs over %s (%.1f/s); at most %d in one second", len(times), span.Round(time.Millisecond),
		float64(len(times)-1)/span.Seconds(), most)
	require.LessOrEqual(t, most, rate+1, "the replay keeps the route's rate")
	var worst time.Duration
	for _, l := range lives {
		require.Equal(t, 1, n[l.id], "live event %s delivered once", l.id)
		worst = max(worst, at[l.id].Sub(l.accepted))
	}
	t.Logf("%d live events, the slowest delivered %s after it was accepted", len(lives), worst.Round(time.Millisecond))
	require.Less(t, worst, testenv.Scaled(maxLive), "live events keep their latency during the replay")
}

// Issue 42: a replay job by query is cancelled part way: it stops within
// 2 s and its report says how far it got; run again for the rest, and
// again after the second run is abandoned (its process stopped beating),
// it sends exactly the rest: every pair once, none twice, though the
// replay takes delivered pairs (include_delivered) which a run that
// started over would send again.
func TestCancelledAndAbandonedReplaysGoOnWithExactlyTheRest(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("integration test")
	}
	const matching = 600
	h, dest, c := queryHarness(t, 100)
	ids := bulkForCustomers(t, h.db, 2*matching, "billing", "delivered")
	body := map[string]any{"include_delivered": true, "pacing": map[string]any{"max_batch": 50},
		"filter": map[string]any{"where": `body.data.object.customer == "cus_bulk"`, "since": "2h", "route": "billing"}}
	progressOf := func(j ops.Job) ops.ReplayProgress {
		var p ops.ReplayProgress
		require.NoError(t, json.Unmarshal(j.Progress, &p))
		return p
	}
	get := func(id string) ops.Job {
		a := c.call("get-job", http.MethodGet, "/api/v1/jobs/"+id, adminToken, nil)
		require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
		var j ops.Job
		a.decode(t, &j)
		return j
	}
	// waitEnqueued waits for job id to have enqueued at least n pairs.
	waitEnqueued := func(id string, n int) {
		require.EventuallyWithT(t, func(col *assert.CollectT) {
			a := c.try(col, "get-job", http.MethodGet, "/api/v1/jobs/"+id, adminToken, nil)
			var j ops.Job
			a.decode(col, &j)
			var p ops.ReplayProgress
			assert.NoError(col, json.Unmarshal(j.Progress, &p))
			assert.GreaterOrEqual(col, p.Enqueued, n)
		}, testenv.Scaled(60*time.Second), 20*time.Millisecond, "job %s enqueues %d", id, n)
	}

	a := c.call("replay", http.MethodPost, "/api/v1/replay", adminToken, body)
	require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
	var first ops.Job
	a.decode(t, &first)
	waitEnqueued(first.ID.String(), 100)
	asked := time.Now()
	a = c.call("cancel-job", http.MethodPost, "/api/v1/jobs/"+first.ID.String()+"/cancel", adminToken, nil)
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	first, _ = c.waitJob(adminToken, first.ID.String(), 10*time.Second)
	stopped := time.Since(asked)
	require.Equal(t, "cancelled", first.State, first.Error)
	require.Less(t, stopped, testenv.Scaled(2*time.Second), "a cancelled job stops within 2 s")
	p1 := progressOf(first)
	t.Logf("cancelled after %s: %+v", stopped.Round(time.Millisecond), p1)
	require.NotEmpty(t, p1.After, "the report says where it got")
	require.Positive(t, p1.Done)
	require.Less(t, p1.Done, matching, "it stopped part way")
	require.NotNil(t, p1.Resume)
	a = c.call("cancel-job", http.MethodPost, "/api/v1/jobs/"+first.ID.String()+"/cancel", adminToken, nil)
	require.Equal(t, http.StatusConflict, a.Status, "an ended job is not cancelled: %s", a.Body)

	// Run again for the rest; this run is abandoned part way.
	a = c.call("resume-replay", http.MethodPost, "/api/v1/jobs/"+first.ID.String()+"/resume", adminToken, nil)
	require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
	var second ops.Job
	a.decode(t, &second)
	waitEnqueued(second.ID.String(), 50)
	// As JobsAbandon marks a job whose process stopped beating.
	_, err := h.db.Pool().Exec(context.Background(), `
		UPDATE api_jobs SET state = 'failed', error = 'abandoned: the test says so', finished_at = now() WHERE id = $1`, second.ID)
	require.NoError(t, err)
	second, _ = c.waitJob(adminToken, second.ID.String(), 30*time.Second)
	require.Equal(t, "failed", second.State)
	require.Contains(t, second.Error, "abandoned")
	// The abandoned run's process stops it at its next heartbeat: wait
	// for its last enqueue before going on (its progress is no longer
	// stored, so the outbox tells).
	var before, after int
	require.Eventually(t, func() bool {
		before = after
		_ = h.db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM deliveries WHERE replayed_by = $1`, first.ID).Scan(&after)
		return after == before && after > 0
	}, testenv.Scaled(30*time.Second), 6*time.Second, "the abandoned run stops")

	a = c.call("resume-replay", http.MethodPost, "/api/v1/jobs/"+second.ID.String()+"/resume", adminToken, nil)
	require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
	var third ops.Job
	a.decode(t, &third)
	third, _ = c.waitJob(adminToken, third.ID.String(), 120*time.Second)
	require.Equal(t, "succeeded", third.State, third.Error)
	var replayedBy int
	require.NoError(t, h.db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM deliveries WHERE replayed_by = $1`, first.ID).Scan(&replayedBy))
	require.Equal(t, matching, replayedBy, "the three runs are one replay, which took each pair once")
	require.Equal(t, "replay", get(third.ID.String()).Kind)

	require.Eventually(t, func() bool {
		n, _ := dest.counts()
		got := 0
		for _, id := range ids {
			got += min(n[id], 1)
		}
		return got == matching
	}, testenv.Scaled(60*time.Second), 50*time.Millisecond, "every pair the search found delivered")
	n, _ := dest.counts()
	twice := 0
	for _, id := range ids {
		if n[id] > 1 {
			twice++
		}
	}
	require.Zero(t, twice, "no pair sent twice across the three runs")
	require.Len(t, n, matching, "nothing the search did not find")
}

// Issue 42: a requeue of dead letters by query moves back the letters of
// the dead events the search finds, and leaves the others in the route's
// dead-letter queue; each moved one is then delivered once.
func TestRequeueDeadLettersByQuery(t *testing.T) {
	t.Parallel()
	h := newAPIHarness(t, 1000)
	h.billingDown.Store(true)
	var ids []string
	for i := range 4 {
		ids = append(ids, h.postSigned(fmt.Sprint("evt_rq_", i), "invoice.paid").ID)
	}
	for _, id := range ids {
		h.waitPair(id, "billing", webhook.StateDead)
	}
	amqptest.WaitCount(t, h.ch, h.names.DeadQueue("billing"), 4, 10*time.Second)
	h.billingDown.Store(false)

	op := h.tokens["operator"]
	a := h.api.call("requeue-dead-letters", http.MethodPost, "/api/v1/routes/billing/dead-letters/requeue", op,
		map[string]any{"where": `body.id == "evt_rq_1" || body.id == "evt_rq_3"`, "limit": 1})
	require.Equal(t, http.StatusBadRequest, a.Status, "a requeue by query takes no limit: %s", a.Body)
	a = h.api.call("requeue-dead-letters", http.MethodPost, "/api/v1/routes/billing/dead-letters/requeue", op,
		map[string]any{"where": `body.id == "evt_rq_1" || body.id == "evt_rq_3"`})
	require.Equal(t, http.StatusAccepted, a.Status, "%s", a.Body)
	var job ops.Job
	a.decode(t, &job)
	job, _ = h.api.waitJob(op, job.ID.String(), 30*time.Second)
	require.Equal(t, "succeeded", job.State, job.Error)
	var res struct{ Moved, Found int }
	require.NoError(t, json.Unmarshal(job.Result, &res))
	require.Equal(t, 2, res.Found)
	require.Equal(t, 2, res.Moved)
	for _, id := range []string{ids[1], ids[3]} {
		h.dest.waitFor(20*time.Second, "requeued "+id+" delivered", func([]received) bool { return h.dest.successes()["billing "+id] >= 1 })
	}
	amqptest.WaitCount(t, h.ch, h.names.DeadQueue("billing"), 2, 10*time.Second)
	for _, id := range []string{ids[0], ids[2]} {
		require.Zero(t, h.dest.successes()["billing "+id], "a letter the search did not find stays")
	}
	for _, id := range []string{ids[1], ids[3]} {
		require.Equal(t, 1, h.dest.successes()["billing "+id], "delivered once")
	}
}
