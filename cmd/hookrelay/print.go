package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/webhook"
)

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// shownOf is the last line of a listing that stopped at its limit.
func shownOf(shown int, total int64) string {
	return fmt.Sprintf("%d of %d shown (--limit N for more)", shown, total)
}

func printDeadLetters(w io.Writer, list *ops.DeadLetterList) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "EVENT\tSTATE\tSOURCE\tTYPE\tATTEMPTS\tLAST STATUS\tLAST ERROR\tLAST ATTEMPT\tREASON")
	for _, d := range list.Items {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", orDash(d.EventID), d.State, orDash(d.Source), orDash(d.EventType), d.Attempts,
			ops.StatusText(d.LastStatus),
			orDash(d.LastError), toSeconds(d.LastAttemptAt), orDash(d.Reason))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var err error
	switch {
	case list.State != "" && list.Read < list.Total:
		_, err = fmt.Fprintf(w, "%d %s shown, found in the first %d of %d dead letter(s) in %s (--limit N for more)\n",
			list.Shown, list.State, list.Read, list.Total, list.Queue)
	case list.State != "":
		_, err = fmt.Fprintf(w, "%d of %d dead letter(s) in %s are %s\n", list.Shown, list.Total, list.Queue, list.State)
	case list.Shown < list.Total:
		_, err = fmt.Fprintf(w, "%s\n", shownOf(list.Shown, int64(list.Total)))
	default:
		_, err = fmt.Fprintf(w, "%d dead letter(s) in %s\n", list.Total, list.Queue)
	}
	return err
}

