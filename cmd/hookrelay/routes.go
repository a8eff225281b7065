package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/spf13/cobra"
)

// printRoutes prints the routes listing as a table, then why READY is
// unknown if it is, then how many routes there are.
// routeKind says where a route comes from: config.yaml, or made at run
// time (its version), or deleted and finishing its backlog.
func routeKind(r ops.RouteSummary) string {
	switch {
	case r.Declared:
		return "config"
	case r.Deleted:
		return "deleted(" + r.Disposal + ")"
	}
	return fmt.Sprintf("run-time v%d", r.Version)
}

func printRoutes(w io.Writer, list *ops.RouteList) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROUTE\tTEAM\tKIND\tQUEUE\tBINDINGS\tPENDING\tRETRYING\tDEAD\tSTATE\tCONSUMERS\tREADY\tOLDEST")
	configured, others := 0, 0
	for _, r := range list.Routes {
		if r.Unserved && r.Deleted {
			others++
			fmt.Fprintf(tw, "%s\t%s\t%s\t(retired)\t-\t%d\t%d\t%d\n", r.Route, r.Team, routeKind(r), r.Pending, r.Retrying, r.Dead)
			continue
		}
		if r.Unserved {
			others++
			fmt.Fprintf(tw, "%s\t-\t-\t(not configured)\t-\t%d\t%d\t%d\n", r.Route, r.Pending, r.Retrying, r.Dead)
			continue
		}
		configured++
		ready, consumers, oldest := "?", "?", "-"
		if r.Ready != nil {
			ready = fmt.Sprint(*r.Ready)
		}
		if r.Consumers != nil {
			consumers = fmt.Sprint(*r.Consumers)
		}
		oldest = ops.AgeText(r.OldestUndeliveredSeconds)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", r.Route, r.Team, routeKind(r), r.Queue, strings.Join(r.Bindings, " "),
			r.Pending, r.Retrying, r.Dead, stateText(r), consumers, ready, oldest)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range list.Routes {
		if !r.Paused {
			continue
		}
		line := r.Route + " paused"
		if r.PausedBy != "" {
			line += " by " + r.PausedBy
		}
		if r.PausedAt != nil {
			line += " at " + r.PausedAt.UTC().Format(time.RFC3339)
		}
		if r.PausedReason != "" {
			line += ": " + r.PausedReason
		}
		fmt.Fprintln(w, line)
	}
	for _, r := range list.Routes {
		if !r.Filtered || r.FilteredLastHour == nil || r.FilterErrorsLastHour == nil {
			continue
		}
		fmt.Fprintf(w, "%s filters its events: in the last hour %d filtered out, %d its filter could not judge (no pair for either; hookrelay routes test tries its rules)\n",
			r.Route, *r.FilteredLastHour, *r.FilterErrorsLastHour)
	}
	for _, r := range list.Routes {
		printLanes(w, r)
	}
	for _, r := range list.Routes {
		if r.Unserved && r.Deleted && r.Dead > 0 {
			fmt.Fprintf(w, "%s was deleted; its dead letters stay: hookrelay dead list --route %s, dead drop --route %s --all\n", r.Route, r.Route, r.Route)
		}
	}
	if list.BrokerError != "" {
		fmt.Fprintf(w, "CONSUMERS and READY unknown (?): %s\n", list.BrokerError)
	}
	_, err := fmt.Fprintf(w, "%d route(s) configured, %d more with deliveries in the database only\n", configured, others)
	return err
}

// printLanes says what a fifo route holds back: how many events wait
// behind an earlier one of their resource, and each resource held, with
// its head event (the one that goes first).
func printLanes(w io.Writer, r ops.RouteSummary) {
	if r.Ordering != config.OrderingFIFO || (r.Waiting == 0 && len(r.Held) == 0) {
		return
	}
	fmt.Fprintf(w, "%s delivers in order per resource: %d event(s) of %d resource(s) wait behind an earlier one, the oldest %s\n",
		r.Route, r.Waiting, r.WaitingResources, ops.AgeText(r.LongestWaitSeconds))
	for _, h := range r.Held {
		fmt.Fprintf(w, "  %s %s: head event %s %s after %d attempt(s), %d waiting since %s\n",
			h.Source, h.Resource, h.EventID, h.State, h.Attempts, h.Waiting, h.Since.UTC().Format(time.RFC3339))
		if h.State == "dead" {
			fmt.Fprintf(w, "    dead, it holds the resource: hookrelay dead requeue --route %s (delivers it again), or hookrelay routes skip %s --event %s (the next goes)\n",
				r.Route, r.Route, h.EventID)
		}
	}
}

