package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/spf13/cobra"
)

func (c *cli) replayCmd() *cobra.Command {
	var (
		f                filter
		asJSON           bool
		event            string
		includeDelivered bool
		includeStale     bool
		ignoreFilter     bool
		dryRun           bool
		batch, list      int
		stall            string
		after            string
	)
	cmd := &cobra.Command{
		Use:   "replay (--event ID | filters)",
		Short: "Deliver events again, through the outbox, as a new attempt series",
		Long: `Put (event, route) pairs back through the outbox, straight to the route's
queue, as a new attempt series: the destination sees the same webhook-id.
Pairs already delivered are skipped unless --include-delivered, and stale
pairs (a newer version of the resource was delivered on a route with ordering
drop_stale) unless --include-stale, which sends them without that check;
every other pair replayed to such a route is checked again. Pairs
pending or retrying are in flight and skipped (see hookrelay retry to
attempt a retrying pair now). Without --route, an event is replayed to every
route its routing key is bound to now. On a route with a filter, an event that
has no pair there (the filter did not take it) is replayed only when the
filter takes it now, unless --ignore-filter; a pair that exists is replayed
whatever the filter says.

A replay of a filter is paced: it enqueues a batch, waits until the
dispatchers took most of it, and sizes the next to about a second of their
work, so live events never wait behind more than a batch. Progress goes to
stderr: a bar on a terminal, a line every two seconds otherwise.`,
		Example: `  hookrelay replay --since 2026-11-27T14:00:00Z --until 2026-11-27T16:00:00Z --route billing --dry-run
  hookrelay replay --event 01a229c8-bab8-7a6b-bf48-19685687e687`,
		Args: setup.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sf, err := f.filter(cmd)
			if err != nil {
				return err
			}
			stallTimeout, err := config.ParseDuration(stall)
			if err != nil || stallTimeout <= 0 {
				return setup.Usagef(cmd, "--stall-timeout: want a duration like 2m")
			}
			if batch < 1 || list < 0 {
				return setup.Usagef(cmd, "--batch must be positive, --list at least 0")
			}
			req := ops.ReplayRequest{
				Filter: sf, IncludeDelivered: includeDelivered, IncludeStale: includeStale, IgnoreFilter: ignoreFilter, DryRun: dryRun,
				After: after, MaxBatch: batch, StallTimeout: stallTimeout, ListLimit: max(list, 1),
			}
			if event != "" {
				if req.EventID, err = uuid.Parse(event); err != nil {
					return setup.Usagef(cmd, "--event: invalid event id %q", event)
				}
			} else if sf == (ops.EventFilter{}) {
				return setup.Usagef(cmd, "refusing to replay everything: give --event or a filter")
			}
			p := c.progress("replay", "event(s) scanned")
			req.ProgressFunc = func(rp ops.ReplayProgress) {
				detail := fmt.Sprintf("%d pair(s) enqueued, %d delivered so far, %d skipped (batch %d)",
					rp.Enqueued, rp.Delivered, rp.Skipped, rp.Batch)
				if req.DryRun {
					detail = fmt.Sprintf("%d pair(s) would be enqueued, %d skipped (nothing changed)", rp.Enqueued, rp.Skipped)
				}
				p.update(int64(rp.Scanned), rp.Events, detail)
			}
			var res *ops.ReplayResult
			err = c.operate(cmd, func(_ *config.Config, svc *ops.Service) (err error) {
				res, err = svc.Replay(cmd.Context(), req)
				return err
			}, func(r *remote) (err error) {
				if after != "" {
					return setup.Usagef(cmd, "--after: a replay through the admin API runs as one job whatever its size; --after is for the direct mode")
				}
				res, err = r.replay(cmd.Context(), req, f)
				return err
			})
			p.done()
			if errors.Is(err, ops.ErrInvalidRequest) || errors.Is(err, ops.ErrUnknownRoute) {
				return setup.Usagef(cmd, "%v", err)
			}
			if err != nil {
				if res != nil {
					fmt.Fprintf(c.errOut, "replay: stopped after %d pair(s) enqueued, %d skipped, %d delivered so far\n",
						res.ReplayedCount, res.SkippedCount, res.Delivered)
				}
				return err
			}
			if asJSON {
				return printJSON(c.out, res)
			}
			return printReplay(c.out, res, list)
		},
	}
	f.flags(cmd.Flags(), 0, "most events to select (0: all); a replay that stops at it prints the --after to go on with")
	fl := cmd.Flags()
	fl.StringVar(&event, "event", "", "replay this one event (to its routes, or to --route)")
	fl.BoolVar(&includeDelivered, "include-delivered", false, "replay pairs already delivered too")
	fl.BoolVar(&includeStale, "include-stale", false, "replay stale pairs too, sent even though a newer version was delivered")
	fl.BoolVar(&ignoreFilter, "ignore-filter", false, "replay to a route with a filter even an event its filter does not take now (without: an event that has no pair there goes only if the filter takes it; a pair that exists goes whatever the filter says)")
	fl.BoolVar(&dryRun, "dry-run", false, "list what would be replayed; change nothing")
	fl.IntVar(&batch, "batch", ops.DefaultReplayBatch, "most pairs per transaction")
	fl.StringVar(&stall, "stall-timeout", config.FormatDuration(ops.DefaultReplayStall), "give up when a batch makes no progress for this long")
	fl.IntVar(&list, "list", ops.DefaultListLimit, "most pairs to list of each kind (replayed, skipped); the counts cover all")
	fl.StringVar(&after, "after", "", "go on after where a replay stopped at --limit (the cursor it printed)")
	fl.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// progressEvery is how often progress is printed as a line when stderr is
// not a terminal.
const progressEvery = 2 * time.Second
