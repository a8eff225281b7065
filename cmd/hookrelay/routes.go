package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/user"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/spf13/cobra"
)

// routeList reads the routes listing: each configured route's delivery
// counts and state from Postgres, the ready messages of its queue from the
// broker (a passive declare: it changes nothing) and its oldest
// undelivered age; then the routes with deliveries in Postgres that are
// not in the config. A broker that cannot be reached leaves Ready nil and
// says why in BrokerError; Postgres errors are returned.
func routeList(ctx context.Context, cfg *config.Config, db *store.DB) (*ops.RouteList, error) {
	counts, err := db.DeliveryCountByRoute(ctx)
	if err != nil {
		return nil, err
	}
	states, err := db.RouteStateList(ctx)
	if err != nil {
		return nil, err
	}
	byRoute := map[string]store.RouteState{}
	for _, s := range states {
		byRoute[s.Route] = s
	}
	stats, err := db.RouteStatsList(ctx)
	if err != nil {
		return nil, err
	}
	oldest := map[string]float64{}
	for _, s := range stats {
		if s.Undelivered > 0 {
			oldest[s.Route] = s.OldestUndelivered.Seconds()
		}
	}
	out := &ops.RouteList{Routes: []ops.RouteSummary{}}
	var inspector *amqp.Inspector
	dialer, err := setup.Dialer(cfg, nil, nopLogger)
	if err != nil {
		out.BrokerError = err.Error()
	} else {
		inspector = amqp.NewInspector(dialer, "hookrelay-cli-routes")
		defer func() { _ = inspector.Close() }() // a question's connection; nothing to flush
	}
	names := setup.Names(cfg)
	configured := map[string]bool{}
	for _, r := range cfg.Routes {
		configured[r.Name] = true
		st := byRoute[r.Name]
		n := counts[r.Name]
		rs := ops.RouteSummary{
			Route: r.Name, Queue: names.RouteQueue(r.Name), Bindings: r.Bindings,
			Pending: n.Pending, Retrying: n.Retrying, Dead: n.Dead,
			Paused: st.Paused, PausedAt: st.PausedAt, PausedBy: st.PausedBy,
			Circuit: st.Circuit, ConsecutiveFailures: st.ConsecutiveFailures,
		}
		if rs.Circuit == "" {
			rs.Circuit = store.CircuitClosed // no row yet: no dispatcher ran since the controls came
		}
		if st.Circuit != store.CircuitClosed && st.Circuit != "" {
			rs.CircuitOpenUntil = st.OpenedUntil
		}
		if age, ok := oldest[r.Name]; ok {
			rs.OldestUndeliveredSeconds = &age
		}
		if inspector != nil && out.BrokerError == "" {
			q, err := inspector.Queue(ctx, names.RouteQueue(r.Name))
			if err != nil {
				out.BrokerError = err.Error()
			} else {
				rs.Ready, rs.Consumers = &q.Ready, &q.Consumers
			}
		}
		routeState(&rs, st, r.RateLimit > 0)
		out.Routes = append(out.Routes, rs)
	}
	var others []string
	for route := range counts {
		if !configured[route] {
			others = append(others, route)
		}
	}
	slices.Sort(others)
	for _, route := range others {
		n := counts[route]
		rs := ops.RouteSummary{Route: route, Bindings: []string{}, Pending: n.Pending, Retrying: n.Retrying, Dead: n.Dead, Unserved: true}
		if age, ok := oldest[route]; ok {
			rs.OldestUndeliveredSeconds = &age
		}
		out.Routes = append(out.Routes, rs)
	}
	return out, nil
}

// printRoutes prints the routes listing as a table, then why READY is
// unknown if it is, then how many routes there are.
func printRoutes(w io.Writer, list *ops.RouteList) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROUTE\tQUEUE\tBINDINGS\tPENDING\tRETRYING\tDEAD\tSTATE\tCONSUMERS\tREADY\tOLDEST")
	configured, others := 0, 0
	for _, r := range list.Routes {
		if r.Unserved {
			others++
			fmt.Fprintf(tw, "%s\t(not configured)\t-\t%d\t%d\t%d\n", r.Route, r.Pending, r.Retrying, r.Dead)
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
		if r.OldestUndeliveredSeconds != nil {
			oldest = time.Duration(*r.OldestUndeliveredSeconds * float64(time.Second)).Round(time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", r.Route, r.Queue, strings.Join(r.Bindings, " "), r.Pending, r.Retrying, r.Dead,
			stateText(r), consumers, ready, oldest)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if list.BrokerError != "" {
		fmt.Fprintf(w, "CONSUMERS and READY unknown (?): %s\n", list.BrokerError)
	}
	_, err := fmt.Fprintf(w, "%d route(s) configured, %d more with deliveries in the database only\n", configured, others)
	return err
}

// routeState sets rs's State, StateDetail and HeldUntil from the stored
// controls st and the queue's consumers (see ops.RouteSummary.State);
// rateLimited says whether the route has a rate limit. Times are read
// against Postgres' clock, which wrote them.
func routeState(rs *ops.RouteSummary, st store.RouteState, rateLimited bool) {
	left := func(t time.Time) string { return t.Sub(st.Now).Round(time.Second).String() }
	after := func(t *time.Time) bool { return t != nil && t.After(st.Now) }
	switch {
	case st.Paused:
		rs.State = "paused"
	case st.Circuit == store.CircuitOpen:
		rs.State, rs.StateDetail = "circuit-open", "probe due"
		if after(st.OpenedUntil) {
			rs.StateDetail = "probe in " + left(*st.OpenedUntil)
		}
	case st.Circuit == store.CircuitHalfOpen:
		rs.State = "circuit-half-open"
		if st.ProbeOwner != "" {
			rs.StateDetail = "probe by " + st.ProbeOwner
		}
	case after(st.SlowUntil):
		rs.State, rs.StateDetail, rs.HeldUntil = "held(retry-after)", left(*st.SlowUntil), st.SlowUntil
	case after(st.HeldUntil):
		// Only rate-limit holds are marked (a Retry-After is slow_until);
		// a route without a limit now had one when it was marked.
		rs.State, rs.StateDetail, rs.HeldUntil = "held", left(*st.HeldUntil), st.HeldUntil
		if rateLimited {
			rs.State = "held(rate-limit)"
		}
	case rs.Consumers != nil && *rs.Consumers == 0:
		rs.State = "no-consumers"
	default:
		rs.State = "active"
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
	return &cobra.Command{
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
			cfg, err := c.config()
			if err != nil {
				return err
			}
			route := args[0]
			names := setup.RouteNames(cfg)
			if !slices.Contains(names, route) {
				return fmt.Errorf("route %q is not in the config (routes: %v)", route, names)
			}
			db, err := openDB(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			defer db.Close()
			changed, err := db.RoutePause(cmd.Context(), route, pause, operatorName())
			if err != nil {
				return err
			}
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
}

// operatorName says who paused a route: user@host.
func operatorName() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return name + "@" + host
}
