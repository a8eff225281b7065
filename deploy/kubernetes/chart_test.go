package kubernetes

import (
	"encoding/json"
	"net"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// hookrelayStopSlack is how long past its shutdown timeout a hookrelay
// process may still take to exit: it stops waiting for its parts 5s past
// the timeout (stopGrace in internal/app) and closes its Postgres pool
// within 5s more. A grace period shorter than timeout + slack could kill a
// process that is still stopping cleanly.
const hookrelayStopSlack = 10 * time.Second

func TestChart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		overrides string
		check     func(t *testing.T, r *rendered)
	}{
		{
			name: "defaults",
			check: func(t *testing.T, r *rendered) {
				secret := find[*corev1.Secret](t, r, fullname)
				require.Contains(t, secret.StringData, "HOOKRELAY_DATABASE_URL")
				require.Contains(t, secret.StringData, "HOOKRELAY_AMQP_URL")
				require.NotContains(t, secret.StringData, "HOOKRELAY_SECRETS_KEY", "an empty value is left out")
				require.Empty(t, all[*serviceMonitor](r, true))
				// The numbers docs/performance.md gives, as values.yaml derives them.
				require.EqualValues(t, 45, grace(t, r, "dispatcher"), "30s + 15s")
				require.EqualValues(t, 30, grace(t, r, "receiver"), "5s preStop + 10s + 15s")
				for _, component := range []string{"receiver", "dispatcher"} {
					req := container(t, r, component).Resources.Requests
					require.Equal(t, "150m", req.Cpu().String(), component)
					require.Equal(t, "64Mi", req.Memory().String(), component)
				}
				require.Contains(t, r.notes, fullname+"-receiver."+namespace+".svc:8080/webhooks/")
			},
		},
		{
			name:      "service monitor",
			overrides: "serviceMonitor: {enabled: true, labels: {release: prometheus}}",
			check: func(t *testing.T, r *rendered) {
				sm := find[*serviceMonitor](t, r, fullname)
				require.Equal(t, "prometheus", sm.Metadata.Labels["release"])
			},
		},
		{
			name:      "existing secret",
			overrides: "existingSecret: hookrelay-creds\nmigration: {existingSecret: hookrelay-owner}",
			check: func(t *testing.T, r *rendered) {
				require.Empty(t, all[*corev1.Secret](r, true), "the chart makes no Secret")
				for _, component := range []string{"receiver", "dispatcher"} {
					require.Equal(t, "hookrelay-creds", container(t, r, component).EnvFrom[0].SecretRef.Name)
				}
				job := find[*batchv1.Job](t, r, fullname+"-migrate")
				c := job.Spec.Template.Spec.Containers[0]
				require.Equal(t, "hookrelay-creds", c.EnvFrom[0].SecretRef.Name)
				ref := envVar(t, c, "HOOKRELAY_DATABASE_MIGRATE_URL").ValueFrom.SecretKeyRef
				require.Equal(t, "hookrelay-owner", ref.Name)
			},
		},
		{
			name:      "existing secret holding the owner URL too",
			overrides: "existingSecret: hookrelay-creds",
			check: func(t *testing.T, r *rendered) {
				job := find[*batchv1.Job](t, r, fullname+"-migrate")
				ref := envVar(t, job.Spec.Template.Spec.Containers[0], "HOOKRELAY_DATABASE_MIGRATE_URL").ValueFrom.SecretKeyRef
				require.Equal(t, "hookrelay-creds", ref.Name)
			},
		},
		{
			name:      "longer dispatcher shutdown_timeout",
			overrides: "config: {dispatcher: {shutdown_timeout: 2m30s}}",
			check: func(t *testing.T, r *rendered) {
				require.EqualValues(t, 150+15, grace(t, r, "dispatcher"))
				require.EqualValues(t, 30, grace(t, r, "receiver"), "the receiver's does not move")
			},
		},
		{
			name:      "migration off",
			overrides: "migration: {enabled: false}",
			check: func(t *testing.T, r *rendered) {
				require.Empty(t, all[*batchv1.Job](r, true))
			},
		},
		{
			name:      "other ports, one replica, no preStop",
			overrides: "receiver: {port: 9080, metricsPort: 9083, replicas: 1, preStopSleepSeconds: 0, service: {port: 80}}\ndispatcher: {port: 9081, replicas: 1}\nserviceMonitor: {enabled: true}",
			check: func(t *testing.T, r *rendered) {
				require.Nil(t, container(t, r, "receiver").Lifecycle)
				require.EqualValues(t, 25, grace(t, r, "receiver"), "10s + 15s")
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := render(t, tt.overrides)
			checkRelease(t, r)
			if tt.check != nil {
				tt.check(t, r)
			}
		})
	}
}

