package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/rs/zerolog"
)

// operator is what the commands that need the database work with.
type operator struct {
	cfg *config.Config
	svc *ops.Service
	// out takes the command's output, progress a long command's progress.
	out, progress io.Writer
}

// operations are the commands that need the database, by name.
var operations = map[string]func(ctx context.Context, o *operator, args []string) error{
	"events list":  eventsList,
	"events show":  eventsShow,
	"replay":       replay,
	"dead list":    deadList,
	"dead requeue": deadRequeue,
	"purge":        purge,
}

// operate runs the commands that need the database.
func operate(ctx context.Context, cfg *config.Config, args []string, out, progress io.Writer) error {
	db, err := store.Open(ctx, store.Config{URL: cfg.Database.URL, MaxConns: cfg.Database.MaxConns, ApplicationName: "hookrelay-cli"})
	if err != nil {
		return err
	}
	defer db.Close()
	if err := db.RequireSchema(ctx); err != nil {
		return err
	}
	dialer, err := setup.Dialer(cfg, nil, zerolog.Nop())
	if err != nil {
		return err
	}
	cmd := args[0]
	if len(args) > 1 && !strings.HasPrefix(args[1], "-") {
		cmd += " " + args[1]
		args = args[2:]
	} else {
		args = args[1:]
	}
	op, ok := operations[cmd]
	if !ok {
		return usageError{fmt.Sprintf("unknown command %q", cmd)}
	}
	return op(ctx, &operator{cfg: cfg, svc: setup.Ops(cfg, db, dialer), out: out, progress: progress}, args)
}

func eventsList(ctx context.Context, o *operator, args []string) error {
	fs, f, asJSON := filterFlags("events list")
	if err := parse(fs, args); err != nil {
		return err
	}
	filter, err := f()
	if err != nil {
		return usageError{err.Error()}
	}
	list, err := o.svc.EventList(ctx, filter)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(o.out, list)
	}
	return printEvents(o.out, list)
}

func eventsShow(ctx context.Context, o *operator, args []string) error {
	fs := flag.NewFlagSet("events show", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError{"events show needs one event id"}
	}
	id, err := uuid.Parse(fs.Arg(0))
	if err != nil {
		return usageError{"invalid event id"}
	}
	ev, err := o.svc.EventShow(ctx, id)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(o.out, ev)
	}
	return printEvent(o.out, ev)
}

func replay(ctx context.Context, o *operator, args []string) error {
	fs, f, asJSON := filterFlags("replay")
	event := fs.String("event", "", "replay one event by id")
	includeDelivered := fs.Bool("include-delivered", false, "replay pairs already delivered too")
	dryRun := fs.Bool("dry-run", false, "print what would be replayed, change nothing")
	batch := fs.Int("batch", ops.DefaultReplayBatch, "most pairs per transaction")
	stall := fs.String("stall-timeout", ops.DefaultReplayStall.String(), "give up when a batch makes no progress for this long")
	list := fs.Int("list", ops.DefaultListLimit, "most pairs to list of each kind (replayed, skipped)")
	after := fs.String("after", "", "go on after where a replay stopped at --limit (the cursor it printed)")
	if err := parse(fs, args); err != nil {
		return err
	}
	filter, err := f()
	if err != nil {
		return usageError{err.Error()}
	}
	stallTimeout, err := config.ParseDuration(*stall)
	if err != nil || stallTimeout <= 0 {
		return usageError{"--stall-timeout: want a duration like 2m"}
	}
	if *batch < 1 || *list < 0 {
		return usageError{"--batch and --list must be positive"}
	}
	req := ops.ReplayRequest{
		Filter: filter, IncludeDelivered: *includeDelivered, DryRun: *dryRun,
		After: *after, MaxBatch: *batch, StallTimeout: stallTimeout, ListLimit: max(*list, 1),
		ProgressFunc: progressPrinter(o.progress, 2*time.Second),
	}
	if *event != "" {
		if req.EventID, err = uuid.Parse(*event); err != nil {
			return usageError{"--event: invalid event id"}
		}
	} else if filter == (store.EventFilter{}) {
		return usageError{"refusing to replay everything: give --event or a filter"}
	}
	res, err := o.svc.Replay(ctx, req)
	if errors.Is(err, ops.ErrInvalidRequest) {
		return usageError{err.Error()}
	}
	if err != nil {
		if res != nil {
			fmt.Fprintf(o.progress, "replay: stopped after %d pair(s) enqueued, %d skipped, %d delivered so far\n",
				res.ReplayedCount, res.SkippedCount, res.Delivered)
		}
		return err
	}
	if *asJSON {
		return printJSON(o.out, res)
	}
	return printReplay(o.out, res, *list)
}

func deadList(ctx context.Context, o *operator, args []string) error {
	fs := flag.NewFlagSet("dead list", flag.ContinueOnError)
	route := fs.String("route", "", "route (required)")
	limit := fs.Int("limit", ops.DefaultListLimit, "most messages to show")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	list, err := o.svc.DeadList(ctx, *route, *limit)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(o.out, list)
	}
	return printDeadLetters(o.out, list)
}

func deadRequeue(ctx context.Context, o *operator, args []string) error {
	fs := flag.NewFlagSet("dead requeue", flag.ContinueOnError)
	route := fs.String("route", "", "route (required)")
	limit := fs.Int("limit", 0, "most messages to move (0: all)")
	if err := parse(fs, args); err != nil {
		return err
	}
	n, err := o.svc.DeadRequeue(ctx, *route, *limit)
	names := setup.Names(o.cfg)
	fmt.Fprintf(o.out, "requeued %d message(s) from %s to %s\n", n, names.DeadQueue(*route), names.RouteQueue(*route))
	return err
}

