package bench

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"text/tabwriter"
	"time"
)

// History (--history N): the phases run twice, first on the empty
// database, then after N delivered events (each with its delivery and its
// successful attempt) were written into it, spread over the week before the
// run; the table compares the second round with the first. Then a purge of
// the oldest day of that history is timed, with the tables' sizes before
// and after.

// History is what --history measured.
type History struct {
	Events int `json:"events"`
	// FillS is how long the pre-fill took, VacuumS its VACUUM ANALYZE.
	FillS   float64 `json:"fill_s"`
	VacuumS float64 `json:"vacuum_s"`
	// Compare holds, per phase, round 2 (with the history) against round
	// 1 (empty).
	Compare []RoundCompare `json:"compare"`
	// Purge is the purge of the history's oldest day.
	Purge *HistoryPurge `json:"purge,omitempty"`
}

// HistoryPurge is the timed purge.
type HistoryPurge struct {
	OlderThan string  `json:"older_than"`
	Seconds   float64 `json:"seconds"`
	// Output is the purge's last line (what it deleted).
	Output string `json:"output"`
	// SizeBeforeMB and SizeAfterMB are the total size of events,
	// deliveries and delivery_attempts (indexes and TOAST included).
	SizeBeforeMB float64 `json:"size_before_mb"`
	SizeAfterMB  float64 `json:"size_after_mb"`
}

// historySpan is how far back the pre-filled events go; historyBodySize
// the size of their bodies (smaller than the phases' events: 10 million
// of those would take 15 GB for the bodies alone).
const (
	historySpan     = 7 * 24 * time.Hour
	historyBodySize = 512
	historyChunk    = 50_000
)

// prefillHistory writes n delivered events with their deliveries and
// attempts, the oldest historySpan before now, the newest an hour ago,
// chunk by chunk (one statement each), then VACUUM ANALYZEs the tables, as
// autovacuum would have on a database that grew to this size.
func (r *runner) prefillHistory(ctx context.Context, n int) error {
	h := &History{Events: n}
	r.res.History = h
	body := strings.Repeat("x", historyBodySize-len(`{"id":"","data":{"object":{"customer":"cus_"}},"pad":""}`)-17)
	start := time.Now()
	oldest := start.Add(-historySpan)
	step := (historySpan - time.Hour) / time.Duration(n)
	// Receivers make partitions for yesterday on; the history needs the
	// week before.
	if _, err := r.relay.Exec(ctx, `SELECT hookrelay_ensure_partitions($1::date, $2::date)`,
		oldest.UTC().Format(time.DateOnly), start.UTC().Format(time.DateOnly)); err != nil {
		return fmt.Errorf("history: making the week's partitions: %w", err)
	}
	r.logf("history: writing %d delivered events (with a delivery and an attempt each) over the week before the run", n)
	for from := 0; from < n; from += historyChunk {
		to := min(from+historyChunk, n) - 1
		// The ids are UUIDv7-like (the time first), as the receiver's are:
		// they put each event in its day's partition.
		_, err := r.relay.Exec(ctx, `
			WITH src AS (
				SELECT g, $2::timestamptz + g * $3::bigint * interval '1 microsecond' AS at
				FROM generate_series($4::bigint, $5::bigint) g
			), ids AS (
				SELECT g, at, (lpad(to_hex(floor(extract(epoch FROM at) * 1000)::bigint), 12, '0') || '7000' || '8000' || lpad(to_hex(g), 12, '0'))::uuid AS id
				FROM src
			), k AS (
				INSERT INTO event_keys (source, idempotency_key, event_id)
				SELECT $1, 'hist_' || g, id FROM ids
			), ev AS (
				INSERT INTO events (id, source, idempotency_key, event_type, content_type, headers, body, received_at, keyed)
				SELECT id, $1, 'hist_' || g, 'history.event', 'application/json', '{}',
				       convert_to('{"id":"hist_' || g || '","data":{"object":{"customer":"cus_' || (g % `+fmt.Sprint(searchCustomers)+`) || '"}},"pad":"' || $6 || '"}', 'UTF8'), at, true
				FROM ids
				RETURNING id, received_at
			), d AS (
				INSERT INTO deliveries (event_id, route, state, attempts, last_status, first_attempt_at, last_attempt_at,
				                        delivered_at, created_at, updated_at, due_at)
				SELECT id, $7, 'delivered', 1, 200, received_at, received_at, received_at + interval '5 milliseconds',
				       received_at, received_at, received_at
				FROM ev
				RETURNING id, event_id, first_attempt_at
			)
			INSERT INTO delivery_attempts (delivery_id, event_id, attempt, started_at, duration_ms, status, outcome)
			SELECT id, event_id, 1, first_attempt_at, 3, 200, 'ok' FROM d`,
			benchSource, oldest, step.Microseconds(), from, to, body, benchRoute)
		if err != nil {
			return fmt.Errorf("history: writing events %d..%d: %w", from, to, err)
		}
		done := to + 1
		el := time.Since(start)
		fmt.Fprintf(r.stderr, "  history %9d of %d  %6.0f/s  %s left\n", done, n, float64(done)/el.Seconds(),
			(time.Duration(float64(el) / float64(done) * float64(n-done))).Round(time.Second))
	}
	h.FillS = time.Since(start).Seconds()
	vstart := time.Now()
	r.logf("history: VACUUM ANALYZE of events, deliveries and delivery_attempts")
	if _, err := r.relay.Exec(ctx, `VACUUM (ANALYZE) events, deliveries, delivery_attempts`); err != nil {
		return fmt.Errorf("history: vacuum: %w", err)
	}
	h.VacuumS = time.Since(vstart).Seconds()
	r.logf("history: %d events in %.0fs, vacuumed in %.0fs", n, h.FillS, h.VacuumS)
	return nil
}

