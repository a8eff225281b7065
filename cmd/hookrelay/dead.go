package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/spf13/cobra"
)

func (c *cli) deadCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dead",
		Short: "Read, requeue and drop a route's dead letters",
		Long: `A route's dead letters wait in its dead-letter queue, <prefix>.route.<route>.dead,
with headers that say why: attempts, last status and error, reason.`,
		Args: setup.NoArgs,
		RunE: showHelp,
	}
	cmd.AddCommand(c.deadListCmd(), c.deadRequeueCmd(), c.deadDropCmd())
	return cmd
}

func (c *cli) deadListCmd() *cobra.Command {
	var req ops.DeadListRequest
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list --route ROUTE",
		Short: "Read a route's dead letters, with their pair's state, without consuming them",
		Long: `Read up to --limit messages of the route's dead-letter queue and put them all
back (a dead-letter queue has no delivery limit, so reading is safe). Each
shows the state Postgres holds for its pair: dead, or delivered when a replay
or requeue delivered it since (the letter is stale: dead drop --delivered
removes those), or missing when its event was purged. --state shows one state
only, reading on through the queue to find them. It ends with "12 dead
letter(s) in <queue>", or "100 of 112 shown (--limit N for more)" when the
queue holds more.`,
		Example: `  hookrelay dead list --route billing --limit 10
  hookrelay dead list --route billing --state delivered`,
		Args: setup.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if req.Limit < 1 {
				return setup.Usagef(cmd, "--limit must be positive")
			}
			if req.State != "" && !slices.Contains(ops.DeadLetterStates, req.State) {
				return setup.Usagef(cmd, "--state must be one of %s", strings.Join(ops.DeadLetterStates, ", "))
			}
			var list *ops.DeadLetterList
			err := c.operate(cmd, func(_ *config.Config, svc *ops.Service) (err error) {
				list, err = svc.DeadList(cmd.Context(), req)
				return err
			}, func(r *remote) (err error) {
				list, err = r.deadList(cmd.Context(), req)
				return err
			})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(c.out, list)
			}
			if err := printDeadLetters(c.out, list); err != nil {
				return err
			}
			if list.RouteDeleted {
				_, err = fmt.Fprintf(c.out, "route %s was deleted: its letters can be read and dropped (dead drop --route %s --all), not requeued\n",
					req.Route, req.Route)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&req.Route, "route", "", "the route whose dead letters to read (required)")
	cmd.Flags().IntVar(&req.Limit, "limit", ops.DefaultListLimit, "most messages to show")
	cmd.Flags().StringVar(&req.State, "state", "", "show only letters whose pair is in this state: "+strings.Join(ops.DeadLetterStates, ", "))
	cmd.Flags().BoolVar(&asJSON, "json", false, `print JSON: {"queue", "total", "read", "shown", "items"}`)
	_ = cmd.RegisterFlagCompletionFunc("state", cobra.FixedCompletions(ops.DeadLetterStates, cobra.ShellCompDirectiveNoFileComp)) // declared just above
	_ = cmd.MarkFlagRequired("route")                                                                                             // the flag is declared just above
	return cmd
}

func (c *cli) deadDropCmd() *cobra.Command {
	var route string
	var delivered, all, dryRun, asJSON bool
	cmd := &cobra.Command{
		Use:   "drop --route ROUTE --delivered|--all",
		Short: "Remove the dead letters whose pair has been delivered since, or all of a deleted route's",
		Long: `Remove from the route's dead-letter queue the letters whose pair Postgres holds
as delivered (a replay or requeue delivered them after they were parked), so
the queue and "routes" agree again. Every other letter goes back to the queue.
It reads the messages the queue holds when it starts. --dry-run counts them
and removes nothing.

--all removes every letter of a deleted route (hookrelay routes delete): its
queue is gone, so they cannot be requeued; their pairs stay dead in Postgres
and their events can be replayed to the routes there are. A route there is
keeps its letters: requeue them, or drop the delivered ones.`,
		Example: `  hookrelay dead drop --route billing --delivered --dry-run
  hookrelay dead drop --route ledger --all`,
		Args: setup.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if delivered == all {
				return setup.Usagef(cmd, "say what to drop: --delivered (the letters whose pair is delivered) or --all (a deleted route's)")
			}
			why := " (their pair is delivered)"
			if all {
				why = " (the route was deleted)"
			}
			var res *ops.DeadDropResult
			err := c.operate(cmd, func(_ *config.Config, svc *ops.Service) (err error) {
				drop := svc.DeadDropDelivered
				if all {
					drop = svc.DeadDropAll
				}
				res, err = drop(cmd.Context(), route, dryRun)
				if errors.Is(err, ops.ErrConflict) {
					return errors.New(plainMessage(err))
				}
				return err
			}, func(r *remote) (err error) {
				res, err = r.deadDrop(cmd.Context(), route, all, dryRun)
				return err
			})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(c.out, res)
			}
			verb := "dropped"
			if dryRun {
				verb = "would drop"
			}
			_, err = fmt.Fprintf(c.out, "%s %d of %d dead letter(s) in %s%s\n", verb, res.Dropped, res.Read, res.Queue, why)
			return err
		},
	}
	cmd.Flags().StringVar(&route, "route", "", "the route whose dead letters to drop (required)")
	cmd.Flags().BoolVar(&delivered, "delivered", false, "drop the letters whose pair is delivered")
	cmd.Flags().BoolVar(&all, "all", false, "drop every letter of a deleted route")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "count what would be dropped; drop nothing")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print JSON: {"queue", "total", "read", "dropped", "dry_run"}`)
	_ = cmd.MarkFlagRequired("route") // the flag is declared just above
	return cmd
}

func (c *cli) deadRequeueCmd() *cobra.Command {
	var route string
	var limit int
	var query ops.FilterFields
	cmd := &cobra.Command{
		Use:   "requeue --route ROUTE",
		Short: "Move a route's dead letters back to its queue, each as a new attempt series",
		Long: `Move the route's dead letters back to its queue, one at a time: each copy is
