package deliver

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the dispatcher's delivery metrics.
type Metrics struct {
	deliveries *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	retries    *prometheus.CounterVec
	inFlight   *prometheus.GaugeVec
}

// NewMetrics registers the delivery metrics on reg, with every route's
// series present from the start (a missing series cannot alert).
func NewMetrics(reg prometheus.Registerer, routes []string) *Metrics {
	m := &Metrics{
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookrelay_deliveries_total",
			Help: "Handled route messages by outcome: delivered, retry_scheduled, dead, skipped_duplicate.",
		}, []string{"route", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "hookrelay_delivery_duration_seconds",
			Help: "Duration of HTTP delivery attempts.",
			// Destinations answer in milliseconds to the route timeout (10s
			// by default).
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"route"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookrelay_retries_total",
			Help: "Retries scheduled, by route and tier delay.",
		}, []string{"route", "tier"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "hookrelay_deliveries_in_flight",
			Help: "HTTP delivery attempts in progress.",
		}, []string{"route"}),
	}
	reg.MustRegister(m.deliveries, m.duration, m.retries, m.inFlight)
	for _, r := range routes {
		for _, o := range []string{"delivered", "retry_scheduled", "dead", "skipped_duplicate"} {
			m.deliveries.WithLabelValues(r, o)
		}
		m.inFlight.WithLabelValues(r)
	}
	return m
}

func (m *Metrics) outcome(route, outcome string) {
	m.deliveries.WithLabelValues(route, outcome).Inc()
}
