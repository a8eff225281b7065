package app

import (
	"regexp"
	"sort"

	"github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/deliver"
	"github.com/hookrelay/hookrelay/internal/ingest"
	"github.com/hookrelay/hookrelay/internal/outbox"
	"github.com/prometheus/client_golang/prometheus"
)

// MetricNames lists every hookrelay_ metric the receiver and the dispatcher
// export (histograms by their base name), so dashboards and alert rules can
// be checked against what exists.
func MetricNames() []string {
	rec := &describeRecorder{names: map[string]bool{}}
	ingest.NewMetrics(rec)
	amqp.NewConfirmsCounter(rec)
	amqp.NewBlockedGauge(rec)
	amqp.NewNodeGauge(rec)
	deliver.NewReconciledCounter(rec, nil)
	outbox.NewMetrics(rec)
	deliver.NewMetrics(rec, nil)
	rec.MustRegister(outbox.NewBacklogCollector(nil), deliver.NewRouteCollector(nil, nil))
	names := make([]string, 0, len(rec.names))
	for n := range rec.names {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// describeRecorder is a Registerer that only records metric names.
type describeRecorder struct{ names map[string]bool }

func (r *describeRecorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 16)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			r.names[m[1]] = true
		}
	}
	return nil
}

func (r *describeRecorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = r.Register(c) // never fails
	}
}

func (r *describeRecorder) Unregister(prometheus.Collector) bool { return false }
