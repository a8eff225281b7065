// Command hookrelay is the operator CLI; `hookrelay` alone prints the
// commands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/bench"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/rs/zerolog"
)

const usage = `usage: hookrelay [--config PATH] <command> [flags]

commands:
  migrate                      apply the embedded database migrations (safe to run concurrently)
  topology export [--out F]    write the RabbitMQ definitions file (default topology/definitions.json)
  topology apply               declare exchanges, queues, bindings and policies on the broker
  events list [filters]        events with each route's delivery state, newest first
  events show ID               one event, its deliveries and every attempt
  replay --event ID | filters  deliver again through the outbox [--route R] [--include-delivered] [--dry-run]
                               paced in batches [--batch N] [--stall-timeout 2m] [--list N] [--after CURSOR]
  dead list --route R          read the dead-letter queue without consuming it [--limit N]
  dead requeue --route R       move dead letters back with a fresh attempt count [--limit N]
  purge --older-than AGE       delete old delivered events, keeping dedupe keys [--batch N] [--include-dead]
  bench [flags]                benchmark the relay against bare references on a throwaway database (--help)

filters: --source S --event-type T --state pending|retrying|delivered|dead --route R
         --since T --until T (RFC 3339, or an age: 2h, 3d) --limit N
output:  a table; --json for scripts
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr)
	stop()
	os.Exit(report(err, os.Stderr))
}

// report tells the operator what went wrong and returns the exit status:
// 0 after success, 2 for a bad command line (with the usage), 1 for a
// command that failed.
func report(err error, stderr io.Writer) int {
	var bad flagError
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &bad):
		return 2 // the flag package has printed it, and the usage
	}
	fmt.Fprintln(stderr, "hookrelay:", err)
	if errors.As(err, &ue) {
		fmt.Fprint(stderr, usage)
		return 2
	}
	return 1
}

// usageError is a command line that names no command, an unknown one, or
// bad flags of one.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// flagError is a global flag that cannot be parsed (or --help): the flag
// package has printed why, and the usage.
type flagError struct{ error }

// run runs one command line: the global --config flag, then a command.
// The command's output goes to stdout, progress of a long command to
// stderr; lookupEnv overrides the config file as HOOKRELAY_* variables do.
func run(ctx context.Context, args []string, lookupEnv config.LookupEnvFunc, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("hookrelay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	configPath := fs.String("config", "", "config file (default $HOOKRELAY_CONFIG or config.yaml)")
	if err := fs.Parse(args); err != nil {
		return flagError{err}
	}
	args = fs.Args()
	if len(args) == 0 {
		return usageError{"no command given"}
	}
	switch args[0] {
	case "bench":
		// It needs no config: it makes its own database and prefix.
		return bench.Main(ctx, args[1:], stdout, stderr)
	case bench.ChildArg:
		// A helper process the benchmark started as this executable.
		return bench.Main(ctx, args, stdout, stderr)
	}
	cfg, err := config.Load(config.Path(*configPath, lookupEnv), lookupEnv)
	if err != nil {
		return err
	}
	switch args[0] {
	case "events", "replay", "dead", "purge":
		return operate(ctx, cfg, args, stdout, stderr)
	case "migrate":
		v, err := store.Migrate(ctx, cfg.Database.URL)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "database schema at version %d\n", v)
		return nil
	case "topology":
		if len(args) < 2 {
			return usageError{"topology needs export or apply"}
		}
		switch args[1] {
		case "export":
			return topologyExport(cfg, args[2:], stdout)
		case "apply":
			return topologyApply(ctx, cfg, stdout)
		}
		return usageError{fmt.Sprintf("unknown topology command %q", args[1])}
	}
	return usageError{fmt.Sprintf("unknown command %q", args[0])}
}

// topologyExport writes the definitions file for cfg.
func topologyExport(cfg *config.Config, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("topology export", flag.ContinueOnError)
	file := fs.String("out", filepath.Join("topology", "definitions.json"), "file to write, - for stdout")
	if err := fs.Parse(args); err != nil {
		return usageError{err.Error()}
	}
	defs, err := setup.Topology(cfg).Definitions()
	if err != nil {
		return err
	}
	if *file == "-" {
		_, err = out.Write(defs)
		return err
	}
	if err := os.MkdirAll(filepath.Dir(*file), 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", filepath.Dir(*file), err)
	}
	if err := os.WriteFile(*file, defs, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", *file, err)
	}
	fmt.Fprintf(out, "wrote %s\n", *file)
	return nil
}

// topologyApply declares cfg's topology on the broker and applies its
// policies.
func topologyApply(ctx context.Context, cfg *config.Config, out io.Writer) error {
	topo := setup.Topology(cfg)
	dialer, err := setup.Dialer(cfg, nil, zerolog.Nop())
	if err != nil {
		return err
	}
	conn, err := dialer.Dial("hookrelay-cli")
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("opening channel: %w", err)
	}
	if err := topo.Declare(ch); err != nil {
		return err
	}
	if err := amqp.ApplyPolicies(ctx, cfg.AMQP.Management(), cfg.AMQP.Nodes()[0], topo.Policies); err != nil {
		return err
	}
	fmt.Fprintf(out, "declared %d exchanges, %d queues, %d bindings, %d policies\n", len(topo.Exchanges), len(topo.Queues), len(topo.Bindings), len(topo.Policies))
	return nil
}