// The grace period follows the shutdown timeouts in the values: changing
// one moves it, and it always outlasts the process's own stop.
func TestGraceFollowsShutdownTimeout(t *testing.T) {
	t.Parallel()
	tests := []struct {
		overrides  string
		component  string
		wantSecond int64
	}{
		{"config: {dispatcher: {shutdown_timeout: 30s}}", "dispatcher", 45},
		{"config: {dispatcher: {shutdown_timeout: 1m30s}}", "dispatcher", 105},
		{"config: {dispatcher: {shutdown_timeout: 1500ms}}", "dispatcher", 17},
		{"config: {dispatcher: {shutdown_timeout: 1h}}", "dispatcher", 3615},
		{"config: {dispatcher: {shutdown_timeout: 30s}}\nterminationGraceMarginSeconds: 20", "dispatcher", 50},
		{"config: {receiver: {shutdown_timeout: 40s}}", "receiver", 5 + 40 + 15},
		{"config: {outbox: {publish_timeout: 25s}}", "receiver", 5 + 25 + 15},
		{"receiver: {preStopSleepSeconds: 10}", "receiver", 10 + 10 + 15},
	}
	for _, tt := range tests {
		t.Run(tt.overrides, func(t *testing.T) {
			t.Parallel()
			r := render(t, tt.overrides)
			require.Equal(t, tt.wantSecond, grace(t, r, tt.component))
			checkGrace(t, r)
		})
	}
}

