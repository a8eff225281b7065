package bench

import (
	"context"
	"fmt"
	"io"
)

// Filters (--filters): the end-to-end phase at --rate with filterRoutes
// routes bound to every event, in rounds that alternate their rules: none
// in odd rounds; in even rounds each route has a filter (which takes every
// event the benchmark sends, so both rounds deliver the same pairs) and a
// transformation (a map of five fields out of the Stripe-like body, with a
// header added). The table compares each even round with the odd one
// before it: the cost of reading the event, per event, at everyday load.

// filterRoutes is how many routes --filters binds.
const filterRoutes = 10

// The rules of --filters' even rounds: a filter of the kind docs/rules.md
// shows (a field compared, a string tested), and a transformation that
// builds a body of its own.
const (
	benchFilter           = `body.type == "invoice.paid" && body.data.object.currency == "brl" && body.data.object.amount_due > 0`
	benchTransform        = `{"id": body.data.object.id, "customer": body.data.object.customer, "amount": body.data.object.amount_due, "currency": body.data.object.currency.upperAscii(), "lines": size(body.data.object.lines)}`
	benchTransformHeaders = `{"x-bench-kind": event_type}`
)

// Filters is what --filters measured.
type Filters struct {
	Routes           int    `json:"routes"`
	Filter           string `json:"filter"`
	Transform        string `json:"transform"`
	TransformHeaders string `json:"transform_headers"`
	// Compare holds, per phase, an even round (rules) against the odd
	// round before it (none).
	Compare []RoundCompare `json:"compare"`
}

// benchRoutes are the routes the relay delivers to: one, or filterRoutes
// with --filters (the first is benchRoute).
func (r *runner) benchRoutes() []string {
	if !r.o.filters {
		return []string{benchRoute}
	}
	out := []string{benchRoute}
	for i := 2; i <= filterRoutes; i++ {
		out = append(out, fmt.Sprintf("%s-%d", benchRoute, i))
	}
	return out
}

// routesConfig is the routes of the config the relay runs with.
func (r *runner) routesConfig() []any {
	var out []any
	for _, name := range r.benchRoutes() {
		route := map[string]any{
			"name": name, "url": r.dest.url(name), "bindings": []string{benchSource + ".#"},
			"concurrency": r.o.concurrency, "signing_secret": r.signingSecret,
		}
		if r.rulesOn {
			route["filter"], route["transform"], route["transform_headers"] = benchFilter, benchTransform, benchTransformHeaders
		}
		if r.fifoOn {
			route["ordering"] = "fifo"
		}
		if r.amqpOn {
			route["kind"], route["url"], route["exchange"] = "amqp", r.o.amqpURL, r.targetName()
		}
		out = append(out, route)
	}
	return out
}

// switchFilters restarts the receiver and the dispatcher with the routes'
// rules as round n has them, when that differs from how they run.
func (r *runner) switchFilters(ctx context.Context, n int) error {
	if r.res.Filters == nil {
		r.res.Filters = &Filters{Routes: filterRoutes, Filter: benchFilter, Transform: benchTransform, TransformHeaders: benchTransformHeaders}
	}
	want := n%2 == 0
	if want == r.rulesOn {
		return nil
	}
	r.logf("round %d: %d routes %s", n, filterRoutes, map[bool]string{true: "each with a filter and a transformation", false: "without rules"}[want])
	return r.restartRelay(ctx, func() { r.rulesOn = want })
}

// compareFilters fills r.res.Filters.Compare.
func (r *runner) compareFilters() {
	if r.res.Filters == nil {
		return
	}
	r.res.Filters.Compare = compareRounds(r.res.Phases, func(round int) (int, bool) { return round - 1, round%2 == 0 })
}

func printFilters(w io.Writer, x *Filters) error {
	fmt.Fprintf(w, "\n%d routes each with a filter and a transformation (even rounds), against the same routes without (the round before); ratio: with / without\n  filter: %s\n  transform: %s\n  transform_headers: %s\n",
		x.Routes, x.Filter, x.Transform, x.TransformHeaders)
	return printRoundCompare(w, "without", x.Compare)
}
