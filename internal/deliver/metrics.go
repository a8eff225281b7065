package deliver

import (
	"context"
	"slices"
	"time"

	"github.com/hookrelay/hookrelay/internal/activity"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Metrics are the dispatcher's delivery metrics.
type Metrics struct {
	deliveries *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	retries    *prometheus.CounterVec
	inFlight   *prometheus.GaugeVec
	stale      *prometheus.CounterVec
	leases     *prometheus.CounterVec
	batches    *prometheus.HistogramVec
	// activity, when set, counts each outcome for the console's overview.
	activity *activity.Counter
}

// NewMetrics registers the delivery metrics on reg, with every route's
// series present from the start (a missing series cannot alert).
func NewMetrics(reg prometheus.Registerer, routes []string) *Metrics {
	m := &Metrics{
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookrelay_deliveries_total",
			Help: "Handled route messages by outcome: delivered, retry_scheduled, dead, skipped_duplicate, superseded (a stale copy, dropped without a POST), stale (an older version of a resource than one delivered, recorded stale without a POST), waiting (a route with ordering fifo: an earlier event of the resource goes first; the pair is parked and gets a new copy when its turn comes).",
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
		stale: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookrelay_deliveries_stale_total",
			Help: "Events recorded stale on a route with ordering drop_stale: a newer version of their resource had been delivered, so they were not sent.",
		}, []string{"route"}),
	}
	m.leases = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hookrelay_delivery_leases_total",
		Help: "Delivery lease events: waited (a message met a live lease on its pair and waited for it), lost (a lease expired and was taken over before its holder recorded).",
	}, []string{"route", "event"})
	m.batches = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "hookrelay_delivery_batch_size",
		Help:    "Claims (kind claim) or records (kind record) of concurrent deliveries written by one statement.",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256},
	}, []string{"kind"})
	reg.MustRegister(m.deliveries, m.duration, m.retries, m.inFlight, m.stale, m.leases, m.batches)
	m.batches.WithLabelValues("claim")
	m.batches.WithLabelValues("record")
	for _, r := range routes {
		for _, o := range outcomes {
			m.deliveries.WithLabelValues(r, o)
		}
		m.inFlight.WithLabelValues(r)
		m.stale.WithLabelValues(r)
		for _, e := range leaseEvents {
			m.leases.WithLabelValues(r, e)
		}
	}
	return m
}

func (m *Metrics) outcome(route, outcome string) {
	m.deliveries.WithLabelValues(route, outcome).Inc()
	m.activity.Add(activity.Delivery, route, outcome, "")
}

// CountActivity also counts each outcome in c (per minute, in Postgres).
func (m *Metrics) CountActivity(c *activity.Counter) { m.activity = c }

// leaseEvents are the values of hookrelay_delivery_leases_total's event
// label.
var leaseEvents = []string{"waited", "lost"}

func (m *Metrics) lease(route, event string) {
	m.leases.WithLabelValues(route, event).Inc()
}

// outcomes are the values of hookrelay_deliveries_total's outcome label.
var outcomes = []string{"delivered", "retry_scheduled", "dead", "skipped_duplicate", "superseded", "stale", "waiting"}

// Outcomes returns how many of route's messages came to each outcome
// since the process started (hookrelay_deliveries_total), for the
// dispatcher's summary line.
func (m *Metrics) Outcomes(route string) map[string]float64 {
	out := make(map[string]float64, len(outcomes))
	for _, o := range outcomes {
		var pb dto.Metric
		if err := m.deliveries.WithLabelValues(route, o).Write(&pb); err == nil {
			out[o] = pb.GetCounter().GetValue()
		}
	}
	return out
}

// RouteStat is Postgres's view of one route's pairs.
type RouteStat struct {
	Route             string
	Undelivered       int64
	OldestUndelivered time.Duration
	Dead              int64
	// Waiting pairs are parked behind an earlier event of their resource
	// (ordering fifo), of WaitingResources resources, the oldest
	// LongestWait old.
	Waiting, WaitingResources int64
	LongestWait               time.Duration
}

// RouteStatsFunc reads RouteStat for every route with pairs not delivered.
type RouteStatsFunc func(ctx context.Context) ([]RouteStat, error)