// Values that would put a secret into the ConfigMap, hand the tables'
// owner to every pod, or break the grace period fail the render, naming
// the key.
func TestRenderRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		overrides string
		wantErr   string
	}{
		{"a source secret written out", `config: {sources: [{name: s, verify: {scheme: token, header: X-Token, secrets: [hunter2]}, event_type: {header: X-Type}}]}`,
			"config.sources[0].verify.secrets[0] must be a ${VAR} reference"},
		{"a route secret written out", `config: {routes: [{name: r, url: "http://x", bindings: ["a.#"], signing_secret: whsec_abc}]}`,
			"config.routes[0].signing_secret must be a ${VAR} reference"},
		{"a route secret with a default", `config: {routes: [{name: r, url: "http://x", bindings: ["a.#"], signing_secrets: ["${S:-whsec_abc}"]}]}`,
			"config.routes[0].signing_secrets[0] must be a ${VAR} reference"},
		{"the database URL in the config", `config: {database: {url: "postgres://u:p@db/hookrelay"}}`, "config.database.url carries a password"},
		{"the AMQP URLs in the config", `config: {amqp: {urls: ["amqp://u:p@mq/"]}}`, "config.amqp.urls carries a password"},
		{"the admin token in the config", `config: {admin: {listen: "0.0.0.0:8082", token: abcdefghijklmnopq}}`, "config.admin.token is a credential"},
		{"the owner URL for every pod", `secrets: {HOOKRELAY_DATABASE_MIGRATE_URL: "postgres://o:p@db/hookrelay"}`, "secrets.HOOKRELAY_DATABASE_MIGRATE_URL would reach every pod"},
		{"no database URL", `secrets: {HOOKRELAY_DATABASE_URL: ""}`, "secrets.HOOKRELAY_DATABASE_URL is required"},
		{"no AMQP URL", `secrets: {HOOKRELAY_AMQP_URL: ""}`, "secrets.HOOKRELAY_AMQP_URL (or HOOKRELAY_AMQP_URLS) is required"},
		{"a secret key that is no variable name", `secrets: {"MY-SECRET": x}`, "secrets.MY-SECRET: a key must be an environment variable's name"},
		{"a timeout without a unit", `config: {dispatcher: {shutdown_timeout: 30}}`, `config.dispatcher.shutdown_timeout: "30" is not a duration`},
		{"a timeout that is no duration", `config: {receiver: {shutdown_timeout: soon}}`, `config.receiver.shutdown_timeout: "soon" is not a duration`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := renderErr(t, tt.overrides)
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

// checkRelease checks what must hold for any values.
func checkRelease(t *testing.T, r *rendered) {
	t.Helper()
	checkNames(t, r)
	checkDeployments(t, r)
	checkGrace(t, r)
	checkServices(t, r)
	checkPDBs(t, r)
	checkConfig(t, r)
	checkSecretsStayOut(t, r)
	checkMigration(t, r)
	checkServiceMonitor(t, r)
}

// Every name and label is one the API server accepts.
func checkNames(t *testing.T, r *rendered) {
	t.Helper()
	seen := map[string]bool{}
	for _, o := range r.objects {
		id := o.kind + "/" + o.name
		require.False(t, seen[id], "%s rendered twice", id)
		seen[id] = true
		check := validation.IsDNS1123Subdomain
		if o.kind == "Service" {
			check = validation.IsDNS1035Label
		}
		require.Empty(t, check(o.name), "%s (%s)", id, o.source)
		for k, v := range meta(o).Labels {
			require.Empty(t, validation.IsQualifiedName(k), "%s: label %s", id, k)
			require.Empty(t, validation.IsValidLabelValue(v), "%s: label %s=%s", id, k, v)
		}
	}
}

func meta(o object) metav1.ObjectMeta {
	switch v := o.obj.(type) {
	case *appsv1.Deployment:
		return v.ObjectMeta
	case *batchv1.Job:
		return v.ObjectMeta
	case *corev1.Service:
		return v.ObjectMeta
	case *corev1.ConfigMap:
		return v.ObjectMeta
	case *corev1.Secret:
		return v.ObjectMeta
	case *policyv1.PodDisruptionBudget:
		return v.ObjectMeta
	case *serviceMonitor:
		return v.Metadata
	}
	panic("no metadata for " + o.kind)
}

// listenEnv is the variable that sets the address each process serves
// health on, as the chart sets it.
var listenEnv = map[string]string{"receiver": "HOOKRELAY_RECEIVER_LISTEN", "dispatcher": "HOOKRELAY_DISPATCHER_LISTEN"}

func deployment(t *testing.T, r *rendered, component string) *appsv1.Deployment {
	t.Helper()
	return find[*appsv1.Deployment](t, r, fullname+"-"+component)
}

func container(t *testing.T, r *rendered, component string) corev1.Container {
	t.Helper()
	cs := deployment(t, r, component).Spec.Template.Spec.Containers
	require.Len(t, cs, 1)
	return cs[0]
}

func envVar(t *testing.T, c corev1.Container, name string) corev1.EnvVar {
	t.Helper()
	for _, e := range c.Env {
		if e.Name == name {
			return e
		}
	}
	require.Failf(t, "no such variable", "container %s has no %s", c.Name, name)
	return corev1.EnvVar{}
}

// listenPort is the port of a listen address the chart sets; the host
// must be reachable from the kubelet and the Services, not loopback.
func listenPort(t *testing.T, c corev1.Container, name string) int32 {
	t.Helper()
	host, port, err := net.SplitHostPort(envVar(t, c, name).Value)
	require.NoError(t, err, name)
	require.Equal(t, "0.0.0.0", host, "%s must listen beyond loopback", name)
	n, err := strconv.ParseInt(port, 10, 32)
	require.NoError(t, err)
	return int32(n)
}

// containerPort resolves a probe's or a Service's target port, by name or
// number, to a port the container declares.
func containerPort(t *testing.T, c corev1.Container, p intstr.IntOrString) int32 {
	t.Helper()
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return cp.ContainerPort
		}
	}
	require.Failf(t, "undeclared port", "container %s declares no port %s", c.Name, p.String())
	return 0
}

