package deploy

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

const (
	dashboardFile  = "grafana/hookrelay.json"
	alertsFile     = "prometheus/alerts.yml"
	prometheusFile = "prometheus/prometheus.yml"
)

// metricName matches anything that looks like a hookrelay metric in PromQL.
var metricName = regexp.MustCompile(`hookrelay_[a-zA-Z0-9_:]+`)

// histogramSuffixes are the series a histogram exports beside its base name.
var histogramSuffixes = []string{"_bucket", "_sum", "_count"}

// query is one PromQL expression and where it was found.
type query struct {
	where string
	expr  string
}

type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID      int    `json:"id"`
	Type    string `json:"type"`
	Title   string `json:"title"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	// Panels holds a row's panels (Grafana nests them when the row is
	// collapsed).
	Panels []panel `json:"panels"`
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

type promConfig struct {
	RuleFiles     []string `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		MetricsPath   string `yaml:"metrics_path"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(b, &d), "%s is not valid JSON", dashboardFile)
	return d
}

func loadRules(t *testing.T) []rule {
	t.Helper()
	b, err := os.ReadFile(alertsFile)
	require.NoError(t, err)
	var f ruleFile
	require.NoError(t, yaml.Unmarshal(b, &f), "%s is not valid YAML", alertsFile)
	var rules []rule
	for _, g := range f.Groups {
		require.NotEmpty(t, g.Name, "%s: a rule group has no name", alertsFile)
		rules = append(rules, g.Rules...)
	}
	return rules
}

// walkPanels calls fn for every panel, rows' nested panels included.
func walkPanels(panels []panel, fn func(panel)) {
	for _, p := range panels {
		fn(p)
		walkPanels(p.Panels, fn)
	}
}

// dashboardQueries returns every target expression and every query
// variable's definition in d.
func dashboardQueries(d dashboard) []query {
	var qs []query
	walkPanels(d.Panels, func(p panel) {
		for _, tg := range p.Targets {
			qs = append(qs, query{fmt.Sprintf("%s: panel %q target %s", dashboardFile, p.Title, tg.RefID), tg.Expr})
		}
	})
	for _, v := range d.Templating.List {
		if v.Definition != "" {
			qs = append(qs, query{fmt.Sprintf("%s: variable %q", dashboardFile, v.Name), v.Definition})
		}
	}
	return qs
}

func ruleQueries(rules []rule) []query {
	qs := make([]query, 0, len(rules))
	for _, r := range rules {
		qs = append(qs, query{fmt.Sprintf("%s: rule %q", alertsFile, r.Alert+r.Record), r.Expr})
	}
	return qs
}

// unknownMetrics returns the hookrelay_ names in expr that are neither an
// exported metric nor a histogram series (_bucket, _sum, _count) of one.
func unknownMetrics(expr string, known map[string]bool) []string {
	var bad []string
	for _, name := range metricName.FindAllString(expr, -1) {
		if known[name] {
			continue
		}
		ok := false
		for _, suf := range histogramSuffixes {
			base, found := strings.CutSuffix(name, suf)
			// A counter (…_total) has no _bucket, _sum or _count series.
			if found && known[base] && !strings.HasSuffix(base, "_total") {
				ok = true
				break
			}
		}
		if !ok {
			bad = append(bad, name)
		}
	}
	return bad
}

func knownMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names, err := app.MetricNames()
	require.NoError(t, err)
	require.NotEmpty(t, names, "app.MetricNames() returned nothing")
	known := make(map[string]bool, len(names))
	for _, n := range names {
		known[n] = true
	}
	return known
}

// TestMetricNames checks that the dashboard and the alert rules only name
// metrics that the receiver and the dispatcher export.
func TestMetricNames(t *testing.T) {
	t.Parallel()
	known := knownMetrics(t)
	qs := append(dashboardQueries(loadDashboard(t)), ruleQueries(loadRules(t))...)
	require.NotEmpty(t, qs)

	used := map[string]bool{}
	for _, q := range qs {
		require.NotEmpty(t, strings.TrimSpace(q.expr), "%s: empty expression", q.where)
		names := metricName.FindAllString(q.expr, -1)
		require.NotEmpty(t, names, "%s: expression names no hookrelay metric: %s", q.where, q.expr)
		for _, n := range names {
			used[n] = true
		}
		require.Empty(t, unknownMetrics(q.expr, known),
			"%s: unknown metric names (exported: %v) in %s", q.where, slices.Sorted(maps.Keys(known)), q.expr)
	}
	require.True(t, used["hookrelay_route_oldest_undelivered_age_seconds"])
}

// TestDashboardShowsRouteControls: issue 13 asks the dashboard to show
// each route's circuit state, the paused routes, and the events a
// drop_stale route recorded stale instead of sending.
func TestDashboardShowsRouteControls(t *testing.T) {
	t.Parallel()
	shown := map[string]bool{}
	for _, q := range dashboardQueries(loadDashboard(t)) {
		for _, n := range metricName.FindAllString(q.expr, -1) {
			shown[n] = true
		}
	}
	for _, m := range []string{"hookrelay_route_circuit_state", "hookrelay_route_paused", "hookrelay_deliveries_stale_total"} {
		require.True(t, shown[m], "no dashboard panel shows %s", m)
	}
}

// TestUnknownMetrics checks the check itself.
func TestUnknownMetrics(t *testing.T) {
	t.Parallel()
	known := map[string]bool{
		"hookrelay_delivery_duration_seconds": true,
		"hookrelay_deliveries_total":          true,
	}
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`rate(hookrelay_deliveries_total[5m])`, nil},
		{`histogram_quantile(0.99, rate(hookrelay_delivery_duration_seconds_bucket[5m]))`, nil},
		{`hookrelay_delivery_duration_seconds_sum / hookrelay_delivery_duration_seconds_count`, nil},
		{`hookrelay_deliveries_totl`, []string{"hookrelay_deliveries_totl"}},
		{`hookrelay_deliveries_total_bucket`, []string{"hookrelay_deliveries_total_bucket"}},
		{`hookrelay_nope_bucket + hookrelay_x`, []string{"hookrelay_nope_bucket", "hookrelay_x"}},
	} {
		require.Equal(t, tc.want, unknownMetrics(tc.expr, known), tc.expr)
	}
}

func TestDashboard(t *testing.T) {
	t.Parallel()
	d := loadDashboard(t)
	require.NotEmpty(t, d.UID)
	require.NotEmpty(t, d.Title)
	require.GreaterOrEqual(t, d.SchemaVersion, 39)
	require.NotEmpty(t, d.Panels)

	ids := map[int]bool{}
	n := 0
	walkPanels(d.Panels, func(p panel) {
		require.NotEmpty(t, p.Title, "panel %d has no title", p.ID)
		require.False(t, ids[p.ID], "panel id %d is used twice", p.ID)
		ids[p.ID] = true
		if p.Type == "row" {
			return // a row only groups panels
		}
		n++
		require.NotEmpty(t, p.Targets, "panel %q has no target", p.Title)
		for _, tg := range p.Targets {
			require.NotEmpty(t, tg.Expr, "panel %q has a target without expr", p.Title)
		}
	})
	require.Positive(t, n)

	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	for _, name := range []string{"route", "source"} {
		require.Equal(t, "query", vars[name], "templating variable %q", name)
	}
}

func TestAlertRules(t *testing.T) {
	t.Parallel()
	rules := loadRules(t)
	require.GreaterOrEqual(t, len(rules), 5)

	var names []string
	for _, r := range rules {
		require.NotEmpty(t, r.Alert, "rule without alert name: %+v", r)
		require.NotEmpty(t, strings.TrimSpace(r.Expr), "%s: no expr", r.Alert)
		require.NotEmpty(t, r.For, "%s: no for", r.Alert)
		require.Contains(t, []string{"critical", "warning", "info"}, r.Labels["severity"], "%s: severity", r.Alert)
		require.NotEmpty(t, r.Annotations["summary"], "%s: no summary", r.Alert)
		require.NotEmpty(t, r.Annotations["description"], "%s: no description", r.Alert)
		require.NotContains(t, r.Expr, "absent(", "%s: absent() rules are not wanted", r.Alert)
		require.NotContains(t, names, r.Alert, "alert %s is defined twice", r.Alert)
		names = append(names, r.Alert)
	}
	for _, want := range []string{
		"HookrelayDeliveryStalled", "HookrelayDeadLetters", "HookrelayOutboxBacklog",
		"HookrelayIngestErrors", "HookrelaySignatureRejections", "HookrelayPublishNacks",
		"HookrelayOutboxRowsRefused",
	} {
		require.True(t, slices.Contains(names, want), "missing alert %s", want)
	}
}

func TestPrometheusConfig(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(prometheusFile)
	require.NoError(t, err)
	var c promConfig
	require.NoError(t, yaml.Unmarshal(b, &c), "%s is not valid YAML", prometheusFile)

	require.Contains(t, c.RuleFiles, "alerts.yml")
	for _, f := range c.RuleFiles {
		_, err := os.Stat(filepath.Join(filepath.Dir(prometheusFile), f))
		require.NoError(t, err, "rule file %s", f)
	}

	var targets []string
	for _, sc := range c.ScrapeConfigs {
		require.NotEmpty(t, sc.JobName)
		require.Contains(t, []string{"", "/metrics"}, sc.MetricsPath, "%s: metrics path", sc.JobName)
		for _, st := range sc.StaticConfigs {
			targets = append(targets, st.Targets...)
		}
	}
	require.Contains(t, targets, "127.0.0.1:8083", "the receiver's metrics_listen: not its public listener")
	require.NotContains(t, targets, "127.0.0.1:8080", "the public webhook listener serves no metrics")
	require.Contains(t, targets, "127.0.0.1:8081", "dispatcher")
}