func printEvents(w io.Writer, list *ops.EventList) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tRECEIVED\tSOURCE\tTYPE\tKEY\tDELIVERIES")
	for _, e := range list.Items {
		var ds []string
		for _, d := range e.Deliveries {
			ds = append(ds, fmt.Sprintf("%s:%s(%d)", d.Route, d.State, d.Attempts))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.ID, e.ReceivedAt.UTC().Format(time.RFC3339), e.Source, e.EventType, e.IdempotencyKey, strings.Join(ds, " "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var err error
	switch {
	case list.TotalAtLeast:
		_, err = fmt.Fprintf(w, "%d of more than %d shown (--limit N for more)\n", list.Shown, list.Total)
	case int64(list.Shown) < list.Total:
		_, err = fmt.Fprintln(w, shownOf(list.Shown, list.Total))
	default:
		_, err = fmt.Fprintf(w, "%d event(s)\n", list.Total)
	}
	if err == nil && list.Search != nil {
		err = printSearch(w, list.Search)
	}
	return err
}

// printSearch says what a search over the body read.
func printSearch(w io.Writer, s *ops.SearchInfo) error {
	window := "since " + s.Since.Format(time.RFC3339)
	if s.Until != nil {
		window += ", until " + s.Until.Format(time.RFC3339)
	}
	if s.DefaultWindow {
		window = "the last 24h (no --since given: " + window + ")"
	}
	how := "through the index"
	if !s.Indexed {
		how = "reading every body of the window (compare a body field with a constant to use the index)"
	}
	_, err := fmt.Fprintf(w, "searched %s, %s\n", window, how)
	return err
}

func printEvent(w io.Writer, ev *ops.EventDetail) error {
	fmt.Fprintf(w, "event      %s\nsource     %s\ntype       %s\nkey        %s\nreceived   %s\nbody       %s\n",
		ev.ID, ev.Source, ev.EventType, ev.IdempotencyKey, ev.ReceivedAt.UTC().Format(time.RFC3339), snippet(ev.Body, 200))
	if ev.Purged {
		fmt.Fprintln(w, "           (purged: body and headers no longer stored)")
	}
	if ev.OrderingResource != "" {
		fmt.Fprintf(w, "ordering   resource %s, version %s\n", ev.OrderingResource, ev.OrderingVersion)
	}
	if ev.TraceID != "" {
		fmt.Fprintf(w, "trace      %s\n", withLink(ev.TraceID, ev.TraceLink))
	}
	for _, d := range ev.Deliveries {
		fmt.Fprintf(w, "\nroute %s: %s after %d attempt(s)%s\n", d.Route, d.State, d.Attempts, seriesNote(d))
		if d.NextAttemptAt != nil {
			fmt.Fprintf(w, "  next attempt %d of series %d due %s (%s); hookrelay retry --event %s --route %s to attempt it now\n",
				d.NextAttempt, d.Series, d.NextAttemptAt.UTC().Format(time.RFC3339), fromNow(*d.NextAttemptAt), ev.ID, d.Route)
		}
		if d.State == string(webhook.StateStale) {
			fmt.Fprintf(w, "  not sent: a newer version of resource %s was delivered on this route (ordering drop_stale); hookrelay replay --event %s --route %s --include-stale sends it\n",
				ev.OrderingResource, ev.ID, d.Route)
		}
		if d.Unserved && d.State != string(webhook.StateDelivered) {
			more := ""
			if d.State == string(webhook.StatePending) || d.State == string(webhook.StateRetrying) {
				more = " (it will not clear: purge removes it once older than --older-than)"
			}
			fmt.Fprintf(w, "  %s%s\n", ops.UnservedReason(d.Route), more)
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  SERIES\t#\tSTARTED\tDURATION\tSTATUS\tOUTCOME\tERROR\tRESPONSE")
		for _, a := range d.AttemptRows {
			errText := ""
			if a.Error != nil {
				errText = *a.Error
			}
			fmt.Fprintf(tw, "  %d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", a.Series, a.Attempt, a.StartedAt.UTC().Format(time.RFC3339),
				ops.DurationText(a.DurationMS), ops.StatusText(a.Status), a.Outcome, errText, snippet(a.ResponseBody, 80))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		// A replay's attempts are in a trace of their own.
		for _, a := range d.AttemptRows {
			if a.TraceID != "" && a.TraceID != ev.TraceID {
				fmt.Fprintf(w, "  series %d attempt %d: trace %s\n", a.Series, a.Attempt, withLink(a.TraceID, a.TraceLink))
			}
		}
	}
	return nil
}

// withLink is a trace id followed by its link, when there is one.
func withLink(id, link string) string {
	if link == "" {
		return id
	}
	return id + "  " + link
}

func printReplay(w io.Writer, res *ops.ReplayResult, list int) error {
	verb := "replayed"
	if res.DryRun {
		verb = "would replay"
	}
	if list > 0 && len(res.Replayed)+len(res.Skipped) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "EVENT\tRECEIVED\tROUTE\tWAS\tRESULT")
		for _, it := range res.Replayed {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", it.EventID, it.ReceivedAt.UTC().Format(time.RFC3339), it.Route, orDash(it.State), verb)
		}
		for _, it := range res.Skipped {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\tskipped: %s\n", it.EventID, it.ReceivedAt.UTC().Format(time.RFC3339), it.Route, orDash(it.State), it.Skipped)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if len(res.Replayed) < res.ReplayedCount || len(res.Skipped) < res.SkippedCount {
			fmt.Fprintf(w, "listed %d of %d replayed and %d of %d skipped (--list N for more)\n",
				len(res.Replayed), res.ReplayedCount, len(res.Skipped), res.SkippedCount)
		}
	}
	delivered := ""
	if !res.DryRun && res.ReplayedCount > 0 {
		delivered = fmt.Sprintf(" (%d delivered so far)", res.Delivered)
	}
	_, err := fmt.Fprintf(w, "%s %d pair(s)%s, skipped %d, of %d event(s)\n", verb, res.ReplayedCount, delivered, res.SkippedCount, res.Events)
	if err == nil && res.NextAfter != "" {
		_, err = fmt.Fprintf(w, "--limit stopped the selection and more events match: add --after %s to go on\n", res.NextAfter)
	}
	return err
}

// seriesNote says, for a delivery with attempts, how many series they
// span and where the last one stands: "; the last was attempt 1 of series
// 2".
func seriesNote(d ops.DeliveryDetail) string {
	if len(d.AttemptRows) == 0 {
		return ""
	}
	series := map[int]bool{}
	for _, a := range d.AttemptRows {
		series[a.Series] = true
	}
	in := ""
	if len(series) > 1 {
		in = fmt.Sprintf(" in %d series", len(series))
	}
	last := d.AttemptRows[len(d.AttemptRows)-1]
	return fmt.Sprintf("%s; the last was attempt %d of series %d", in, last.Attempt, last.Series)
}

// fromNow says how far t is from now, to the second: "in 2h59m59s", or
// "overdue by 3s".
func fromNow(t time.Time) string {
	d := time.Until(t).Round(time.Second)
	if d < 0 {
		return "overdue by " + config.FormatDuration(-d)
	}
	return "in " + config.FormatDuration(d)
}

// toSeconds writes an RFC 3339 time (as dead letters carry it, to the
// nanosecond) to the second in UTC, like every other listing; anything
// else as it is.
func toSeconds(s string) string {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return orDash(s)
	}
	return t.UTC().Format(time.RFC3339)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// snippet shortens s to n runes on one line.
func snippet(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
