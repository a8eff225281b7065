package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// TestMain lets the test binary play the benchmark's children: the
// benchmark starts them as its own executable with ChildArg first. A child
// that fails says why on stderr (the benchmark keeps it in the child's log)
// and never announces that it is ready, which fails the run.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == ChildArg {
		if err := Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
		return
	}
	m.Run() // the test binary exits with its status
}

// requireServices requires Postgres and RabbitMQ (a failure in CI, a skip
// elsewhere).
func requireServices(t *testing.T) {
	t.Helper()
	testenv.Require(t, "Postgres and RabbitMQ", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, testenv.AdminDatabaseURL())
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		amqpConn, err := dialAMQP(testenv.AMQPURL(), "hookrelay-bench-test")
		if err != nil {
			return err
		}
		return amqpConn.Close()
	})
}

// buildRelay requires the services and builds the receiver and the
// dispatcher from this tree into a temporary folder, which it returns.
func buildRelay(t *testing.T) string {
	t.Helper()
	requireServices(t)
	if err := checkProc(); err != nil {
		t.Skip(err)
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+string(filepath.Separator),
		"github.com/hookrelay/hookrelay/cmd/receiver", "github.com/hookrelay/hookrelay/cmd/dispatcher")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "building the binaries under test: %s", out)

	return bin
}

