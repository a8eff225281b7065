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
	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/config"
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

filters: --source S --event-type T --state pending|retrying|delivered|dead --route R
         --since T --until T (RFC 3339, or an age: 2h, 3d) --limit N
output:  a table; --json for scripts
`

func main() {
	fs := flag.NewFlagSet("hookrelay", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, usage) }
	configPath := fs.String("config", "", "config file (default $HOOKRELAY_CONFIG or config.yaml)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, config.Path(*configPath, os.LookupEnv), fs.Args(), os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "hookrelay:", err)
		stop()
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprint(os.Stderr, usage)
			os.Exit(2)
		}
		os.Exit(1)
	}
}

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// run runs one command: its output goes to out, progress of a long command
// to progress.
func run(ctx context.Context, configPath string, args []string, out, progress io.Writer) error {
	if len(args) == 0 {
		return usageError{"no command given"}
	}
	cfg, err := config.Load(configPath, os.LookupEnv)
	if err != nil {
		return err
	}
	switch args[0] {
	case "events", "replay", "dead", "purge":
		return operate(ctx, cfg, args, out, progress)
	case "migrate":
		v, err := store.Migrate(ctx, cfg.Database.URL)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "database schema at version %d\n", v)
		return nil
	case "topology":
		if len(args) < 2 {
			return usageError{"topology needs export or apply"}
		}
		return topology(ctx, cfg, args[1], args[2:], out)
	}
	return usageError{fmt.Sprintf("unknown command %q", args[0])}
}

func topology(ctx context.Context, cfg *config.Config, sub string, args []string, out io.Writer) error {
	topo := app.Topology(cfg)
	switch sub {
	case "export":
		fs := flag.NewFlagSet("topology export", flag.ContinueOnError)
		file := fs.String("out", filepath.Join("topology", "definitions.json"), "file to write, - for stdout")
		if err := fs.Parse(args); err != nil {
			return usageError{err.Error()}
		}
		defs, err := topo.Definitions()
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
	case "apply":
		dialer, err := app.Dialer(cfg, nil, zerolog.Nop())
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
	return usageError{fmt.Sprintf("unknown topology command %q", sub)}
}