func checkDeployments(t *testing.T, r *rendered) {
	t.Helper()
	require.Len(t, all[*appsv1.Deployment](r, true), 2)
	image := r.value("image.repository").(string) + ":"
	for _, component := range []string{"receiver", "dispatcher"} {
		d := deployment(t, r, component)
		c := container(t, r, component)
		require.Equal(t, []string{component}, c.Command)
		require.True(t, strings.HasPrefix(c.Image, image), c.Image)
		require.EqualValues(t, r.value(component+".replicas"), *d.Spec.Replicas)

		// The probes reach the listener the process serves health on.
		health := listenPort(t, c, listenEnv[component])
		require.EqualValues(t, r.value(component+".port"), health)
		for probe, path := range map[*corev1.Probe]string{c.LivenessProbe: "/healthz", c.ReadinessProbe: "/readyz"} {
			require.NotNil(t, probe, component)
			require.NotNil(t, probe.HTTPGet, component)
			require.Equal(t, path, probe.HTTPGet.Path)
			require.Equal(t, health, containerPort(t, c, probe.HTTPGet.Port), "%s %s", component, path)
		}
		if component == "receiver" {
			metrics := listenPort(t, c, "HOOKRELAY_RECEIVER_METRICS_LISTEN")
			require.EqualValues(t, r.value("receiver.metricsPort"), metrics)
			require.Equal(t, metrics, containerPort(t, c, intstr.FromString("metrics")))
		}
		checkPod(t, r, component, d.Spec.Template.Spec, false)

		res := c.Resources
		for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, ok := res.Requests[name]
			require.True(t, ok, "%s requests %s", component, name)
			if limit, ok := res.Limits[name]; ok {
				require.LessOrEqual(t, req.Cmp(limit), 0, "%s: %s request above its limit", component, name)
			}
		}
		require.Contains(t, res.Limits, corev1.ResourceMemory, component)

		// The pods take their environment from the Secret.
		require.Len(t, c.EnvFrom, 1)
		secretName := cmpOr(r.value("existingSecret"), fullname)
		require.Equal(t, secretName, c.EnvFrom[0].SecretRef.Name)
		if r.value("existingSecret") == "" {
			find[*corev1.Secret](t, r, secretName)
		}
		// Changes to the config roll the pods.
		require.Contains(t, d.Spec.Template.Annotations, "checksum/config")
	}
}

func cmpOr(v any, fallback string) string {
	if s, _ := v.(string); s != "" {
		return s
	}
	return fallback
}

// checkPod checks what every hookrelay pod needs: the image's non-root
// user, a read-only root, config.yaml where HOOKRELAY_CONFIG says, from a
// ConfigMap the release renders (a hook's own for a hook).
func checkPod(t *testing.T, r *rendered, what string, spec corev1.PodSpec, hook bool) {
	t.Helper()
	sc := spec.SecurityContext
	require.NotNil(t, sc, what)
	require.True(t, sc.RunAsNonRoot != nil && *sc.RunAsNonRoot, "%s: runAsNonRoot", what)
	require.True(t, sc.RunAsUser != nil && *sc.RunAsUser == 10001, "%s: uid 10001", what)
	require.False(t, spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken, "%s: needs no API token", what)
	require.Len(t, spec.Containers, 1)
	c := spec.Containers[0]
	csc := c.SecurityContext
	require.NotNil(t, csc, what)
	require.True(t, csc.ReadOnlyRootFilesystem != nil && *csc.ReadOnlyRootFilesystem, "%s: readOnlyRootFilesystem", what)
	require.True(t, csc.AllowPrivilegeEscalation != nil && !*csc.AllowPrivilegeEscalation, "%s: allowPrivilegeEscalation", what)

	configPath := envVar(t, c, "HOOKRELAY_CONFIG").Value
	var mount *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if m.MountPath == path.Dir(configPath) {
			mount = &c.VolumeMounts[i]
		}
	}
	require.NotNil(t, mount, "%s: nothing mounted at %s", what, path.Dir(configPath))
	i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == mount.Name })
	require.GreaterOrEqual(t, i, 0, "%s: no volume %s", what, mount.Name)
	cm := spec.Volumes[i].ConfigMap
	require.NotNil(t, cm, "%s: %s is not a ConfigMap", what, mount.Name)
	require.Equal(t, []corev1.KeyToPath{{Key: "config.yaml", Path: path.Base(configPath)}}, cm.Items)
	rendered := find[*corev1.ConfigMap](t, r, cm.Name)
	require.Contains(t, rendered.Data, "config.yaml")
	require.Equal(t, hook, objectOf(t, r, rendered).hook, "%s: ConfigMap %s", what, cm.Name)
}

func objectOf(t *testing.T, r *rendered, obj any) object {
	t.Helper()
	for _, o := range r.objects {
		if o.obj == obj {
			return o
		}
	}
	require.Fail(t, "not rendered")
	return object{}
}

