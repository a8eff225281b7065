// Package bench is `hookrelay bench`: a benchmark of the receiver and the
// dispatcher, run as the real binaries against a throwaway database and
// RabbitMQ prefix, next to two bare references measured in the same run,
// so that a change can be judged by ratios on a noisy machine.
//
// One run measures, each phase with progress lines on stderr and then a
// table (or --json) on stdout:
//
//   - ingest: N clients in a closed loop for D seconds against the receiver,
//     with the dispatcher running and with it stopped, and the same load
//     against the bare ingest server (one INSERT ... CTE of the event and
//     its outbox row per request, nothing else);
//   - delivery: the drain of a backlog of B events by the dispatcher, and of
//     B messages by the bare forwarder (consumers at prefetch 1 → signed
//     POST → ack, no Postgres);
//   - end to end: an open loop at R events/s for D seconds, latency from
//     the receiver's 200 to the destination, and the longest gap between
//     deliveries; and the same open loop through a bare relay (HMAC check,
//     one INSERT, a confirmed persistent publish to a quorum queue, 200)
//     with the bare forwarder delivering: the yardstick for everyday load,
//     compared by own CPU per event and p50/p99;
//   - with --soak D instead: the end-to-end open loop for D (30m), sampled
//     every --soak-every for what a leak or a drift would show, with a
//     verdict on whether each series stayed flat (soak.go);
//   - with --history N: the phases on the empty database, then again after
//     N delivered events were written into it, compared; then a purge of
//     the oldest day of that history is timed (history.go);
//   - with --rls: rounds alternating the processes' role between the owner
//     and a role held by row-level security, compared (rls.go);
//   - with --tracing: rounds alternating tracing off and on (every span
//     exported to a collector inside the benchmark), compared (tracing.go);
//   - with --filters: the end-to-end phase only, with ten routes, in rounds
//     alternating the routes' rules (none; a filter and a transformation
//     each), compared (filters.go);
//   - for each phase the whole machine's CPU time per event (/proc/stat),
//     the CPU time per event of the system under test's own processes,
//     the Postgres WAL written per event and the checkpoints started, and
//     the CPU time and peak memory of every process involved: the
//     benchmark itself (the load generator), receiver, dispatcher,
//     destination, references, Postgres (all processes of the server) and
//     RabbitMQ (beam.smp), from /proc/<pid>.
//
// --rounds N runs the phases N times and takes each ratio within its
// round, then their median: on a shared machine the load drifts, and the
// phases closest in time are the fairest pair.
//
// Every hookrelay phase checks what the destination got: an accepted event
// that never arrived is lost, a pair that arrived twice is a duplicate, a
// POST whose signature does not verify is counted, and an event that
// arrived but that the relay's database does not record as delivered
// (it would be sent again) is unrecorded; any of these fails the run,
// after the table is printed. The bare ingest server's accepted events
// must all be in its database.
//
// Every helper runs as a process of its own, started as the running
// executable with the arguments ChildArg, a role and its flags; a binary
// that calls Main must hand such arguments to Main unchanged:
//
//	hookrelay bench [flags]                     → bench.Main(ctx, args, ...)
//	hookrelay bench-child <role> [flags]        → bench.Main(ctx, append([]string{"bench-child"}, args...), ...)
//
// Linux only (it measures from /proc).
package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// options are the flags of a run.
type options struct {
	databaseURL   string
	amqpURL       string
	managementURL string
	receiverBin   string
	dispatcherBin string

	clients     int
	duration    time.Duration
	backlog     int
	rate        int
	e2eDuration time.Duration
	concurrency int
	dbConns     int
	bodySize    int
	destDelay   time.Duration

	rounds        int
	settleTimeout time.Duration
	progress      time.Duration
	phases        map[string]bool
	quick         bool
	// targetQueue is the type of the delivery-amqp phase's queue.
	targetQueue string
	json        bool
	work        string
	keep        bool
	profile     string
	compatOld   bool
	// soak, when set, replaces the phases with the soak (soak.go).
	soak      time.Duration
	soakEvery time.Duration
	// history, when set, runs the phases on the empty database and again
	// after writing this many delivered events (history.go).
	history int
	// rls alternates the processes' role by round (rls.go).
	rls bool
	// tracing alternates tracing off and on by round (tracing.go).
	tracing bool
	// filters alternates the routes' rules off and on by round, end to
	// end only, with ten routes (filters.go).
	filters bool
	// search times searches by the body, and ingest without the body
	// index (search.go).
	search bool
}