// historySize is the total size of the history's tables (every partition
// of events, deliveries and delivery_attempts, and event_keys), in MB.
func (r *runner) historySize(ctx context.Context) (float64, error) {
	var b int64
	err := r.relay.QueryRow(ctx, `
		SELECT pg_total_relation_size('event_keys') + COALESCE(sum(pg_total_relation_size(inhrelid)), 0)::int8
		FROM pg_inherits WHERE inhparent IN ('events'::regclass, 'deliveries'::regclass, 'delivery_attempts'::regclass)`).Scan(&b)
	return float64(b) / (1 << 20), err
}

// purgeHistory times `hookrelay purge` of the history's oldest day (from
// its first event to the next midnight UTC, the end of its partition), run
// as the operator would (this executable is hookrelay), then VACUUMs the
// tables (as autovacuum would) and reads their size.
func (r *runner) purgeHistory(ctx context.Context) error {
	h := r.res.History
	before, err := r.historySize(ctx)
	if err != nil {
		return fmt.Errorf("history: table sizes: %w", err)
	}
	// The first midnight after the oldest event, to the second below.
	midnight := time.Now().Add(-historySpan).UTC().Truncate(24*time.Hour).AddDate(0, 0, 1)
	age := fmt.Sprintf("%ds", int(time.Since(midnight).Seconds()))
	r.logf("history: hookrelay purge --older-than %s (the oldest day of the history)", age)
	start := time.Now()
	cmd := exec.CommandContext(ctx, r.exe, "purge", "--config", r.configPath, "--older-than", age, "--yes")
	out, err := cmd.CombinedOutput()
	secs := time.Since(start).Seconds()
	if err != nil {
		return fmt.Errorf("history: purge: %w\n%s", err, out)
	}
	if _, err := r.relay.Exec(ctx, `VACUUM events, deliveries, delivery_attempts`); err != nil {
		return fmt.Errorf("history: vacuum after the purge: %w", err)
	}
	after, err := r.historySize(ctx)
	if err != nil {
		return fmt.Errorf("history: table sizes: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	h.Purge = &HistoryPurge{OlderThan: age, Seconds: secs, Output: lines[len(lines)-1], SizeBeforeMB: before, SizeAfterMB: after}
	r.logf("history: purge took %.1fs: %s", secs, h.Purge.Output)
	return nil
}

// compareHistory fills the comparison of round 2 with round 1.
func (r *runner) compareHistory() {
	if h := r.res.History; h != nil {
		h.Compare = compareRounds(r.res.Phases, func(round int) (int, bool) { return 1, round == 2 }) // Hookrelay: with the history, Bare: empty
	}
}

func printHistory(w io.Writer, h *History) error {
	fmt.Fprintf(w, "\nwith %d events stored (round 2) against the empty database (round 1); ratio: with / empty\n", h.Events)
	fmt.Fprintf(w, "  written in %.0fs, VACUUM ANALYZE %.0fs\n", h.FillS, h.VacuumS)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "phase\trate/s\tempty\tratio\tp99 ms\tempty\tratio\town CPU ms/ev\tempty\tratio\t\n")
	for _, c := range h.Compare {
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.2f\t%.1f\t%.1f\t%.2f\t%.2f\t%.2f\t%.2f\t\n", c.Phase,
			c.Rate.Hookrelay, c.Rate.Bare, c.Rate.Ratio, c.P99.Hookrelay, c.P99.Bare, c.P99.Ratio,
			c.OwnCPU.Hookrelay, c.OwnCPU.Bare, c.OwnCPU.Ratio)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if p := h.Purge; p != nil {
		fmt.Fprintf(w, "  purge --older-than %s (the oldest day): %.1fs; events+deliveries+attempts %.0f MB before, %.0f MB after VACUUM\n",
			p.OlderThan, p.Seconds, p.SizeBeforeMB, p.SizeAfterMB)
		fmt.Fprintf(w, "  purge said: %s\n", p.Output)
	}
	return nil
}