// configDuration reads a duration of the rendered config.yaml (as the
// processes read it), or def when it is not set.
func configDuration(t *testing.T, r *rendered, key string, def time.Duration) time.Duration {
	t.Helper()
	v := r.value("config." + key)
	if v == nil {
		return def
	}
	d, err := time.ParseDuration(v.(string))
	require.NoError(t, err, key)
	return d
}

func grace(t *testing.T, r *rendered, component string) int64 {
	t.Helper()
	g := deployment(t, r, component).Spec.Template.Spec.TerminationGracePeriodSeconds
	require.NotNil(t, g, component)
	return *g
}

// The kubelet kills a pod only after the process has had all the time it
// takes to stop cleanly: the dispatcher's shutdown_timeout, the receiver's
// preStop wait and the longer of its shutdown_timeout and
// outbox.publish_timeout, each plus hookrelay's own slack.
func checkGrace(t *testing.T, r *rendered) {
	t.Helper()
	dispatcher := configDuration(t, r, "dispatcher.shutdown_timeout", 30*time.Second)
	require.Greater(t, grace(t, r, "dispatcher"), int64(dispatcher/time.Second))
	require.GreaterOrEqual(t, time.Duration(grace(t, r, "dispatcher"))*time.Second, dispatcher+hookrelayStopSlack)

	receiver := max(configDuration(t, r, "receiver.shutdown_timeout", 10*time.Second),
		configDuration(t, r, "outbox.publish_timeout", 10*time.Second))
	var preStop time.Duration
	if l := container(t, r, "receiver").Lifecycle; l != nil && l.PreStop != nil {
		require.NotNil(t, l.PreStop.Exec)
		cmd := l.PreStop.Exec.Command
		require.Len(t, cmd, 2)
		require.Equal(t, "sleep", cmd[0])
		s, err := strconv.Atoi(cmd[1])
		require.NoError(t, err)
		preStop = time.Duration(s) * time.Second
	}
	require.EqualValues(t, r.value("receiver.preStopSleepSeconds"), preStop/time.Second)
	require.GreaterOrEqual(t, time.Duration(grace(t, r, "receiver"))*time.Second, preStop+receiver+hookrelayStopSlack)
}

// podLabels are the labels of each Deployment's and Job's pods.
func podLabels(r *rendered) map[string]labels.Set {
	out := map[string]labels.Set{}
	for _, d := range all[*appsv1.Deployment](r, true) {
		out["Deployment/"+d.Name] = d.Spec.Template.Labels
	}
	for _, j := range all[*batchv1.Job](r, true) {
		out["Job/"+j.Name] = j.Spec.Template.Labels
	}
	return out
}

