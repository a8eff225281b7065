package app

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/control"
	"github.com/hookrelay/hookrelay/internal/deliver"
	"github.com/hookrelay/hookrelay/internal/ingest"
	"github.com/hookrelay/hookrelay/internal/outbox"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/prometheus/client_golang/prometheus"
)

// MetricNames lists every hookrelay_ metric the receiver and the dispatcher
// export (histograms by their base name), so dashboards and alert rules can
// be checked against what exists. It registers every metric on a registry
// of its own, over fakes where a collector reads Postgres, gives each
// vector a series, and gathers the names.
func MetricNames() ([]string, error) {
	reg := prometheus.NewRegistry()
	rec := seriesRegisterer{reg}
	routes := []string{"route"}
	ingest.NewMetrics(rec)
	amqp.NewConfirmsCounter(rec)
	amqp.NewBlockedGauge(rec)
	amqp.NewNodeGauge(rec)
	deliver.NewReconciledCounter(rec, routes)
	deliver.NewTierGauge(rec)
	deliver.NewTierClearedCounter(rec)
	outbox.NewMetrics(rec)
	deliver.NewMetrics(rec, routes)
	// The controls' metrics; the store is never asked here.
	if _, err := control.New(control.Config{
		Routes: []control.Route{{Name: "route"}}, Store: (*store.DB)(nil), Owner: "metric-names", Registerer: rec,
	}); err != nil {
		return nil, err
	}
	stats := func(context.Context) ([]deliver.RouteStat, error) {
		// An unconfigured route with pairs, so the unserved gauge has a
		// series too.
		return []deliver.RouteStat{{Route: "unconfigured", Undelivered: 1}}, nil
	}
	if err := rec.Register(outbox.NewBacklogCollector(noBacklog{})); err != nil {
		return nil, err
	}
	if err := rec.Register(deliver.NewRouteCollector(stats, func() []string { return routes })); err != nil {
		return nil, err
	}
	families, err := reg.Gather()
	if err != nil {
		return nil, fmt.Errorf("gathering metrics: %w", err)
	}
	names := make([]string, 0, len(families))
	for _, f := range families {
		names = append(names, f.GetName())
	}
	slices.Sort(names)
	return names, nil
}

// seriesRegisterer registers on a registry and gives every vector it
// registers one series: a vector without series is left out of Gather.
type seriesRegisterer struct{ *prometheus.Registry }

// maxLabels bounds the search for a vector's label count.
const maxLabels = 8

func (r seriesRegisterer) Register(c prometheus.Collector) error {
	if err := r.Registry.Register(c); err != nil {
		return err
	}
	// Each vector type returns its own metric type: series hides that.
	var series func(lvs ...string) error
	switch c := c.(type) {
	case *prometheus.CounterVec:
		series = func(lvs ...string) error { _, err := c.GetMetricWithLabelValues(lvs...); return err }
	case *prometheus.GaugeVec:
		series = func(lvs ...string) error { _, err := c.GetMetricWithLabelValues(lvs...); return err }
	case *prometheus.HistogramVec:
		series = func(lvs ...string) error { _, err := c.GetMetricWithLabelValues(lvs...); return err }
	default:
		return nil // a plain metric or a collector: it reports what it has
	}
	// The label names are not exported; a wrong count is an error, and the
	// right one makes the series.
	for n := range maxLabels + 1 {
		if series(slices.Repeat([]string{"x"}, n)...) == nil {
			return nil
		}
	}
	return fmt.Errorf("a vector with more than %d labels", maxLabels)
}

func (r seriesRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err) // as prometheus.Registry.MustRegister does
		}
	}
}

// noBacklog is an empty outbox.
type noBacklog struct{}

func (noBacklog) OutboxStats(context.Context) (int64, time.Duration, error) { return 0, 0, nil }
func (noBacklog) OutboxBackoffCount(context.Context) (int64, error)         { return 0, nil }
