package main

import (
	"fmt"

	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/spf13/cobra"
)

// withDeadLetters runs fn with the operator service for the dead-letter
// queues: they are on the broker, so no database is opened.
func (c *cli) withDeadLetters(fn func(cfg *config.Config, svc *ops.Service) error) error {
	cfg, err := c.config()
	if err != nil {
		return err
	}
	dialer, err := setup.Dialer(cfg, nil, nopLogger)
	if err != nil {
		return err
	}
	return fn(cfg, setup.Ops(cfg, nil, dialer))
}

func (c *cli) deadCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dead",
		Short: "Read and requeue a route's dead letters",
		Long: `A route's dead letters wait in its dead-letter queue, <prefix>.route.<route>.dead,
with headers that say why: attempts, last status and error, reason.`,
		Args: setup.NoArgs,
		RunE: showHelp,
	}
	cmd.AddCommand(c.deadListCmd(), c.deadRequeueCmd())
	return cmd
}

func (c *cli) deadListCmd() *cobra.Command {
	var route string
	var limit int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list --route ROUTE",
		Short: "Read a route's dead letters without consuming them",
		Long: `Read up to --limit messages of the route's dead-letter queue and put them all
back (a dead-letter queue has no delivery limit, so reading is safe). It ends
with "12 dead letter(s) in <queue>", or "100 of 112 shown (--limit N for
more)" when the queue holds more.`,
		Example: `  hookrelay dead list --route billing --limit 10`,
		Args:    setup.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 {
				return setup.Usagef(cmd, "--limit must be positive")
			}
			return c.withDeadLetters(func(_ *config.Config, svc *ops.Service) error {
				list, err := svc.DeadList(cmd.Context(), route, limit)
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(c.out, list)
				}
				return printDeadLetters(c.out, list)
			})
		},
	}
	cmd.Flags().StringVar(&route, "route", "", "the route whose dead letters to read (required)")
	cmd.Flags().IntVar(&limit, "limit", ops.DefaultListLimit, "most messages to show")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print JSON: {"queue", "total", "shown", "items"}`)
	_ = cmd.MarkFlagRequired("route") // the flag is declared just above
	return cmd
}

func (c *cli) deadRequeueCmd() *cobra.Command {
	var route string
	var limit int
	cmd := &cobra.Command{
		Use:   "requeue --route ROUTE",
		Short: "Move a route's dead letters back to its queue, each as a new attempt series",
		Long: `Move the route's dead letters back to its queue, one at a time: each copy is
confirmed by the broker before the dead letter is acked (a crash may
duplicate one, never lose one). The dispatcher starts a new attempt series
for each; a pair delivered meanwhile (by a replay, say) is skipped. Without
--limit it moves the messages there are when it starts. Progress goes to
stderr.`,
		Example: `  hookrelay dead requeue --route billing --limit 10`,
		Args:    setup.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 0 {
				return setup.Usagef(cmd, "--limit must be 0 (all) or more")
			}
			return c.withDeadLetters(func(cfg *config.Config, svc *ops.Service) error {
				names := setup.Names(cfg)
				p := c.progress("requeue", "message(s) moved")
				n, err := svc.DeadRequeue(cmd.Context(), route, limit, func(moved, total int) {
					p.update(int64(moved), int64(total), "to "+names.RouteQueue(route))
				})
				p.done()
				if err != nil {
					if n > 0 {
						fmt.Fprintf(c.errOut, "requeue: stopped after %d message(s) moved from %s to %s\n",
							n, names.DeadQueue(route), names.RouteQueue(route))
					}
					return err
				}
				_, err = fmt.Fprintf(c.out, "requeued %d message(s) from %s to %s\n", n, names.DeadQueue(route), names.RouteQueue(route))
				return err
			})
		},
	}
	cmd.Flags().StringVar(&route, "route", "", "the route whose dead letters to move back (required)")
	cmd.Flags().IntVar(&limit, "limit", 0, "most messages to move (0: all there are now)")
	_ = cmd.MarkFlagRequired("route") // the flag is declared just above
	return cmd
}
