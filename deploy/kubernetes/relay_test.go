package kubernetes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// The relay's binaries, built once from the repository's root module (run
// as programs, not imported: this module must not depend on that one).
var relay struct {
	once sync.Once
	dir  string
	err  error
}

// relayBinaries builds receiver, dispatcher and hookrelay from the root
// module two directories up, into a directory shared by the tests.
func relayBinaries(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the relay's binaries")
	}
	relay.once.Do(func() {
		root, err := filepath.Abs(filepath.Join("..", ".."))
		if err != nil {
			relay.err = err
			return
		}
		mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
		if err != nil || !bytes.HasPrefix(mod, []byte("module github.com/hookrelay/hookrelay\n")) {
			relay.err = errors.New("../../go.mod is not the relay's module")
			return
		}
		if relay.dir, relay.err = os.MkdirTemp("", "hookrelay-chart-"); relay.err != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", relay.dir+string(filepath.Separator), "./cmd/receiver", "./cmd/dispatcher", "./cmd/hookrelay")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			relay.err = errors.New("building the relay: " + err.Error() + "\n" + string(out))
		}
	})
	require.NoError(t, relay.err)
	return relay.dir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if relay.dir != "" {
		_ = os.RemoveAll(relay.dir)
	}
	os.Exit(code)
}

// podEnv is the environment the kubelet gives c: its envFrom Secrets, then
// its own variables, with secretKeyRefs read from the rendered Secrets.
// config.yaml, as the pod's ConfigMap holds it, is written to dir and
// HOOKRELAY_CONFIG points there instead of the mount.
func podEnv(t *testing.T, r *rendered, spec corev1.PodSpec, dir string) []string {
	t.Helper()
	c := spec.Containers[0]
	secret := func(name string) map[string]string {
		s := find[*corev1.Secret](t, r, name)
		out := map[string]string{}
		for k, v := range s.Data {
			out[k] = string(v)
		}
		for k, v := range s.StringData {
			out[k] = v
		}
		return out
	}
	env := map[string]string{}
	for _, from := range c.EnvFrom {
		require.NotNil(t, from.SecretRef)
		for k, v := range secret(from.SecretRef.Name) {
			env[from.Prefix+k] = v
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			v, ok := secret(ref.Name)[ref.Key]
			require.True(t, ok || (ref.Optional != nil && *ref.Optional), "%s: %s/%s is missing", e.Name, ref.Name, ref.Key)
			if ok {
				env[e.Name] = v
			}
		default:
			require.Failf(t, "unexpected variable source", "%s", e.Name)
		}
	}
	i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.ConfigMap != nil })
	require.GreaterOrEqual(t, i, 0, "no ConfigMap volume")
	cm := find[*corev1.ConfigMap](t, r, spec.Volumes[i].ConfigMap.Name)
	path := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(cm.Data["config.yaml"]), 0o600))
	require.Equal(t, "/etc/hookrelay/config.yaml", env["HOOKRELAY_CONFIG"])
	env["HOOKRELAY_CONFIG"] = path
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// run runs a relay binary with exactly env and returns its exit code and
// output.
func run(t *testing.T, bin string, env []string, args ...string) (int, string, string) {
	t.Helper()
	dir := relayBinaries(t) // before the deadline: the first call builds
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(dir, bin), args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "%s did not exit: %s", bin, stderr.String())
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		require.NoError(t, err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// The relay's own config loader accepts what the chart gives each process:
// config.yaml from its ConfigMap and the environment from its env and
// Secret. The receiver and the dispatcher load every setting and secret
// (config.Load), then open their listener first: a listener address held
// by the test stops them right there, with exit status 1, where a config
// they refuse exits 2 before. The migration Job's config is loaded as
// hookrelay migrate loads it (config.LoadOperator), by
// `hookrelay topology export`, which needs no database.
func TestRelayAcceptsChartConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		overrides string
		// wantRefuse is a problem the receiver and the dispatcher name; ""
		// when they accept the config.
		wantRefuse string
		// migrateRefuses: hookrelay migrate refuses the config too.
		migrateRefuses bool
	}{
		{name: "defaults"},
		{name: "longer dispatcher shutdown_timeout", overrides: "config: {dispatcher: {shutdown_timeout: 2m30s}}"},
		// The check can fail: the relay refuses these.
		{name: "a key the relay does not know", overrides: "config: {receiver: {batch_sise: 8}}",
			wantRefuse: "receiver.batch_sise: unknown key", migrateRefuses: true},
		// An operator's load skips the sources: a missing source secret
		// does not stop the migration.
		{name: "a ${VAR} the Secret lacks", overrides: `secrets: {HOOKRELAY_DEMO_SECRET: ""}`,
			wantRefuse: "environment variable HOOKRELAY_DEMO_SECRET is not set"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := render(t, tt.overrides)
			for _, component := range []string{"receiver", "dispatcher"} {
				busy, err := net.Listen("tcp", "127.0.0.1:0")
				require.NoError(t, err)
				t.Cleanup(func() { _ = busy.Close() })
				spec := find[*appsv1.Deployment](t, r, fullname+"-"+component).Spec.Template.Spec
				env := append(podEnv(t, r, spec, t.TempDir()), listenEnv[component]+"="+busy.Addr().String())
				code, _, stderr := run(t, component, env)
				t.Logf("%s: exit status %d: %s", component, code, stderr)
				if tt.wantRefuse != "" {
					require.Equal(t, 2, code, "%s: a config it refuses: %s", component, stderr)
					require.Contains(t, stderr, tt.wantRefuse, component)
					continue
				}
				require.Equal(t, 1, code, "%s: %s", component, stderr)
				key := strings.ToLower(strings.TrimPrefix(listenEnv[component], "HOOKRELAY_"))
				key = strings.Replace(key, "_", ".", 1)
				require.Contains(t, stderr, key+": listening on "+busy.Addr().String(), "%s got past its config", component)
				require.Contains(t, stderr, "address already in use", component)
			}

			job := find[*batchv1.Job](t, r, fullname+"-migrate")
			env := podEnv(t, r, job.Spec.Template.Spec, t.TempDir())
			require.Contains(t, env, "HOOKRELAY_DATABASE_MIGRATE_URL="+r.value("migration.databaseURL").(string))
			code, stdout, stderr := run(t, "hookrelay", env, "topology", "export")
			t.Logf("hookrelay topology export: exit status %d: %s", code, stderr)
			if tt.migrateRefuses {
				require.Equal(t, 2, code, stderr)
				require.Contains(t, stderr, tt.wantRefuse)
				return
			}
			require.Equal(t, 0, code, stderr)
			var defs map[string]any
			require.NoError(t, json.Unmarshal([]byte(stdout), &defs))
			require.Contains(t, defs, "queues")
		})
	}
}