// TestQuickRunAgainstRealServices runs a short benchmark end to end with
// the real receiver and dispatcher (built from this tree), Postgres and
// RabbitMQ, and checks what it reports and that it leaves nothing behind.
// It asserts no speed: only that every phase ran, moved events, lost none,
// measured the processes, and cleaned up.
func TestQuickRunAgainstRealServices(t *testing.T) {
	bin := buildRelay(t)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := Main(ctx, []string{
		"--quick", "--json",
		"--receiver-bin", filepath.Join(bin, "receiver"), "--dispatcher-bin", filepath.Join(bin, "dispatcher"),
		"--database-url", testenv.AdminDatabaseURL(), "--amqp-url", testenv.AMQPURL(), "--management-url", testenv.ManagementURL(),
		"--duration", "2s", "--e2e-duration", "2s", "--backlog", "300", "--rate", "50", "--clients", "8", "--concurrency", "8",
	}, &stdout, &stderr)
	require.NoError(t, err, "bench failed; its progress:\n%s", stderr.String())

	var res Results
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &res), "--json prints one JSON document: %s", stdout.String())
	require.Empty(t, res.Failures)
	require.NotEmpty(t, res.Postgres.Settings["synchronous_commit"], "the header reports the Postgres settings")
	require.NotEmpty(t, res.RabbitMQ.Version)

	keys := []string{}
	for _, p := range res.Phases {
		keys = append(keys, p.Key)
		require.Positive(t, p.Count, "%s moved no event", p.Key)
		require.Positive(t, p.Rate, p.Key)
		require.True(t, p.Checked, "%s was not checked", p.Key)
		require.Zero(t, p.Lost, "%s lost events", p.Key)
		require.Zero(t, p.BadSignatures, p.Key)
		require.Zero(t, p.Unexpected, p.Key)
		require.Positive(t, p.CPUPerEventMS, p.Key)
		require.Positive(t, p.OwnCPUPerEventMS, p.Key)
		if p.System == "hookrelay" {
			require.Zero(t, p.Duplicates, p.Key)
			require.Zero(t, p.Unrecorded, p.Key)
		}
		procs := map[string]bool{}
		for _, u := range p.Usage.Procs {
			procs[u.Name] = true
		}
		for _, want := range map[string][]string{
			"ingest-running": {procBench, procReceiver, procDispatcher, procPostgres},
			"ingest-stopped": {procBench, procReceiver, procPostgres},
			"bare-ingest":    {procBench, procBareIngest, procPostgres},
			"delivery":       {procDispatcher, procDestination, procRabbitMQ},
			"bare-forwarder": {procBareForwarder, procDestination, procRabbitMQ},
			"e2e":            {procReceiver, procDispatcher, procDestination},
			"bare-e2e":       {procBareRelay, procBareForwarder, procDestination, procRabbitMQ},
		}[p.Key] {
			require.True(t, procs[want], "%s: no CPU or memory measured for %s (%v)", p.Key, want, p.Usage.Procs)
		}
	}
	require.Equal(t, []string{"ingest-running", "ingest-stopped", "bare-ingest", "delivery", "bare-forwarder", "e2e", "bare-e2e"}, keys)
	require.Len(t, res.Ratios, 3)
	require.Positive(t, res.CPUPerEventMS)
	for _, e2e := range res.Phases[len(res.Phases)-2:] {
		require.NotNil(t, e2e.Latency, e2e.Key)
		require.Equal(t, int(e2e.Count), e2e.Latency.N, "%s: a latency for every accepted event", e2e.Key)
	}
	// Issue 21: the end-to-end phase is compared with the bare reference
	// at the same rate, by own CPU per event and latency.
	require.Len(t, res.EndToEnd, 1)
	c := res.EndToEnd[0]
	for name, v := range map[string]Compare{"own CPU": c.OwnCPU, "p99": c.P99} {
		require.Positive(t, v.Hookrelay, name)
		require.Positive(t, v.Bare, name)
		require.InDelta(t, v.Hookrelay/v.Bare, v.Ratio, 1e-9, name)
	}
	// The latency counts from the 200 read by the sender: both relays
	// publish before they answer, so a delivery can come first and a
	// median be at or below 0 (then there is no ratio).
	if c.P50.Bare > 0 {
		require.InDelta(t, c.P50.Hookrelay/c.P50.Bare, c.P50.Ratio, 1e-9, "p50")
	} else {
		require.Zero(t, c.P50.Ratio, "no ratio to a median at or below 0")
	}

	// Nothing left behind: databases dropped, broker names deleted.
	conn, err := pgx.Connect(ctx, testenv.AdminDatabaseURL())
	require.NoError(t, err)
	defer conn.Close(ctx)
	var dbs int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_database WHERE datname LIKE $1 || '%'`, res.Database).Scan(&dbs))
	require.Zero(t, dbs, "databases %s* left behind", res.Database)
	m, err := newMgmt(testenv.ManagementURL(), testenv.AMQPURL())
	require.NoError(t, err)
	for _, kind := range []string{"queues", "exchanges", "policies"} {
		var items []struct {
			Name string `json:"name"`
		}
		require.NoError(t, m.do(ctx, http.MethodGet, kind+"/%2F", &items))
		for _, it := range items {
			require.False(t, strings.HasPrefix(it.Name, res.Prefix+"."), "%s %s left behind", kind, it.Name)
		}
	}
}

// Issue 21, item 4: a short soak samples the processes and the servers
// every interval and judges each series, with the same checks as a phase.
// --rls: the second round's receiver and dispatcher log in as a role
// that owns nothing, deliver everything (the checks pass), and the table
// compares it with the first.
func TestRLSRoundsAgainstRealServices(t *testing.T) {
	bin := buildRelay(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := Main(ctx, []string{
		"--json", "--rls", "--phases", "delivery", "--backlog", "300", "--concurrency", "8",
		"--receiver-bin", filepath.Join(bin, "receiver"), "--dispatcher-bin", filepath.Join(bin, "dispatcher"),
		"--database-url", testenv.AdminDatabaseURL(), "--amqp-url", testenv.AMQPURL(), "--management-url", testenv.ManagementURL(),
	}, &stdout, &stderr)
	require.NoError(t, err, "bench failed; its progress:\n%s", stderr.String())
	var res Results
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &res), "--json prints one JSON document: %s", stdout.String())
	require.Empty(t, res.Failures)
	require.Len(t, res.Phases, 2)
	for _, p := range res.Phases {
		require.True(t, p.Checked)
		require.Zero(t, p.Lost)
		require.EqualValues(t, 300, p.Count)
	}
	require.NotNil(t, res.RLS)
	require.Equal(t, rlsRole, res.RLS.Role)
	require.Len(t, res.RLS.Compare, 1)
	c := res.RLS.Compare[0]
	require.Equal(t, 2, c.Round)
	require.Equal(t, "delivery", c.Phase)
	require.Positive(t, c.Rate.Ratio)
	require.Contains(t, stderr.String(), "round 2: the receiver and the dispatcher log in as "+rlsRole)
}

func TestSoakAgainstRealServices(t *testing.T) {
	bin := buildRelay(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := Main(ctx, []string{
		"--json", "--soak", "7s", "--soak-every", "2s", "--rate", "50", "--concurrency", "8",
		"--receiver-bin", filepath.Join(bin, "receiver"), "--dispatcher-bin", filepath.Join(bin, "dispatcher"),
		"--database-url", testenv.AdminDatabaseURL(), "--amqp-url", testenv.AMQPURL(), "--management-url", testenv.ManagementURL(),
	}, &stdout, &stderr)
	require.NoError(t, err, "bench failed; its progress:\n%s", stderr.String())
	var res Results
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &res), "--json prints one JSON document: %s", stdout.String())
	require.Empty(t, res.Failures)
	require.Len(t, res.Phases, 1, "the soak replaces the phases")
	p := res.Phases[0]
	require.Equal(t, "soak", p.Key)
	require.Positive(t, p.Count)
	require.True(t, p.Checked)
	require.Zero(t, p.Lost)
	require.Zero(t, p.Duplicates)

	require.NotNil(t, res.Soak)
	require.GreaterOrEqual(t, len(res.Soak.Samples), 3)
	var sent int64
	delivered := 0
	for _, s := range res.Soak.Samples {
		sent += s.Sent
		delivered += s.Delivered
		for _, name := range []string{procReceiver, procDispatcher, procPostgres, procRabbitMQ} {
			require.Positive(t, s.MemMB[name], "memory of %s", name)
		}
		for _, name := range []string{procReceiver, procDispatcher} {
			require.Positive(t, s.Goroutines[name], "goroutines of %s", name)
			require.Positive(t, s.OpenFDs[name], "open files of %s", name)
		}
		require.Positive(t, s.PGBackends)
	}
	// The management API lists a connection once its statistics were
	// first emitted (every 5s by default): the last sample has them.
	require.Positive(t, res.Soak.Samples[len(res.Soak.Samples)-1].AMQPConns)
	require.Positive(t, delivered)
	require.LessOrEqual(t, int64(delivered), sent+int64(len(res.Soak.Samples)), "a pair is counted in one interval")
	require.Len(t, res.Soak.Series, len(soakRules()))
	require.Equal(t, res.Postgres.Settings["autovacuum"] == "off", res.Soak.Vacuums,
		"the soak vacuums in autovacuum's place exactly when the server runs without it")
	require.Contains(t, stderr.String(), "soak ", "a line per sample on stderr")
}