// Phase keys, for --phases.
const (
	phaseIngest        = "ingest"
	phaseBareIngest    = "bare-ingest"
	phaseDelivery      = "delivery"
	phaseBareForwarder = "bare-forwarder"
	phaseE2E           = "e2e"
	phaseBareE2E       = "bare-e2e"
	// phaseDeliveryFIFO is the delivery phase on a route with ordering
	// fifo, its events about fifoResources resources: only when asked
	// for (--phases), after the delivery phase it is compared with.
	phaseDeliveryFIFO = "delivery-fifo"
	// phaseDeliveryAMQP is the delivery phase on a route of kind amqp,
	// publishing into an exchange whose queue the destination consumes:
	// only when asked for, after the delivery phase it is compared with.
	phaseDeliveryAMQP = "delivery-amqp"
	// phaseBareRecorder and phaseBareRecorderE2E are the bare-forwarder
	// and bare-e2e phases with the recording forwarder (recorder.go): the
	// floor of DESIGN.md's invariants 3 and 5. Only when asked for.
	phaseBareRecorder    = "bare-recorder"
	phaseBareRecorderE2E = "bare-recorder-e2e"
)

// extraPhases run only when --phases names them.
var extraPhases = []string{phaseDeliveryFIFO, phaseDeliveryAMQP, phaseBareRecorder, phaseBareRecorderE2E}

var allPhases = []string{phaseIngest, phaseBareIngest, phaseDelivery, phaseBareForwarder, phaseE2E, phaseBareE2E}

