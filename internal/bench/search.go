package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/store"
)

// Search (--search): searches by the body (docs/search.md) timed on the
// database the run leaves (with --history, its events: each of the
// history's bodies names one of searchCustomers customers), and the
// ingest phases run first without the body index (round 0) to compare
// with round 1, which has it.

// Search is what --search measured.
type Search struct {
	// Queries are the timed searches.
	Queries []SearchQuery `json:"queries"`
	// Ingest compares round 1 (with the index) with round 0 (without).
	Ingest []RoundCompare `json:"ingest"`
	// Events is how many events the database held; BodyIndexMB the body
	// index's size over every partition, EventsMB the events' (table,
	// TOAST and every other index); per event, in bytes.
	Events            int64   `json:"events"`
	BodyIndexMB       float64 `json:"body_index_mb"`
	EventsMB          float64 `json:"events_mb"`
	BodyIndexPerEvent float64 `json:"body_index_bytes_per_event"`
	EventsPerEvent    float64 `json:"events_bytes_per_event"`
}

// SearchQuery is one timed search: the first call (cold: the index's
// pages read from disk or the OS cache) and the median of the next ones.
type SearchQuery struct {
	Name    string  `json:"name"`
	Where   string  `json:"where"`
	Window  string  `json:"window"`
	Found   int     `json:"found"`
	FirstMS float64 `json:"first_ms"`
	WarmMS  float64 `json:"warm_ms"`
}

// searchCustomers is how many customers the history's bodies name, one
// each, in turn: a customer has one event in searchCustomers.
const searchCustomers = 100_000

// searchIndexSQL makes the body index (migration 32).
const searchIndexSQL = `CREATE INDEX events_body_idx ON events USING gin (hookrelay_body_json(body) jsonb_path_ops)`

// searchWithoutIndex runs the ingest phases without the body index, as
// round 0, then makes it again.
func (r *runner) searchWithoutIndex(ctx context.Context) error {
	r.res.Search = &Search{}
	if _, err := r.relay.Exec(ctx, `DROP INDEX events_body_idx`); err != nil {
		return fmt.Errorf("search: dropping the body index for round 0: %w", err)
	}
	r.round = 0
	r.logf("round 0: ingest without the body index")
	if err := r.ingestPhases(ctx); err != nil {
		return fmt.Errorf("round 0, ingest: %w", err)
	}
	if _, err := r.relay.Exec(ctx, searchIndexSQL); err != nil {
		return fmt.Errorf("search: making the body index again: %w", err)
	}
	return nil
}

// searchTimings times the searches on what the database holds now.
func (r *runner) searchTimings(ctx context.Context) error {
	s := r.res.Search
	db, err := store.Open(ctx, store.Config{URL: r.relayURL, MaxConns: 2})
	if err != nil {
		return fmt.Errorf("search: opening the store: %w", err)
	}
	defer db.Close()
	ctx = store.WithTeam(ctx, store.TeamAll)
	customer := fmt.Sprintf("cus_%d", searchCustomers/2+42)
	byCustomer := fmt.Sprintf(`body.data.object.customer == %q`, customer)
	queries := []struct {
		name, where, window string
		since               time.Duration
	}{
		{"one customer, 1 day", byCustomer, "24h", 24 * time.Hour},
		{"one customer, 30 days", byCustomer, "30d", 30 * 24 * time.Hour},
		{"one customer and more, 30 days", byCustomer + ` && body.pad.size() > 10`, "30d", 30 * 24 * time.Hour},
		{"no field compared (every body read), 1 hour", `body.data.object.customer.startsWith("` + customer + `")`, "1h", time.Hour},
	}
	for _, q := range queries {
		search, err := ops.CompileSearch(q.where)
		if err != nil {
			return fmt.Errorf("search %q: %w", q.where, err)
		}
		f := store.EventFilter{Since: time.Now().Add(-q.since), Search: search, Limit: ops.DefaultListLimit}
		var times []float64
		found := 0
		for i := range 5 {
			start := time.Now()
			rows, err := db.EventList(ctx, f)
			if err != nil {
				return fmt.Errorf("search %q over %s: %w", q.where, q.window, err)
			}
			times = append(times, float64(time.Since(start).Microseconds())/1000)
			if i == 0 {
				found = len(rows)
			}
		}
		warm := slices.Clone(times[1:])
		slices.Sort(warm)
		s.Queries = append(s.Queries, SearchQuery{Name: q.name, Where: q.where, Window: q.window, Found: found,
			FirstMS: times[0], WarmMS: warm[len(warm)/2]})
		r.logf("search: %s: %d found, first %.1f ms, warm %.1f ms", q.name, found, times[0], warm[len(warm)/2])
	}
	var idx, all int64
	if err := r.relay.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM events),
			(SELECT COALESCE(sum(pg_relation_size(i.indexrelid)), 0)::int8 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
			 WHERE c.relname LIKE 'events%body%idx' AND c.relkind = 'i'),
			(SELECT COALESCE(sum(pg_total_relation_size(inhrelid)), 0)::int8 FROM pg_inherits WHERE inhparent = 'events'::regclass)`).
		Scan(&s.Events, &idx, &all); err != nil {
		return fmt.Errorf("search: sizes: %w", err)
	}
	s.BodyIndexMB, s.EventsMB = float64(idx)/(1<<20), float64(all)/(1<<20)
	if s.Events > 0 {
		s.BodyIndexPerEvent, s.EventsPerEvent = float64(idx)/float64(s.Events), float64(all)/float64(s.Events)
	}
	return nil
}

// compareSearch fills the ingest comparison: round 1 against round 0.
func (r *runner) compareSearch() {
	if s := r.res.Search; s != nil {
		s.Ingest = compareRounds(r.res.Phases, func(round int) (int, bool) { return 0, round == 1 })
	}
}

func printSearch(w io.Writer, s *Search) error {
	fmt.Fprintf(w, "\nsearch by the body over %d events (first page, at most %d); the body index %.0f MB (%.0f bytes/event), events with it %.0f MB (%.0f bytes/event)\n",
		s.Events, ops.DefaultListLimit, s.BodyIndexMB, s.BodyIndexPerEvent, s.EventsMB, s.EventsPerEvent)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "search\twindow\tfound\tfirst ms\twarm ms\t\n")
	for _, q := range s.Queries {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.1f\t%.1f\t\n", q.Name, q.Window, q.Found, q.FirstMS, q.WarmMS)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "ingest with the body index (round 1) against without (round 0); ratio: with / without\n")
	return printRoundCompare(w, "without", s.Ingest)
}
