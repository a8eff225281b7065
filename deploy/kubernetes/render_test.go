package kubernetes

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

const (
	chartDir    = "hookrelay"
	releaseName = "relay"
	namespace   = "webhooks"
	// kubeVersion is the cluster the chart is rendered for: the release of
	// the k8s.io/api types the objects are decoded into.
	kubeVersion = "v1.37.0"
)

// object is one rendered Kubernetes object, decoded into its API type.
type object struct {
	source string // the template, e.g. hookrelay/templates/receiver.yaml
	hook   bool   // a Helm hook, not part of the release's manifest
	kind   string
	name   string
	obj    any // *appsv1.Deployment, *corev1.Service, ...
}

// rendered is what `helm install` would send to the cluster.
type rendered struct {
	objects []object
	// values are the chart's values merged with the overrides, as the
	// templates saw them.
	values map[string]any
	notes  string
}

// serviceMonitor is the part of prometheus-operator's ServiceMonitor
// (monitoring.coreos.com/v1) the chart writes, with the CRD's field names:
// decoded strictly, a misspelt or misplaced field fails the test.
type serviceMonitor struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector struct {
			Any        bool     `json:"any,omitempty"`
			MatchNames []string `json:"matchNames,omitempty"`
		} `json:"namespaceSelector"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Interval      string `json:"interval"`
			ScrapeTimeout string `json:"scrapeTimeout"`
			Relabelings   []struct {
				SourceLabels []string `json:"sourceLabels"`
				TargetLabel  string   `json:"targetLabel"`
			} `json:"relabelings"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// newTyped returns the API type an apiVersion and kind decode into; any
// other kind is an error: the test knows every kind the chart may render.
func newTyped(apiVersion, kind string) (any, error) {
	switch apiVersion + " " + kind {
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}, nil
	case "batch/v1 Job":
		return &batchv1.Job{}, nil
	case "v1 Service":
		return &corev1.Service{}, nil
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1 Secret":
		return &corev1.Secret{}, nil
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, nil
	case "monitoring.coreos.com/v1 ServiceMonitor":
		return &serviceMonitor{}, nil
	}
	return nil, fmt.Errorf("unknown kind %q of %q: add it to the test", kind, apiVersion)
}

var sourceLine = regexp.MustCompile(`(?m)^# Source: (\S+)`)

// decode decodes one YAML document strictly: duplicate keys, unknown
// fields and a field spelt in another case are errors, as the API server's
// strict field validation makes them. An empty document decodes to nothing.
func decode(doc string, hook bool) (*object, error) {
	source := "?"
	if m := sourceLine.FindStringSubmatch(doc); m != nil {
		source = m[1]
	}
	js, err := yaml.YAMLToJSONStrict([]byte(doc))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	if string(js) == "null" {
		return nil, nil
	}
	var tm metav1.TypeMeta
	if err := kjson.UnmarshalCaseSensitivePreserveInts(js, &tm); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	into, err := newTyped(tm.APIVersion, tm.Kind)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	strict, err := kjson.UnmarshalStrict(js, into, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return nil, fmt.Errorf("%s: decoding %s: %w", source, tm.Kind, err)
	}
	if len(strict) > 0 {
		return nil, fmt.Errorf("%s: decoding %s strictly: %v", source, tm.Kind, strict)
	}
	var meta struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(js, &meta); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	return &object{source: source, hook: hook, kind: tm.Kind, name: meta.Metadata.Name, obj: into}, nil
}

// loadChart loads the chart afresh for each render: Install changes the
// chart it is given.
func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir)
	require.NoError(t, err)
	return c
}

// values parses YAML overrides, as `helm install -f` would take them.
func values(t *testing.T, overrides string) map[string]any {
	t.Helper()
	out := map[string]any{}
	require.NoError(t, yaml.Unmarshal([]byte(overrides), &out))
	return out
}

// renderErr renders the chart as `helm install --dry-run` does without a
// cluster (the same engine as `helm template`), hooks included.
func renderErr(t *testing.T, overrides string) (*rendered, error) {
	t.Helper()
	c := loadChart(t)
	vals := values(t, overrides)
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	require.NoError(t, err)
	install := action.NewInstall(&action.Configuration{Log: t.Logf})
	install.ReleaseName = releaseName
	install.Namespace = namespace
	install.DryRun = true
	install.ClientOnly = true
	install.KubeVersion = kv
	rel, err := install.Run(c, vals)
	if err != nil {
		return nil, err
	}
	merged, err := chartutil.CoalesceValues(c, vals)
	require.NoError(t, err)
	r := &rendered{values: merged, notes: rel.Info.Notes}
	add := func(manifest string, hook bool) {
		for _, doc := range releaseutil.SplitManifests(manifest) {
			o, err := decode(doc, hook)
			require.NoError(t, err)
			if o != nil {
				r.objects = append(r.objects, *o)
			}
		}
	}
	add(rel.Manifest, false)
	for _, h := range rel.Hooks {
		add(h.Manifest, true)
	}
	return r, nil
}

func render(t *testing.T, overrides string) *rendered {
	t.Helper()
	r, err := renderErr(t, overrides)
	require.NoError(t, err)
	return r
}

// all returns the rendered objects of type T (a pointer type), hooks
// included when hooks is true.
func all[T any](r *rendered, hooks bool) []T {
	var out []T
	for _, o := range r.objects {
		if v, ok := o.obj.(T); ok && (hooks || !o.hook) {
			out = append(out, v)
		}
	}
	return out
}

// find returns the object of type T named name.
func find[T any](t *testing.T, r *rendered, name string) T {
	t.Helper()
	for _, o := range r.objects {
		if v, ok := o.obj.(T); ok && o.name == name {
			return v
		}
	}
	var zero T
	require.Failf(t, "object not rendered", "no %T named %s among %v", zero, name, r.names())
	return zero
}

func (r *rendered) names() []string {
	var out []string
	for _, o := range r.objects {
		out = append(out, o.kind+"/"+o.name)
	}
	return out
}

// value reads a value by its dotted path, e.g. "config.dispatcher.shutdown_timeout".
func (r *rendered) value(path string) any {
	var v any = r.values
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// fullname is the prefix of every object's name for releaseName.
const fullname = releaseName + "-hookrelay"