confirmed by the broker before the dead letter is acked (a crash may
duplicate one, never lose one). The dispatcher starts a new attempt series
for each; a pair delivered meanwhile (by a replay, say) is skipped. Without
--limit it moves the messages there are when it starts. With --where it
moves only the letters of the dead events a search finds (at most 1000;
without --since, of the last 24 hours). Progress goes to stderr.`,
		Example: `  hookrelay dead requeue --route billing --limit 10
  hookrelay dead requeue --route billing --where 'body.data.object.customer == "cus_Q8x"' --since 3d`,
		Args: setup.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 0 {
				return setup.Usagef(cmd, "--limit must be 0 (all) or more")
			}
			var f ops.EventFilter
			if query.Where != "" || query.Since != "" || query.Until != "" {
				var err error
				if f, err = query.Parse(); err != nil {
					return setup.Usagef(cmd, "--%s", strings.TrimPrefix(err.Error(), ops.ErrInvalidRequest.Error()+": "))
				}
				if f.Search == nil || limit != 0 {
					return setup.Usagef(cmd, "--where: a requeue by query takes --where (--since and --until narrow it), and no --limit")
				}
			}
			return c.operate(cmd, func(cfg *config.Config, svc *ops.Service) error {
				names := setup.Names(cfg)
				if f.Search != nil {
					p := c.progress("requeue", "message(s) moved")
					n, found, err := svc.DeadRequeueWhere(cmd.Context(), route, f, func(moved, read int) {
						p.update(int64(moved), int64(read), "to "+names.RouteQueue(route))
					})
					p.done()
					if errors.Is(err, ops.ErrConflict) || errors.Is(err, ops.ErrInvalidRequest) {
						return errors.New(plainMessage(err))
					}
					if err != nil {
						return err
					}
					_, err = fmt.Fprintf(c.out, "requeued %d message(s) from %s to %s: the letters of the %d dead event(s) found\n",
						n, names.DeadQueue(route), names.RouteQueue(route), found)
					return err
				}
				p := c.progress("requeue", "message(s) moved")
				n, err := svc.DeadRequeue(cmd.Context(), route, limit, func(moved, total int) {
					p.update(int64(moved), int64(total), "to "+names.RouteQueue(route))
				})
				p.done()
				if errors.Is(err, ops.ErrConflict) {
					return errors.New(plainMessage(err))
				}
				if err != nil {
					if n > 0 {
						fmt.Fprintf(c.errOut, "requeue: stopped after %d message(s) moved from %s to %s\n",
							n, names.DeadQueue(route), names.RouteQueue(route))
					}
					return err
				}
				_, err = fmt.Fprintf(c.out, "requeued %d message(s) from %s to %s\n", n, names.DeadQueue(route), names.RouteQueue(route))
				return err
			}, func(r *remote) error {
				p := c.progress("requeue", "message(s) moved")
				res, err := r.deadRequeue(cmd.Context(), route, limit, query, func(moved, total int) {
					p.update(int64(moved), int64(total), "to route "+route+"'s queue")
				})
				p.done()
				if err != nil {
					if res != nil && res.Moved > 0 {
						fmt.Fprintf(c.errOut, "requeue: stopped after %d message(s) moved to route %s's queue\n", res.Moved, route)
					}
					return err
				}
				if res.Found != nil {
					_, err = fmt.Fprintf(c.out, "requeued %d message(s) of route %s's dead letters to its queue: the letters of the %d dead event(s) found\n",
						res.Moved, route, *res.Found)
					return err
				}
				_, err = fmt.Fprintf(c.out, "requeued %d message(s) of route %s's dead letters to its queue\n", res.Moved, route)
				return err
			})
		},
	}
	cmd.Flags().StringVar(&route, "route", "", "the route whose dead letters to move back (required)")
	cmd.Flags().IntVar(&limit, "limit", 0, "most messages to move (0: all there are now)")
	cmd.Flags().StringVar(&query.Where, "where", "", `only the letters of the dead events this expression takes (as events list --where)`)
	cmd.Flags().StringVar(&query.Since, "since", "", "with --where: events received at or after this time or age (default: the last 24h)")
	cmd.Flags().StringVar(&query.Until, "until", "", "with --where: events received before this time or age")
	_ = cmd.MarkFlagRequired("route") // the flag is declared just above
	return cmd
}
