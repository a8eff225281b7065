package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/spf13/cobra"
)

func (c *cli) retryCmd() *cobra.Command {
	var (
		event, route, state, stall string
		dryRun, asJSON             bool
		batch, list                int
		query                      ops.FilterFields
	)
	cmd := &cobra.Command{
		Use:   "retry (--event ID [--route R] | --route R --state retrying)",
		Short: "Attempt retrying deliveries now instead of when their retry tier gives them back",
		Long: `Bring forward the next attempt of retrying (event, route) pairs: a copy due
now goes through the outbox to the route's queue as the attempt the pair was
waiting for (same series, next number, so max_attempts counts as before).
The copy still waiting in its retry tier is dropped when it comes back
(counted as hookrelay_deliveries_total{outcome="superseded"}), so the
destination gets the attempt once.

Use it when a destination is back before its pairs' next attempts: after
five failures, the next one waits an hour or more. Pairs that are not
retrying are skipped, saying why: pending ones are queued already, dead ones
are for replay or dead requeue. A route's pairs go in batches, each waited
for before the next (as a replay), with progress on stderr.`,
		Example: `  hookrelay retry --event 01a229c8-bab8-7a6b-bf48-19685687e687
  hookrelay retry --route billing --state retrying --dry-run
  hookrelay retry --route billing --state retrying --where 'body.data.object.customer == "cus_Q8x"' --since 3d`,
		Args: setup.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := ops.RetryRequest{Route: route, State: state, DryRun: dryRun, ListLimit: max(list, 1), MaxBatch: batch}
			if event != "" {
				id, err := uuid.Parse(event)
				if err != nil {
					return setup.Usagef(cmd, "--event: invalid event id %q", event)
				}
				req.EventID = id
			} else if route == "" || state != string(webhook.StateRetrying) {
				return setup.Usagef(cmd, "give --event ID, or --route R --state retrying (only retrying pairs have a next attempt to bring forward)")
			}
			if query.Where != "" || query.Since != "" || query.Until != "" {
				q, err := query.Parse()
				if err != nil {
					return setup.Usagef(cmd, "--%s", strings.TrimPrefix(err.Error(), ops.ErrInvalidRequest.Error()+": "))
				}
				if q.Search == nil || event != "" {
					return setup.Usagef(cmd, "--where: a retry by query takes --route R --state retrying and --where (--since and --until narrow it)")
				}
				req.Query = q
			}
			stallTimeout, err := config.ParseDuration(stall)
			if err != nil || stallTimeout <= 0 {
				return setup.Usagef(cmd, "--stall-timeout: want a duration like 2m")
			}
			if batch < 1 || list < 0 {
				return setup.Usagef(cmd, "--batch must be positive, --list at least 0")
			}
			req.StallTimeout = stallTimeout
			var res *ops.RetryResult
			p := c.progress("retry", "pair(s)")
			req.ProgressFunc = func(rp ops.RetryProgress) {
				p.update(int64(rp.Retried), int64(rp.Total), fmt.Sprintf("%d of the last batch not attempted yet", rp.Waiting))
			}
			err = c.operate(cmd, func(_ *config.Config, svc *ops.Service) (err error) {
				res, err = svc.Retry(cmd.Context(), req)
				return err
			}, func(r *remote) (err error) {
				res, err = r.retry(cmd.Context(), req, query)
				return err
			})
			p.done()
			switch {
			case errors.Is(err, ops.ErrNotFound):
				return fmt.Errorf("no event %s", req.EventID)
			case errors.Is(err, ops.ErrInvalidRequest), errors.Is(err, ops.ErrUnknownRoute):
				return setup.Usagef(cmd, "%v", err)
			case err != nil:
				if res != nil && res.RetriedCount > 0 {
					fmt.Fprintf(c.errOut, "retry: stopped after %d pair(s) retried\n", res.RetriedCount)
				}
				return err
			}
			if asJSON {
				return printJSON(c.out, res)
			}
			return printRetry(c.out, res, list)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&event, "event", "", "retry this event's retrying pairs (to --route only, if given)")
	fl.StringVar(&route, "route", "", "the route whose pairs to retry")
	fl.StringVar(&state, "state", "", "with --route and no --event: retrying (the pairs it selects)")
	fl.BoolVar(&dryRun, "dry-run", false, "count what would be retried; change nothing")
	fl.StringVar(&query.Where, "where", "", "with --route: only the retrying pairs of the events this expression takes (as events list --where; at most 1000 events)")
	fl.StringVar(&query.Since, "since", "", "with --where: events received at or after this time or age (default: the last 24h)")
	fl.StringVar(&query.Until, "until", "", "with --where: events received before this time or age")
	fl.IntVar(&batch, "batch", ops.DefaultRetryBatch, "most pairs per transaction")
	fl.StringVar(&stall, "stall-timeout", config.FormatDuration(ops.DefaultReplayStall), "give up when a batch is not attempted for this long")
	fl.IntVar(&list, "list", ops.DefaultListLimit, "most pairs to list of each kind (retried, skipped); the counts cover all")
	fl.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printRetry(w io.Writer, res *ops.RetryResult, list int) error {
	verb := "retried"
	if res.DryRun {
		verb = "would retry"
	}
	if list > 0 && len(res.Retried)+len(res.Skipped) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "EVENT\tROUTE\tWAS\tRESULT")
		for _, it := range res.Retried {
			due := ""
			if it.WasDue != nil {
				due = fmt.Sprintf(", was due %s", it.WasDue.UTC().Format(time.RFC3339))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s now: attempt %d of series %d%s\n", it.EventID, it.Route, it.State, verb, it.Attempt, it.Series, due)
		}
		for _, it := range res.Skipped {
			fmt.Fprintf(tw, "%s\t%s\t%s\tskipped: %s\n", it.EventID, it.Route, orDash(it.State), it.Skipped)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if len(res.Retried) < res.RetriedCount || len(res.Skipped) < res.SkippedCount {
			fmt.Fprintf(w, "listed %d of %d retried and %d of %d skipped (--list N for more)\n",
				len(res.Retried), res.RetriedCount, len(res.Skipped), res.SkippedCount)
		}
	}
	_, err := fmt.Fprintf(w, "%s %d pair(s) now, skipped %d\n", verb, res.RetriedCount, res.SkippedCount)
	return err
}