// stateText is a route's state for the table: "circuit-open, probe in
// 12s", "held(rate-limit) 3s".
func stateText(r ops.RouteSummary) string {
	switch {
	case r.StateDetail == "":
		return r.State
	case r.HeldUntil != nil:
		return r.State + " " + r.StateDetail
	}
	return r.State + ", " + r.StateDetail
}

// routesPauseCmd is `hookrelay routes pause NAME` (pause true) or
// `hookrelay routes resume NAME`.
func (c *cli) routesPauseCmd(pause bool) *cobra.Command {
	use, short, long := "resume NAME", "Resume a paused route: every dispatcher consumes its queue again within 2s",
		`Resume route NAME: every dispatcher takes messages from its queue again
within 2s, and the events that waited there are delivered.`
	if pause {
		use, short, long = "pause NAME", "Pause a route: every dispatcher stops taking its messages within 2s",
			`Pause route NAME: every dispatcher stops taking messages from its queue
within 2s (a delivery in flight finishes). Events keep arriving and wait
in the queue, retries coming back from the retry tiers too; nothing is
lost. The pause is stored in Postgres: it survives restarts, and a
dispatcher started later follows it. 'hookrelay routes resume NAME' ends it.`
	}
	var reason string
	cmd := &cobra.Command{
		Use:     use,
		Short:   short,
		Long:    long,
		Example: "  hookrelay routes " + use[:len(use)-len(" NAME")] + " billing",
		Args:    cobra.ExactArgs(1),
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return c.completeNames(c.routeNames)(cmd, args, toComplete)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var res *ops.RoutePauseResult
			err := c.operate(cmd, func(_ *config.Config, svc *ops.Service) (err error) {
				res, err = svc.RoutePause(cmd.Context(), args[0], pause, reason)
				return err
			}, func(r *remote) (err error) {
				res, err = r.routePause(cmd.Context(), args[0], pause, reason)
				return err
			})
			if err != nil {
				return err
			}
			route, changed := res.Route, res.Changed
			switch {
			case pause && changed:
				_, err = fmt.Fprintf(c.out, "route %s paused: every dispatcher stops taking its messages within 2s; events wait in its queue\n", route)
			case pause:
				_, err = fmt.Fprintf(c.out, "route %s was paused already\n", route)
			case changed:
				_, err = fmt.Fprintf(c.out, "route %s resumed: every dispatcher takes its messages again within 2s\n", route)
			default:
				_, err = fmt.Fprintf(c.out, "route %s was not paused\n", route)
			}
			return err
		},
	}
	if pause {
		cmd.Flags().StringVar(&reason, "reason", "", "why the route is paused: shown with it (routes, the console, the API) until it is resumed, and in the audit log")
	}
	return cmd
}

// routesSkipCmd is `hookrelay routes skip ROUTE --event ID`.
func (c *cli) routesSkipCmd() *cobra.Command {
	var event string
	cmd := &cobra.Command{
		Use:   "skip ROUTE --event ID",
		Short: "Let a fifo route's resource go on past its dead event",
		Long: `On a route with ordering fifo and on_dead block, a dead event holds its
resource: the resource's later events wait behind it ('hookrelay routes'
lists them with their head). Requeueing its dead letter (hookrelay dead
requeue) delivers it again, first. skip takes it out of the resource's
order instead: the next event of the resource goes at once. Its dead letter
stays in the route's dead-letter queue, to drop, or to requeue (it is then
delivered whenever it comes, out of order). Audited.`,
		Example: "  hookrelay routes skip billing --event 01936f4e-8c1a-7b3e-9d2f-4a5b6c7d8e9f",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := uuid.Parse(event)
			if err != nil {
				return setup.Usagef(cmd, "--event: want the event's id (a UUID): %v", err)
			}
			return c.withOps(cmd, func(_ *config.Config, svc *ops.Service) error {
				h, err := svc.LaneSkip(cmd.Context(), args[0], id)
				if err != nil {
					return usage(cmd, err)
				}
				fmt.Fprintf(c.out, "skipped: event %s no longer holds %s %s on route %s; its next event goes (its dead letter stays)\n",
					h.EventID, h.Source, h.Resource, args[0])
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&event, "event", "", "the dead event's id (required)")
	_ = cmd.MarkFlagRequired("event")
	return cmd
}