// selected names the workloads whose pods sel selects.
func selected(r *rendered, sel labels.Selector) []string {
	var out []string
	for name, ls := range podLabels(r) {
		if sel.Matches(ls) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Each Service selects the pods of one Deployment, and targets ports its
// container declares; the metrics Services reach the metrics listeners.
func checkServices(t *testing.T, r *rendered) {
	t.Helper()
	metricsTargets := map[string]int32{}
	for _, s := range all[*corev1.Service](r, true) {
		require.NotEmpty(t, s.Spec.Selector, s.Name)
		sel := labels.SelectorFromSet(s.Spec.Selector)
		workloads := selected(r, sel)
		require.Len(t, workloads, 1, "Service %s selects %v", s.Name, workloads)
		component, ok := strings.CutPrefix(workloads[0], "Deployment/"+fullname+"-")
		require.True(t, ok, "Service %s selects %s", s.Name, workloads[0])
		c := container(t, r, component)
		for _, p := range s.Spec.Ports {
			target := containerPort(t, c, p.TargetPort)
			if p.Name == "metrics" {
				metricsTargets[component] = target
			}
		}
		if s.Name == fullname+"-receiver" {
			require.Len(t, s.Spec.Ports, 1, "the webhook Service exposes webhooks only")
			require.Equal(t, listenPort(t, c, "HOOKRELAY_RECEIVER_LISTEN"), containerPort(t, c, s.Spec.Ports[0].TargetPort))
			require.EqualValues(t, r.value("receiver.service.port"), s.Spec.Ports[0].Port)
		}
	}
	require.Equal(t, map[string]int32{
		"receiver":   listenPort(t, container(t, r, "receiver"), "HOOKRELAY_RECEIVER_METRICS_LISTEN"),
		"dispatcher": listenPort(t, container(t, r, "dispatcher"), "HOOKRELAY_DISPATCHER_LISTEN"),
	}, metricsTargets, "a metrics port for each process's /metrics")
}

// Each Deployment has one PodDisruptionBudget, which selects its pods and
// no others.
func checkPDBs(t *testing.T, r *rendered) {
	t.Helper()
	covered := map[string]int{}
	for _, p := range all[*policyv1.PodDisruptionBudget](r, true) {
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		require.NoError(t, err)
		require.False(t, sel.Empty(), p.Name)
		workloads := selected(r, sel)
		require.Equal(t, []string{"Deployment/" + p.Name}, workloads, "PodDisruptionBudget %s", p.Name)
		covered[p.Name]++
		require.True(t, (p.Spec.MaxUnavailable == nil) != (p.Spec.MinAvailable == nil), p.Name)
	}
	for _, d := range all[*appsv1.Deployment](r, true) {
		require.Equal(t, 1, covered[d.Name], "Deployment %s has one PodDisruptionBudget", d.Name)
		// The Deployment's own selector picks its pods.
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		require.NoError(t, err)
		require.Equal(t, []string{"Deployment/" + d.Name}, selected(r, sel))
	}
}

// Every ConfigMap's config.yaml parses and is the values' config.
func checkConfig(t *testing.T, r *rendered) {
	t.Helper()
	want, err := json.Marshal(r.value("config"))
	require.NoError(t, err)
	for _, cm := range all[*corev1.ConfigMap](r, true) {
		text, ok := cm.Data["config.yaml"]
		require.True(t, ok, cm.Name)
		got, err := yaml.YAMLToJSONStrict([]byte(text))
		require.NoError(t, err, "%s: config.yaml", cm.Name)
		require.JSONEq(t, string(want), string(got), "%s: config.yaml is the values' config", cm.Name)
	}
}

// No secret value, from the values or a rendered Secret, is in a ConfigMap
// or a plain environment variable; the tables' owner URL reaches only the
// migration Job.
func checkSecretsStayOut(t *testing.T, r *rendered) {
	t.Helper()
	var secrets []string
	if m, ok := r.value("secrets").(map[string]any); ok {
		for _, v := range m {
			if s, _ := v.(string); s != "" {
				secrets = append(secrets, s)
			}
		}
	}
	if s, _ := r.value("migration.databaseURL").(string); s != "" {
		secrets = append(secrets, s)
	}
	for _, s := range all[*corev1.Secret](r, true) {
		for _, v := range s.StringData {
			secrets = append(secrets, v)
		}
		for _, v := range s.Data {
			secrets = append(secrets, string(v))
		}
	}
	require.NotEmpty(t, secrets)
	for _, cm := range all[*corev1.ConfigMap](r, true) {
		for key, text := range cm.Data {
			for _, s := range secrets {
				require.NotContains(t, text, s, "ConfigMap %s, %s, holds a secret", cm.Name, key)
			}
		}
	}
	var containers []corev1.Container
	for _, d := range all[*appsv1.Deployment](r, true) {
		containers = append(containers, d.Spec.Template.Spec.Containers...)
	}
	for _, j := range all[*batchv1.Job](r, true) {
		containers = append(containers, j.Spec.Template.Spec.Containers...)
	}
	for _, c := range containers {
		for _, e := range c.Env {
			for _, s := range secrets {
				require.NotContains(t, e.Value, s, "container %s: %s is a secret in plain sight", c.Name, e.Name)
			}
		}
	}
	for _, component := range []string{"receiver", "dispatcher"} {
		c := container(t, r, component)
		require.False(t, slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "HOOKRELAY_DATABASE_MIGRATE_URL" }), component)
		if r.value("existingSecret") == "" {
			require.NotContains(t, find[*corev1.Secret](t, r, c.EnvFrom[0].SecretRef.Name).StringData, "HOOKRELAY_DATABASE_MIGRATE_URL", component)
		}
	}
}

func hookEvents(o metav1.ObjectMeta) []string {
	events := strings.Split(o.Annotations["helm.sh/hook"], ",")
	slices.Sort(events)
	return events
}