// RouteCollector reports, at scrape time and straight from Postgres, each
// route's undelivered pairs, the age of the oldest (the number on-call
// alerts on: it grows while a destination is down, however the retries are
// spaced), and its dead pairs; and the pairs pending or retrying on routes
// that are not configured, which no dispatcher delivers (a route removed
// from the config while pairs were in flight, or receivers and
// dispatchers running different configs).
type RouteCollector struct {
	stats       RouteStatsFunc
	routes      func() []string
	undelivered *prometheus.Desc
	oldest      *prometheus.Desc
	dead        *prometheus.Desc
	unserved    *prometheus.Desc
	waiting     *prometheus.Desc
	waitingRes  *prometheus.Desc
	longestWait *prometheus.Desc
}

// NewRouteCollector returns a collector over stats for the routes that
// routes returns at each scrape.
func NewRouteCollector(stats RouteStatsFunc, routes func() []string) *RouteCollector {
	return &RouteCollector{
		stats:  stats,
		routes: routes,
		undelivered: prometheus.NewDesc("hookrelay_route_undelivered",
			"Event-route pairs accepted but not yet delivered (pending or retrying).", []string{"route"}, nil),
		oldest: prometheus.NewDesc("hookrelay_route_oldest_undelivered_age_seconds",
			"Age of the oldest undelivered event-route pair (0 when none).", []string{"route"}, nil),
		dead: prometheus.NewDesc("hookrelay_route_dead",
			"Event-route pairs in the dead-letter state, waiting for an operator.", []string{"route"}, nil),
		waiting: prometheus.NewDesc("hookrelay_route_waiting",
			"Event-route pairs of a route with ordering fifo waiting behind an earlier event of their resource (undelivered too).", []string{"route"}, nil),
		waitingRes: prometheus.NewDesc("hookrelay_route_waiting_resources",
			"Resources of a route with ordering fifo whose later events wait behind their head (failing, dead with on_dead block, or in flight).", []string{"route"}, nil),
		longestWait: prometheus.NewDesc("hookrelay_route_longest_wait_seconds",
			"Age of the oldest event-route pair waiting behind an earlier event of its resource (0 when none).", []string{"route"}, nil),
		unserved: prometheus.NewDesc("hookrelay_route_unserved_undelivered",
			"Event-route pairs pending or retrying on a route this dispatcher's config does not have: nothing delivers them. "+
				"One series per such route, none when there are none.", []string{"route"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *RouteCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.undelivered
	ch <- c.oldest
	ch <- c.dead
	ch <- c.unserved
	ch <- c.waiting
	ch <- c.waitingRes
	ch <- c.longestWait
}

// Collect implements prometheus.Collector. A failed query fails the scrape
// for these metrics rather than reporting zeros.
func (c *RouteCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	stats, err := c.stats(ctx)
	if err != nil {
		for _, d := range []*prometheus.Desc{c.undelivered, c.oldest, c.dead, c.unserved, c.waiting, c.waitingRes, c.longestWait} {
			ch <- prometheus.NewInvalidMetric(d, err)
		}
		return
	}
	byRoute := map[string]RouteStat{}
	for _, s := range stats {
		byRoute[s.Route] = s
	}
	routes := c.routes()
	for _, s := range stats {
		if !slices.Contains(routes, s.Route) && s.Undelivered > 0 {
			ch <- prometheus.MustNewConstMetric(c.unserved, prometheus.GaugeValue, float64(s.Undelivered), s.Route)
		}
	}
	for _, r := range routes {
		s := byRoute[r]
		ch <- prometheus.MustNewConstMetric(c.undelivered, prometheus.GaugeValue, float64(s.Undelivered), r)
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, s.OldestUndelivered.Seconds(), r)
		ch <- prometheus.MustNewConstMetric(c.dead, prometheus.GaugeValue, float64(s.Dead), r)
		ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(s.Waiting), r)
		ch <- prometheus.MustNewConstMetric(c.waitingRes, prometheus.GaugeValue, float64(s.WaitingResources), r)
		ch <- prometheus.MustNewConstMetric(c.longestWait, prometheus.GaugeValue, s.LongestWait.Seconds(), r)
	}
}

// ObserveBatch counts one grouped write of n claims or records (kind
// "claim" or "record").
func (m *Metrics) ObserveBatch(kind string, n int) {
	m.batches.WithLabelValues(kind).Observe(float64(n))
}