// Main runs the benchmark with args (flags, see --help), or a child role
// when args[0] is ChildArg. Progress goes to stderr, the results to stdout.
// It returns an error when the run could not be completed or when a
// hookrelay phase lost, duplicated or mis-signed an event; --help prints
// the flags and returns nil having done nothing.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == ChildArg {
		if err := runChild(ctx, args[1:], stdout); err != nil {
			return fmt.Errorf("%s: %w", ChildArg, err)
		}
		return nil
	}
	opts, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err == nil {
		err = run(ctx, opts, stdout, stderr)
	}
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return nil
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.databaseURL, "database-url", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "Postgres to create the throwaway databases on (a user allowed to CREATE DATABASE)")
	fs.StringVar(&o.amqpURL, "amqp-url", "amqp://guest:guest@127.0.0.1:5672/", "RabbitMQ")
	fs.StringVar(&o.managementURL, "management-url", "http://guest:guest@127.0.0.1:15672", "RabbitMQ management API (the run's queues, exchanges and policies are deleted through it)")
	fs.StringVar(&o.receiverBin, "receiver-bin", "", "receiver binary (default: next to this executable, else bin/receiver)")
	fs.StringVar(&o.dispatcherBin, "dispatcher-bin", "", "dispatcher binary (default: next to this executable, else bin/dispatcher)")
	fs.IntVar(&o.clients, "clients", 32, "ingest: concurrent clients of the closed loop")
	fs.DurationVar(&o.duration, "duration", 20*time.Second, "ingest: length of each closed-loop phase")
	fs.IntVar(&o.backlog, "backlog", 10000, "delivery: events in the backlog each system drains")
	fs.IntVar(&o.rate, "rate", 200, "end to end: events per second, open loop")
	fs.DurationVar(&o.e2eDuration, "e2e-duration", 20*time.Second, "end to end: how long the open loop sends")
	fs.IntVar(&o.concurrency, "concurrency", 32, "delivery: the route's consumers (each prefetch 1), and the bare forwarder's")
	fs.IntVar(&o.dbConns, "db-conns", 10, "Postgres pool of the receiver (database.max_conns) and of the bare ingest server")
	fs.IntVar(&o.bodySize, "body-size", 1536, "bytes per event body (JSON)")
	fs.DurationVar(&o.destDelay, "dest-delay", 0, "the destination waits this long before answering")
	fs.IntVar(&o.rounds, "rounds", 1, "run the phases this many times, one round after the other; ratios are taken within each round, and their median reported")
	fs.DurationVar(&o.settleTimeout, "settle-timeout", 60*time.Second, "give up waiting for deliveries after this long without a new one")
	fs.DurationVar(&o.progress, "progress", 2*time.Second, "interval of the progress lines")
	phases := fs.String("phases", strings.Join(allPhases, ","), "phases to run, comma-separated: "+strings.Join(allPhases, ", ")+"; and, not by default, "+phaseDeliveryFIFO+": the delivery phase again on a route with ordering fifo, its events about 50 resources, compared with the delivery phase (which then runs with the same resources, unordered), and "+phaseDeliveryAMQP+": the delivery phase again on a route of kind amqp publishing into an exchange on --amqp-url, whose quorum queue the destination consumes, compared with the delivery phase over HTTP; "+phaseBareRecorder+" and "+phaseBareRecorderE2E+": the bare-forwarder and bare-e2e phases with a forwarder that reads each message's outcome in Postgres before its POST and records it, committed, before its ack (the least DESIGN.md's invariants 3 and 5 cost), compared with the delivery and e2e phases")
	fs.StringVar(&o.targetQueue, "target-queue", "quorum", "delivery-amqp: the type of the queue bound to the route's exchange, quorum or classic (durable either way)")
	fs.BoolVar(&o.quick, "quick", false, "small sizes, a few seconds per phase (about a minute in all); flags given explicitly win")
	fs.BoolVar(&o.json, "json", false, "print the results as JSON (for keeping history) instead of the table")
	fs.StringVar(&o.work, "work", "", "folder for the config and the children's logs (default: a new temporary folder, removed after a successful run)")
	fs.BoolVar(&o.keep, "keep", false, "keep the work folder")
	fs.StringVar(&o.profile, "profile", "", "write CPU profiles of the receiver and the dispatcher (the config sets debug.pprof) and, when Postgres loads pg_stat_statements, its top statements, for the ingest phase with the dispatcher running, the delivery phase and the end-to-end phase, into this folder; off by default (profiling costs CPU)")
	fs.DurationVar(&o.soak, "soak", 0, "instead of the phases, run the end-to-end open loop at --rate for this long (30m), with a line per --soak-every of each process's memory, goroutines and open files, Postgres and RabbitMQ connections, outbox rows, live leases and the deliveries' p99, and a verdict on whether each stayed flat")
	fs.DurationVar(&o.soakEvery, "soak-every", time.Minute, "with --soak: the interval of its samples")
	fs.BoolVar(&o.rls, "rls", false, "alternate the role the receiver and the dispatcher log in as: the owner (odd rounds; row-level security does not hold it) and a role that owns nothing (even rounds; every statement checked by the teams' policies); compare each even round with the one before (default two rounds)")
	fs.BoolVar(&o.search, "search", false, "time searches by the body (one customer's events over 1 and 30 days; with --history, among its events) after the rounds, and run the ingest phases first without the body index (round 0) to compare with round 1")
	fs.BoolVar(&o.filters, "filters", false, "end to end only, at --rate, with ten routes bound to every event: without rules (odd rounds) and each with a filter and a transformation (even rounds); compare each even round with the one before (default two rounds)")
	fs.BoolVar(&o.tracing, "tracing", false, "alternate tracing in the receiver and the dispatcher: off (odd rounds) and on with every span sampled and exported over OTLP/HTTP to a collector inside the benchmark (even rounds); compare each even round with the one before (default two rounds)")
	fs.IntVar(&o.history, "history", 0, "run the phases on the empty database, then write this many delivered events (each with its delivery and attempt, over the week before the run), run them again and compare; then time a purge of the oldest day")
	fs.BoolVar(&o.compatOld, "compat-old", false, "with --profile: write no debug.pprof key, for receiver and dispatcher binaries older than it (they refuse it); only pg_stat_statements is profiled")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: hookrelay bench [flags]\n\n"+
			"Runs the receiver and dispatcher binaries against a throwaway database and RabbitMQ prefix,\n"+
			"with a bare ingest server and a bare forwarder as references, and prints rates, latencies,\n"+
			"CPU per event and per process. Progress goes to stderr, results to stdout.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	explicitRounds := false
	fs.Visit(func(f *flag.Flag) { explicitRounds = explicitRounds || f.Name == "rounds" })
	if o.history > 0 {
		if explicitRounds {
			return o, errors.New("--history runs two rounds of its own (empty, then with the history): leave --rounds out")
		}
		o.rounds = 2
	}
	if (o.rls || o.tracing || o.filters) && !explicitRounds {
		o.rounds = 2
	}
	if o.quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		quick := map[string]func(){
			"duration":     func() { o.duration = 5 * time.Second },
			"e2e-duration": func() { o.e2eDuration = 5 * time.Second },
			"backlog":      func() { o.backlog = 2000 },
			"rate":         func() { o.rate = 100 },
			"progress":     func() { o.progress = time.Second },
		}
		for name, apply := range quick {
			if !set[name] {
				apply()
			}
		}
	}
	o.phases = map[string]bool{}
	for _, p := range strings.Split(*phases, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if !contains(allPhases, p) && !contains(extraPhases, p) {
			return o, fmt.Errorf("--phases: unknown phase %q (known: %s, %s)", p, strings.Join(allPhases, ", "), strings.Join(extraPhases, ", "))
		}
		o.phases[p] = true
	}
	if o.filters {
		// End to end only: the everyday load the rules add to.
		o.phases = map[string]bool{phaseE2E: true}
	}
	return o, o.validate()
}

