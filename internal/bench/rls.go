package bench

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"text/tabwriter"

	"github.com/hookrelay/hookrelay/internal/store"
)

// RLS (--rls): the phases run in rounds that alternate the role the
// receiver and the dispatcher log in as: odd rounds as the benchmark's
// own (a superuser, which row-level security does not hold), even rounds
// as a role that owns nothing (made by store.EnsureAppRole, as hookrelay
// migrate does), whose every statement the teams' policies check. The
// table compares each even round with the odd one before it.

// RLS is what --rls measured.
type RLS struct {
	// Role is the role of the even rounds.
	Role string `json:"role"`
	// Compare holds, per phase, an even round (policies) against the odd
	// round before it (none).
	Compare []RoundCompare `json:"compare"`
}

// RoundCompare is one phase of one round against the same phase of
// another.
type RoundCompare struct {
	Round  int     `json:"round"`
	Phase  string  `json:"phase"`
	Rate   Compare `json:"rate"`
	P99    Compare `json:"p99_ms"`
	OwnCPU Compare `json:"own_cpu_ms_per_event"`
}

// rlsRole is the role the even rounds log in as.
const rlsRole = "hookrelay_bench_app"

// switchRole restarts the receiver and the dispatcher logged in as the
// role of round n (see RLS), when it differs from the one they run as.
func (r *runner) switchRole(ctx context.Context, n int) error {
	want := r.relayURL
	if n%2 == 0 {
		if r.appURL == "" {
			u, err := url.Parse(r.relayURL)
			if err != nil {
				return err
			}
			u.User = url.UserPassword(rlsRole, randomHex(12))
			if _, err := store.EnsureAppRole(ctx, r.relayURL, u.String()); err != nil {
				return fmt.Errorf("rls: making the application role: %w", err)
			}
			r.appURL = u.String()
			r.res.RLS = &RLS{Role: rlsRole}
		}
		want = r.appURL
	}
	if want == r.runningURL {
		return nil
	}
	r.logf("round %d: the receiver and the dispatcher log in as %s", n, map[bool]string{true: rlsRole + " (row-level security)", false: "the owner (no row-level security)"}[n%2 == 0])
	return r.restartRelay(ctx, func() { r.runningURL = want })
}

// restartRelay stops the dispatcher and the receiver, applies change to
// what the config says, writes it, and starts them again, ready: a round
// of --rls or --tracing that runs them differently from the round before.
func (r *runner) restartRelay(ctx context.Context, change func()) error {
	if err := r.dispatcherDown(); err != nil {
		return err
	}
	if err := r.receiverDown(); err != nil {
		return err
	}
	change()
	if err := r.writeConfig(); err != nil {
		return err
	}
	if err := r.startReceiver(ctx); err != nil {
		return err
	}
	return r.dispatcherUp(ctx)
}

// compareRLS fills r.res.RLS.Compare.
func (r *runner) compareRLS() {
	if r.res.RLS == nil {
		return
	}
	r.res.RLS.Compare = compareRounds(r.res.Phases, func(round int) (int, bool) { return round - 1, round%2 == 0 })
}

// compareRounds compares each hookrelay phase of the rounds that against
// picks with the round it names.
func compareRounds(phases []*Phase, against func(round int) (int, bool)) []RoundCompare {
	rounds := map[int]map[string]*Phase{}
	for _, p := range phases {
		if rounds[p.Round] == nil {
			rounds[p.Round] = map[string]*Phase{}
		}
		rounds[p.Round][p.Key] = p
	}
	var out []RoundCompare
	for _, p := range phases {
		base, ok := against(p.Round)
		if !ok || p.System != "hookrelay" {
			continue
		}
		e := rounds[base][p.Key]
		if e == nil {
			continue
		}
		c := RoundCompare{Round: p.Round, Phase: p.Key, Rate: compare(p.Rate, e.Rate), OwnCPU: compare(p.OwnCPUPerEventMS, e.OwnCPUPerEventMS)}
		if p.Latency != nil && e.Latency != nil {
			c.P99 = compare(p.Latency.P99, e.Latency.P99)
		}
		out = append(out, c)
	}
	return out
}

func printRLS(w io.Writer, x *RLS) error {
	fmt.Fprintf(w, "\nlogged in as %s, held by row-level security (even rounds), against the owner, which it does not hold (the round before); ratio: with / without\n", x.Role)
	return printRoundCompare(w, "without", x.Compare)
}

// printRoundCompare prints rounds compared with others (compareRounds),
// the other round's columns headed base.
func printRoundCompare(w io.Writer, base string, cs []RoundCompare) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "round\tphase\trate/s\t%[1]s\tratio\tp99 ms\t%[1]s\tratio\town CPU ms/ev\t%[1]s\tratio\t\n", base)
	for _, c := range cs {
		fmt.Fprintf(tw, "%d\t%s\t%.0f\t%.0f\t%.2f\t%.1f\t%.1f\t%.2f\t%.2f\t%.2f\t%.2f\t\n", c.Round, c.Phase,
			c.Rate.Hookrelay, c.Rate.Bare, c.Rate.Ratio, c.P99.Hookrelay, c.P99.Bare, c.P99.Ratio,
			c.OwnCPU.Hookrelay, c.OwnCPU.Bare, c.OwnCPU.Ratio)
	}
	return tw.Flush()
}
