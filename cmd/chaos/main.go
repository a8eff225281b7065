// Command chaos is hookrelay's fault suite: it runs two receivers and two
// dispatchers against a three-node RabbitMQ cluster (scripts/cluster.sh) and
// a Postgres instance of its own, sends open-loop load to both receivers,
// injects the faults of a bad production day one after another, and counts
// what survived. It exits non-zero when an accepted event was not
// delivered to every route it matched, or when a route received more
// duplicate POSTs than the faults can explain.
//
//	scripts/chaos.sh          (builds, starts the cluster, runs this)
//	chaos --bin DIR --cluster scripts/cluster.sh [--rate N] [--work DIR]
//	chaos postgres --work DIR [--pg-port N] [--setting name=value ...]
//	                          (only the suite's scratch Postgres, until SIGTERM;
//	                          scripts/profile.sh runs the benchmark on it)
//
// The cluster's URLs come from the environment that `cluster.sh env`
// prints (CLUSTER_AMQP_URLS, CLUSTER_MANAGEMENT_URLS).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	// CHAOS_CPUPROFILE=path profiles the suite itself (its load, its
	// destination, its checks): it shares the machine with the relay.
	if path := os.Getenv("CHAOS_CPUPROFILE"); path != "" {
		if f, err := os.Create(path); err == nil {
			if err := pprof.StartCPUProfile(f); err == nil {
				defer pprof.StopCPUProfile()
			}
		}
	}
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout)
	stop()
	pprof.StopCPUProfile()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		var fail *failedError
		if errors.As(err, &fail) {
			os.Exit(1)
		}
		os.Exit(2)
	}
}

// defaultPGPort is the port of the suite's own Postgres. It is below
// Linux's ephemeral range (32768-60999 by default): a port inside it can be
// held, when Postgres starts, by one of the many outgoing connections the
// cluster's nodes and tools open, and Postgres then cannot bind it.
const defaultPGPort = 25432

// failedError is a run that completed and found the relay at fault (as
// opposed to a suite that could not run).
type failedError struct{ reasons []string }

func (e *failedError) Error() string {
	return fmt.Sprintf("%d check(s) failed: %v", len(e.reasons), e.reasons)
}

func run(ctx context.Context, args []string, getenv func(string) string, out io.Writer) error {
	if len(args) > 0 && args[0] == "postgres" {
		return servePostgres(ctx, args[1:], out)
	}
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	opts := options{}
	fs.StringVar(&opts.bin, "bin", "bin", "folder with the receiver, dispatcher and hookrelay binaries")
	fs.StringVar(&opts.cluster, "cluster", "scripts/cluster.sh", "the cluster script (its settings come from the environment)")
	fs.StringVar(&opts.work, "work", "", "work folder for Postgres, configs and logs (default: a new temporary folder)")
	fs.IntVar(&opts.rate, "rate", 0, fmt.Sprintf("events per second sent, open loop, split over both receivers (default: %d scaled to the share of the machine's CPU found free at the start, at least %d)", fullRate, minRate))
	fs.IntVar(&opts.pgPort, "pg-port", defaultPGPort, "port of the suite's own Postgres primary; its replica listens on the next one")
	fs.DurationVar(&opts.settle, "settle", 0, "steady load before the first fault and between faults (default 8s)")
	only := fs.String("only", "", "run only the faults whose names contain one of these comma-separated words (\"destination,alarm\"), to study them")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *only != "" {
		opts.only = strings.Split(*only, ",")
	}
	opts.amqpURLs = splitList(getenv("CLUSTER_AMQP_URLS"))
	opts.mgmtURLs = splitList(getenv("CLUSTER_MANAGEMENT_URLS"))
	if len(opts.amqpURLs) == 0 || len(opts.mgmtURLs) == 0 {
		return errors.New("CLUSTER_AMQP_URLS and CLUSTER_MANAGEMENT_URLS are not set: eval \"$(scripts/cluster.sh env)\" first, or run scripts/chaos.sh")
	}
	if opts.rate < 0 {
		return fmt.Errorf("--rate must be positive, or 0 to size the load to the free CPU")
	}
	if opts.rate == 0 {
		// Before the suite's Postgres and relay start: what is busy now
		// is something else's (the cluster idles).
		free, err := freeCPU(ctx, 3*time.Second)
		if err != nil {
			return fmt.Errorf("measuring the CPU left free to size the load (--rate N fixes it instead): %w", err)
		}
		opts.free = max(free, 0.01)
	}
	s, err := setup(ctx, opts, out)
	if err != nil {
		return err
	}
	defer s.teardown()
	return s.runFaults(ctx)
}
