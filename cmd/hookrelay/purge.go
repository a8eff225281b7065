package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/spf13/cobra"
)

// minPurgeAge is the youngest --older-than purge accepts without --force:
// "1m" is one minute, not a month, and purging events that young deletes
// what senders may still resend and operators still look at.
const minPurgeAge = time.Hour

func (c *cli) purgeCmd() *cobra.Command {
	var (
		olderThan                string
		batch                    int
		includeDead, dryRun, yes bool
		force                    bool
	)
	cmd := &cobra.Command{
		Use:   "purge --older-than AGE",
		Short: "Delete old delivered events, keeping their dedupe keys for retention.dedupe_window",
		Long: `Delete the events older than AGE with their deliveries and attempts. A day
older than AGE with nothing undelivered goes whole (its partitions are
dropped, at once whatever their size); the rest goes in batches. Each
event's dedupe key stays until retention.dedupe_window has passed, so a late
resend is still recognised. Whatever is undelivered is kept whole: an event
with anything in the outbox, pending or retrying on a configured route, or
dead (unless --include-dead).

AGE is a duration with a unit: 30d (days), 720h, 90m. An age under 1h is
refused without --force. --dry-run counts what a purge would delete and
changes nothing. Otherwise purge asks before it deletes when a person is at
the terminal; give --yes to skip the question (from cron, say: without a
terminal and without --yes it refuses). Progress goes to stderr.`,
		Example: `  hookrelay purge --older-than 30d --dry-run
  hookrelay purge --older-than 30d --yes`,
		Args: setup.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			age, err := config.ParseDuration(olderThan)
			if err != nil || age <= 0 {
				return setup.Usagef(cmd, "--older-than %q: want an age with a unit, like 30d (days), 720h or 90m", olderThan)
			}
			if age < minPurgeAge && !force {
				return setup.Usagef(cmd, "--older-than %s is %s, under %s: purging events that young deletes what senders may still resend; "+
					"write days as 30d, or add --force if you mean it", olderThan, describeAge(age), config.FormatDuration(minPurgeAge))
			}
			if batch < 1 {
				return setup.Usagef(cmd, "--batch must be positive")
			}
			run := func(kept string, purge func(ops.PurgeRequest) (ops.PurgeResult, error)) error {
				req := ops.PurgeRequest{OlderThan: age, Batch: batch, IncludeDead: includeDead, DryRun: true}
				// The count is for the question (and the dry run): with
				// --yes nobody reads it, and counting a day of millions of
				// events takes longer than dropping it.
				var plan ops.PurgeResult
				if dryRun || !yes {
					var err error
					if plan, err = purge(req); err != nil {
						return err
					}
					if dryRun {
						return printPurge(c.out, "would purge", plan, olderThan, kept, includeDead)
					}
					if plan.Deliveries == 0 && plan.Events == 0 && plan.Keys == 0 {
						return printPurge(c.out, "purged", plan, olderThan, kept, includeDead)
					}
					if err := c.confirmPurge(cmd, plan, olderThan); err != nil {
						return err
					}
				}
				p := c.progress("purge", "event(s)")
				req.DryRun = false
				req.ProgressFunc = func(r ops.PurgeResult) {
					p.update(r.Events, max(plan.Events, r.Events),
						fmt.Sprintf("%d deliveries deleted, %d days dropped, batch %d", r.Deliveries, r.Days, r.Batches))
				}
				res, err := purge(req)
				p.done()
				if err != nil {
					if res.Batches > 0 {
						fmt.Fprintf(c.errOut, "purge: stopped after %d batch(es): %d deliveries, %d events deleted (%d days whole)\n",
							res.Batches, res.Deliveries, res.Events, res.Days)
					}
					return err
				}
				return printPurge(c.out, "purged", res, olderThan, kept, includeDead)
			}
			return c.operate(cmd, func(cfg *config.Config, svc *ops.Service) error {
				return run(config.FormatDuration(cfg.Retention.DedupeWindow), func(req ops.PurgeRequest) (ops.PurgeResult, error) {
					return svc.Purge(cmd.Context(), req)
				})
			}, func(r *remote) error {
				return run("retention.dedupe_window", func(req ops.PurgeRequest) (ops.PurgeResult, error) {
					res, err := r.purge(cmd.Context(), olderThan, req.IncludeDead, req.DryRun, func(p ops.PurgeResult) {
						if req.ProgressFunc != nil {
							req.ProgressFunc(p)
						}
					})
					if res == nil {
						return ops.PurgeResult{}, err
					}
					return *res, err
				})
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&olderThan, "older-than", "", "purge events received longer ago than this: 30d, 720h (required)")
	fl.IntVar(&batch, "batch", 1000, "events per transaction")
	fl.BoolVar(&includeDead, "include-dead", false, "purge events with dead pairs too (their dead letters then park as event_missing)")
	fl.BoolVar(&dryRun, "dry-run", false, "count what would be purged; change nothing")
	fl.BoolVar(&yes, "yes", false, "purge without asking")
	fl.BoolVar(&force, "force", false, "accept an --older-than under 1h")
	_ = cmd.MarkFlagRequired("older-than") // the flag is declared just above
	return cmd
}

// describeAge says how long age is in words, so "1m" reads as what it is.
func describeAge(age time.Duration) string {
	switch {
	case age%time.Hour == 0:
		return plural(int64(age/time.Hour), "hour")
	case age%time.Minute == 0:
		return plural(int64(age/time.Minute), "minute")
	}
	return plural(int64(age/time.Second), "second")
}

func plural(n int64, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}

// errNotConfirmed ends a purge the operator did not confirm.
var errNotConfirmed = errors.New("not confirmed; nothing purged")

// confirmPurge asks the person at the terminal whether to purge what plan
// counts. Without a terminal nobody can answer: it refuses unless --yes.
func (c *cli) confirmPurge(cmd *cobra.Command, plan ops.PurgeResult, olderThan string) error {
	if !c.inTerminal {
		return setup.Usagef(cmd, "refusing to purge %d deliveries and %d events without --yes: standard input is not a terminal, so nobody can confirm (--dry-run shows what would go)",
			plan.Deliveries, plan.Events)
	}
	fmt.Fprintf(c.errOut, "purge %d deliveries (with their attempts) and %d events received more than %s ago? [y/N] ",
		plan.Deliveries, plan.Events, olderThan)
	answer, err := bufio.NewReader(c.in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("reading the answer: %w", err)
	}
	switch strings.ToLower(strings.TrimSpace(answer)) {
	case "y", "yes":
		return nil
	}
	return errNotConfirmed
}

func printPurge(w io.Writer, verb string, res ops.PurgeResult, olderThan, kept string, includeDead bool) error {
	fmt.Fprintf(w, "%s: %d deliveries (with their attempts), %d events deleted (%d days dropped whole, the rest in %d batches); %d dedupe keys older than %s deleted\n",
		verb, res.Deliveries, res.Events, res.Days, res.Batches, res.Keys, kept)
	if res.Versions > 0 {
		fmt.Fprintf(w, "forgot: %d resource versions whose resource has no event left whole\n", res.Versions)
	}
	if res.Abandoned > 0 {
		abandon := "abandoned"
		if strings.HasPrefix(verb, "would") {
			abandon = "would abandon"
		}
		fmt.Fprintf(w, "%s: %d pending or retrying deliveries to routes neither in the config nor made at run time (no dispatcher delivers them)\n", abandon, res.Abandoned)
	}
	if res.KeptUndelivered > 0 {
		hint := ""
		if !includeDead {
			hint = "; --include-dead to purge dead ones too"
		}
		fmt.Fprintf(w, "kept: %d events older than %s with something undelivered (in flight or dead%s)\n", res.KeptUndelivered, olderThan, hint)
	}
	return nil
}