func (o *options) validate() error {
	var problems []string
	check := func(ok bool, msg string) {
		if !ok {
			problems = append(problems, msg)
		}
	}
	check(o.clients >= 1 && o.clients <= 1000, "--clients must be 1..1000")
	check(o.duration > 0, "--duration must be positive (with a unit: 20s)")
	check(o.backlog >= 1, "--backlog must be at least 1")
	check(o.rate >= 1 && o.rate <= 100000, "--rate must be 1..100000")
	check(o.e2eDuration > 0, "--e2e-duration must be positive (with a unit: 20s)")
	check(o.concurrency >= 1 && o.concurrency <= 256, "--concurrency must be 1..256 (routes[].concurrency's limit)")
	check(o.dbConns >= 1 && o.dbConns <= 1000, "--db-conns must be 1..1000")
	check(o.bodySize >= 400 && o.bodySize <= 1<<20, "--body-size must be 400..1048576")
	check(o.destDelay >= 0 && o.destDelay < 5*time.Minute, "--dest-delay must be 0..5m")
	check(o.rounds >= 1 && o.rounds <= 100, "--rounds must be 1..100")
	check(o.settleTimeout > 0, "--settle-timeout must be positive")
	check(o.progress > 0, "--progress must be positive")
	check(len(o.phases) > 0, "--phases names no phase")
	check(o.targetQueue == "quorum" || o.targetQueue == "classic", "--target-queue: quorum or classic")
	check(!o.compatOld || o.profile != "", "--compat-old needs --profile")
	check(o.soak >= 0, "--soak must not be negative")
	check(o.history >= 0, "--history must not be negative")
	check(o.history == 0 || o.soak == 0, "--history and --soak are separate runs")
	check(!o.rls || (o.history == 0 && o.soak == 0), "--rls is a run of its own, without --history or --soak")
	check(!o.rls || o.rounds%2 == 0, "--rls compares rounds in pairs: give an even --rounds")
	check(!o.tracing || (o.history == 0 && o.soak == 0 && !o.rls), "--tracing is a run of its own, without --history, --soak or --rls")
	check(!o.tracing || o.rounds%2 == 0, "--tracing compares rounds in pairs: give an even --rounds")
	check(!o.search || (o.soak == 0 && !o.rls && !o.tracing && !o.filters), "--search runs with the plain rounds or --history, without --soak, --rls, --tracing or --filters")
	check(!o.filters || (o.history == 0 && o.soak == 0 && !o.rls && !o.tracing), "--filters is a run of its own, without --history, --soak, --rls or --tracing")
	check(!o.filters || o.rounds%2 == 0, "--filters compares rounds in pairs: give an even --rounds")
	check(o.soakEvery > 0 && (o.soak == 0 || o.soakEvery <= o.soak/2), "--soak-every must be positive and at most half of --soak")
	if len(problems) > 0 {
		return fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// findBinary returns flagValue, or name next to the running executable, or
// bin/name in the working folder.
func findBinary(flagValue, name, exe string) (string, error) {
	if flagValue != "" {
		if _, err := os.Stat(flagValue); err != nil {
			return "", fmt.Errorf("--%s-bin: %w", name, err)
		}
		return flagValue, nil
	}
	candidates := []string{filepath.Join(filepath.Dir(exe), name), filepath.Join("bin", name)}
	for _, c := range candidates {
		if st, err := os.Stat(c); err == nil && !st.IsDir() {
			return filepath.Abs(c)
		}
	}
	return "", fmt.Errorf("no %s binary at %s: build them with `go build -o bin/ ./cmd/...` (make build), or pass --%s-bin", name, strings.Join(candidates, " or "), name)
}
