package main

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"slices"
	"time"

	"github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/spf13/cobra"
)

// routeControl is one route's columns of `hookrelay routes` beyond the
// delivery counts.
type routeControl struct {
	state, ready, oldest string
}

type routeControls struct {
	routes map[string]routeControl
	// brokerErr says why READY is unknown.
	brokerErr error
}

// readRouteControls reads each configured route's state from Postgres, the
// ready messages of its queue from the broker (a passive declare: it
// changes nothing) and its oldest undelivered age. A broker that cannot be
// reached leaves READY as "?" and says why; Postgres errors are returned.
func readRouteControls(ctx context.Context, cfg *config.Config, db *store.DB) (routeControls, error) {
	out := routeControls{routes: map[string]routeControl{}}
	states, err := db.RouteStateList(ctx)
	if err != nil {
		return out, err
	}
	byRoute := map[string]store.RouteState{}
	for _, s := range states {
		byRoute[s.Route] = s
	}
	stats, err := db.RouteStatsList(ctx)
	if err != nil {
		return out, err
	}
	oldest := map[string]time.Duration{}
	for _, s := range stats {
		if s.Undelivered > 0 {
			oldest[s.Route] = s.OldestUndelivered
		}
	}
	var inspector *amqp.Inspector
	dialer, err := setup.Dialer(cfg, nil, nopLogger)
	if err != nil {
		out.brokerErr = err
	} else {
		inspector = amqp.NewInspector(dialer, "hookrelay-cli-routes")
		defer func() { _ = inspector.Close() }() // a question's connection; nothing to flush
	}
	names := setup.Names(cfg)
	for _, r := range cfg.Routes {
		rc := routeControl{state: routeStateText(byRoute[r.Name]), ready: "?", oldest: "-"}
		if age, ok := oldest[r.Name]; ok {
			rc.oldest = age.Round(time.Second).String()
		}
		if inspector != nil && out.brokerErr == nil {
			n, err := inspector.Ready(ctx, names.RouteQueue(r.Name))
			if err != nil {
				out.brokerErr = err
			} else {
				rc.ready = fmt.Sprint(n)
			}
		}
		out.routes[r.Name] = rc
	}
	return out, nil
}

// routeStateText is a route's state in one word or two: paused wins over
// the circuit, which wins over a Retry-After hold. A route without a row
// (no dispatcher has run since the controls came) is active.
func routeStateText(s store.RouteState) string {
	switch {
	case s.Paused:
		return "paused"
	case s.Circuit == store.CircuitOpen:
		return "circuit-open"
	case s.Circuit == store.CircuitHalfOpen:
		return "circuit-half-open"
	case s.SlowUntil != nil && s.SlowUntil.After(s.Now):
		return "held(retry-after)"
	}
	return "active"
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