func hookWeight(t *testing.T, o metav1.ObjectMeta) int {
	t.Helper()
	w, err := strconv.Atoi(cmpOr(o.Annotations["helm.sh/hook-weight"], "0"))
	require.NoError(t, err)
	return w
}

// The migration runs `hookrelay migrate` before every install and upgrade,
// with a ConfigMap and a Secret that exist by then.
func checkMigration(t *testing.T, r *rendered) {
	t.Helper()
	jobs := all[*batchv1.Job](r, true)
	if r.value("migration.enabled") != true {
		require.Empty(t, jobs)
		return
	}
	require.Len(t, jobs, 1)
	job := jobs[0]
	require.True(t, objectOf(t, r, job).hook)
	events := hookEvents(job.ObjectMeta)
	require.Equal(t, []string{"pre-install", "pre-upgrade"}, events)
	spec := job.Spec.Template.Spec
	require.Equal(t, corev1.RestartPolicyNever, spec.RestartPolicy)
	c := spec.Containers[0]
	require.Equal(t, []string{"hookrelay", "migrate"}, c.Command)
	checkPod(t, r, "migrate", spec, true)
	require.NotNil(t, job.Spec.ActiveDeadlineSeconds, "a migration cannot hang the upgrade for ever")

	// What the Job reads is made before it, by the same hooks.
	before := func(o metav1.ObjectMeta) {
		require.Equal(t, events, hookEvents(o), o.Name)
		require.Less(t, hookWeight(t, o), hookWeight(t, job.ObjectMeta), "%s is made before the Job", o.Name)
	}
	vol := spec.Volumes[slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.ConfigMap != nil })]
	before(find[*corev1.ConfigMap](t, r, vol.ConfigMap.Name).ObjectMeta)

	require.Len(t, c.EnvFrom, 1)
	ref := envVar(t, c, "HOOKRELAY_DATABASE_MIGRATE_URL").ValueFrom.SecretKeyRef
	require.NotNil(t, ref)
	require.Equal(t, "HOOKRELAY_DATABASE_MIGRATE_URL", ref.Key)
	if r.value("existingSecret") != "" {
		require.Equal(t, r.value("existingSecret"), c.EnvFrom[0].SecretRef.Name)
		return
	}
	secret := find[*corev1.Secret](t, r, c.EnvFrom[0].SecretRef.Name)
	before(secret.ObjectMeta)
	require.Equal(t, r.value("secrets.HOOKRELAY_DATABASE_URL"), secret.StringData["HOOKRELAY_DATABASE_URL"])
	if r.value("migration.existingSecret") == "" {
		require.Equal(t, secret.Name, ref.Name)
		require.Equal(t, r.value("migration.databaseURL"), secret.StringData["HOOKRELAY_DATABASE_MIGRATE_URL"])
	}
}

// promDuration is the pattern prometheus-operator's CRD puts on durations.
var promDuration = regexp.MustCompile(`^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$`)

// The ServiceMonitor, when enabled, scrapes /metrics through exactly the
// two metrics Services, in the release's namespace.
func checkServiceMonitor(t *testing.T, r *rendered) {
	t.Helper()
	sms := all[*serviceMonitor](r, true)
	if r.value("serviceMonitor.enabled") != true {
		require.Empty(t, sms)
		return
	}
	require.Len(t, sms, 1)
	sm := sms[0]
	require.Equal(t, "monitoring.coreos.com/v1", sm.APIVersion)
	require.Equal(t, []string{namespace}, sm.Spec.NamespaceSelector.MatchNames)
	sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	require.NoError(t, err)
	var services []*corev1.Service
	var names []string
	for _, s := range all[*corev1.Service](r, true) {
		if sel.Matches(labels.Set(s.Labels)) {
			services = append(services, s)
			names = append(names, s.Name)
		}
	}
	require.ElementsMatch(t, []string{fullname + "-receiver-metrics", fullname + "-dispatcher"}, names)
	require.NotEmpty(t, sm.Spec.Endpoints)
	for _, e := range sm.Spec.Endpoints {
		require.Equal(t, "/metrics", e.Path)
		require.Regexp(t, promDuration, e.Interval)
		require.Regexp(t, promDuration, e.ScrapeTimeout)
		for _, s := range services {
			require.True(t, slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == e.Port }),
				"Service %s has no port %s", s.Name, e.Port)
		}
	}
}
