package bench

import (
	"bytes"
	"context"
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

func TestProfileFlags(t *testing.T) {
	t.Parallel()
	o, err := parseFlags(nil, &bytes.Buffer{})
	require.NoError(t, err)
	require.Empty(t, o.profile, "--profile is off by default")
	_, err = parseFlags([]string{"--compat-old"}, &bytes.Buffer{})
	require.ErrorContains(t, err, "--compat-old needs --profile")
	o, err = parseFlags([]string{"--profile", "out", "--compat-old"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.True(t, o.compatOld)
}

// Issue 11 item 5: --profile saves a CPU profile of the receiver and of the
// dispatcher for the ingest phase with the dispatcher running, the
// delivery drain and the end-to-end phase, with their `go tool pprof -top` text, and the top
// statements when the server loads pg_stat_statements (else it says how to
// load it). The shared test server may or may not load it; both are checked.
func TestProfileRunAgainstRealServices(t *testing.T) {
	requireServices(t)
	if err := checkProc(); err != nil {
		t.Skip(err)
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command for the binaries")
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+string(filepath.Separator),
		"github.com/hookrelay/hookrelay/cmd/receiver", "github.com/hookrelay/hookrelay/cmd/dispatcher")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "building the binaries under test: %s", out)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var preload string
	conn, err := pgx.Connect(ctx, testenv.AdminDatabaseURL())
	require.NoError(t, err)
	require.NoError(t, conn.QueryRow(ctx, `SHOW shared_preload_libraries`).Scan(&preload))
	require.NoError(t, conn.Close(ctx))

	dir := filepath.Join(t.TempDir(), "profiles")
	var stdout, stderr bytes.Buffer
	err = Main(ctx, []string{
		"--quick", "--json", "--phases", "ingest,delivery,e2e", "--profile", dir, "--e2e-duration", "2s", "--rate", "50",
		"--receiver-bin", filepath.Join(bin, "receiver"), "--dispatcher-bin", filepath.Join(bin, "dispatcher"),
		"--database-url", testenv.AdminDatabaseURL(), "--amqp-url", testenv.AMQPURL(), "--management-url", testenv.ManagementURL(),
		"--duration", "3s", "--backlog", "300", "--clients", "8", "--concurrency", "8",
	}, &stdout, &stderr)
	require.NoError(t, err, "bench failed; its progress:\n%s", stderr.String())

	for _, phase := range []string{"ingest-running", "delivery", "e2e"} {
		for _, process := range []string{procReceiver, procDispatcher} {
			name := filepath.Join(dir, phase+"-"+process)
			prof, err := os.ReadFile(name + ".pprof")
			require.NoError(t, err)
			require.True(t, bytes.HasPrefix(prof, []byte{0x1f, 0x8b}), "%s.pprof is a gzipped profile", name)
			top, err := os.ReadFile(name + ".top.txt")
			require.NoError(t, err)
			require.Contains(t, string(top), "flat%", "%s.top.txt is pprof -top's text", name)
			cum, err := os.ReadFile(name + ".cum.txt")
			require.NoError(t, err)
			require.Contains(t, string(cum), "cum%", "%s.cum.txt is pprof -top -cum's text", name)
		}
		_, err := os.Stat(filepath.Join(dir, phase+"-pg_stat_statements.txt"))
		if strings.Contains(preload, "pg_stat_statements") {
			require.NoError(t, err)
		} else {
			require.ErrorIs(t, err, os.ErrNotExist)
		}
	}
	if !strings.Contains(preload, "pg_stat_statements") {
		require.Contains(t, stderr.String(), "add pg_stat_statements to shared_preload_libraries")
	}
	_, err = os.Stat(filepath.Join(dir, "ingest-stopped-receiver.pprof"))
	require.ErrorIs(t, err, os.ErrNotExist, "only those three phases are profiled")
}