func purge(ctx context.Context, o *operator, args []string) error {
	fs := flag.NewFlagSet("purge", flag.ContinueOnError)
	olderThan := fs.String("older-than", "", "age, e.g. 30d or 720h (required)")
	batch := fs.Int("batch", 1000, "events per transaction")
	includeDead := fs.Bool("include-dead", false, "purge events with dead pairs too (their dead letters then park as event_missing)")
	if err := parse(fs, args); err != nil {
		return err
	}
	age, err := config.ParseDuration(*olderThan)
	if err != nil || age <= 0 {
		return usageError{"--older-than: want an age like 30d or 720h"}
	}
	res, err := o.svc.Purge(ctx, ops.PurgeRequest{OlderThan: age, Batch: *batch, IncludeDead: *includeDead})
	if err != nil {
		return err
	}
	fmt.Fprintf(o.out, "purged: %d deliveries (with their attempts), %d events deleted, %d events stripped to their dedupe key (kept %s), in %d batches\n",
		res.Deliveries, res.Events, res.Stripped, o.cfg.Retention.DedupeWindow, res.Batches)
	if res.Abandoned > 0 {
		fmt.Fprintf(o.out, "abandoned: %d pending or retrying deliveries to routes not in the config (no dispatcher delivers them)\n", res.Abandoned)
	}
	if res.KeptUndelivered > 0 {
		hint := ""
		if !*includeDead {
			hint = "; --include-dead to purge dead ones too"
		}
		fmt.Fprintf(o.out, "kept: %d events older than %s with something undelivered (in flight or dead%s)\n", res.KeptUndelivered, *olderThan, hint)
	}
	return nil
}

func parse(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return usageError{fs.Name() + ": " + err.Error()}
	}
	return nil
}

// filterFlags declares the event filter flags; the returned function reads
// them after parsing, with the admin API's rules.
func filterFlags(name string) (*flag.FlagSet, func() (store.EventFilter, error), *bool) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	q := map[string]*string{}
	for _, k := range []string{"source", "event-type", "state", "route", "since", "until", "limit"} {
		q[k] = fs.String(k, "", k)
	}
	asJSON := fs.Bool("json", false, "print JSON")
	return fs, func() (store.EventFilter, error) {
		v := url.Values{}
		for k, p := range q {
			if *p != "" {
				v.Set(strings.ReplaceAll(k, "-", "_"), *p)
			}
		}
		return ops.FilterFromQuery(v)
	}, asJSON
}

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
	fmt.Fprintln(tw, "EVENT\tSOURCE\tTYPE\tATTEMPTS\tLAST STATUS\tLAST ERROR\tLAST ATTEMPT\tREASON")
	for _, d := range list.Items {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", d.EventID, d.Source, d.EventType, d.Attempts, d.LastStatus, d.LastError, d.LastAttemptAt, d.Reason)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var err error
	if list.Shown < list.Total {
		_, err = fmt.Fprintf(w, "%s\n", shownOf(list.Shown, int64(list.Total)))
	} else {
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
	if int64(list.Shown) < list.Total {
		_, err = fmt.Fprintln(w, shownOf(list.Shown, list.Total))
	} else {
		_, err = fmt.Fprintf(w, "%d event(s)\n", list.Total)
	}
	return err
}

func printEvent(w io.Writer, ev *ops.EventDetail) error {
	fmt.Fprintf(w, "event      %s\nsource     %s\ntype       %s\nkey        %s\nreceived   %s\nbody       %s\n",
		ev.ID, ev.Source, ev.EventType, ev.IdempotencyKey, ev.ReceivedAt.UTC().Format(time.RFC3339Nano), snippet(ev.Body, 200))
	if ev.Purged {
		fmt.Fprintln(w, "           (purged: body and headers no longer stored)")
	}
	for _, d := range ev.Deliveries {
		fmt.Fprintf(w, "\nroute %s: %s after %d attempt(s)\n", d.Route, d.State, d.Attempts)
		if d.Unserved && d.State != string(webhook.StateDelivered) {
			more := ""
			if d.State == string(webhook.StatePending) || d.State == string(webhook.StateRetrying) {
				more = " (it will not clear: purge removes it once older than --older-than)"
			}
			fmt.Fprintf(w, "  %s%s\n", ops.UnservedReason(d.Route), more)
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  #\tSTARTED\tDURATION\tSTATUS\tOUTCOME\tERROR\tRESPONSE")
		for _, a := range d.AttemptRows {
			status := "-"
			if a.Status != nil {
				status = strconv.Itoa(*a.Status)
			}
			errText := ""
			if a.Error != nil {
				errText = *a.Error
			}
			fmt.Fprintf(tw, "  %d\t%s\t%dms\t%s\t%s\t%s\t%s\n", a.Attempt, a.StartedAt.UTC().Format(time.RFC3339), a.DurationMS, status, a.Outcome, errText, snippet(a.ResponseBody, 80))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// progressPrinter returns a ReplayProgress callback that prints a line to
// w at most every interval.
func progressPrinter(w io.Writer, interval time.Duration) func(ops.ReplayProgress) {
	var last time.Time
	return func(p ops.ReplayProgress) {
		if time.Since(last) < interval {
			return
		}
		last = time.Now()
		fmt.Fprintf(w, "replay: %d of %d event(s) scanned, %d pair(s) enqueued, %d delivered so far, %d skipped (batch %d)\n",
			p.Scanned, p.Events, p.Enqueued, p.Delivered, p.Skipped, p.Batch)
	}
}

func printReplay(w io.Writer, res *ops.ReplayResult, list int) error {
	verb := "replayed"
	if res.DryRun {
		verb = "would replay"
	}
	if list > 0 {
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
