package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ops"
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
			return c.withOps(cmd, func(_ *config.Config, svc *ops.Service) error {
				res, err := svc.RoutePause(cmd.Context(), args[0], pause, reason)
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
			})
		},
	}
	if pause {
		cmd.Flags().StringVar(&reason, "reason", "", "why the route is paused: shown with it (routes, the console, the API) until it is resumed, and in the audit log")
	}
	return cmd
}
