package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hookrelay/hookrelay/internal/ops"

	"github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/bench"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
)

// nopLogger: the CLI's connections log nothing; their errors are returned.
var nopLogger = zerolog.Nop()

func (c *cli) migrateCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Apply the embedded database migrations",
		Long: `Apply every embedded migration the database lacks, as database.migrate_url's
role (the owner of the tables; database.url's when unset). With
database.migrate_url set, also create database.url's role when missing (with
the URL's password) and grant it the rows of every table: the receiver, the
dispatcher and this CLI log in as that role, which owns nothing, so Postgres'
row-level security keeps each team to its own rows. Safe to run from several
places at once (an advisory lock serialises them) and to run again. The
receiver and the dispatcher refuse a database whose schema is behind, naming
this command.`,
		Example: `  hookrelay migrate --config /etc/hookrelay/config.yaml`,
		Args:    setup.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := c.config()
			if err != nil {
				return err
			}
			v, role, err := setup.Migrate(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if _, err := fmt.Fprintf(c.out, "database schema at version %d\n", v); err != nil {
				return err
			}
			switch {
			case role == nil:
				_, err = fmt.Fprintln(c.out, "database.migrate_url is not set: database.url's role owns the tables, so row-level security does not keep teams apart")
			case role.Created:
				_, err = fmt.Fprintf(c.out, "created role %s (database.url), granted the rows of %d tables; it owns none\n", role.Name, role.Tables)
			default:
				_, err = fmt.Fprintf(c.out, "role %s (database.url) granted the rows of %d tables; it owns none\n", role.Name, role.Tables)
			}
			return err
		},
	}
}

func (c *cli) topologyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "topology",
		Short: "Export or declare the RabbitMQ topology (exchanges, queues, bindings, policies)",
		Args:  setup.NoArgs,
		RunE:  showHelp,
	}
	var out string
	export := &cobra.Command{
		Use:   "export",
		Short: "Print the RabbitMQ definitions file for the config",
		Long: `Print the RabbitMQ definitions (exchanges, queues, bindings, policies) of the
config as JSON, which the management UI imports (Overview → Import
definitions). It writes to standard output, or to --out FILE. 'make
topology' writes topology/definitions.json, the file committed for the
default config.`,
		Example: `  hookrelay topology export > definitions.json
  hookrelay topology export --out /tmp/definitions.json`,
		Args: setup.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := c.config()
			if err != nil {
				return err
			}
			defs, err := setup.Topology(cfg).Definitions()
			if err != nil {
				return err
			}
			if out == "" || out == "-" {
				_, err = c.out.Write(defs)
				return err
			}
			if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
				return fmt.Errorf("creating %s: %w", filepath.Dir(out), err)
			}
			if err := os.WriteFile(out, defs, 0o644); err != nil {
				return fmt.Errorf("writing %s: %w", out, err)
			}
			_, err = fmt.Fprintf(c.errOut, "wrote %s\n", out)
			return err
		},
	}
	export.Flags().StringVar(&out, "out", "", "write to this file instead of standard output")
	apply := &cobra.Command{
		Use:   "apply",
		Short: "Declare the topology on the broker and apply its policies",
		Long: `Declare the config's exchanges, queues and bindings on the broker and apply its
policies through the management API, without starting anything. The
binaries declare the same at start. Declaring only adds: a binding or route
removed from the config stays until you remove it in the management UI.

Direct mode: it has no API, so it connects to RabbitMQ (amqp.url) and to
Postgres (database.url) from the config itself, and writes an audit row
(topology.apply) before and after.`,
		Example: `  hookrelay topology apply`,
		Args:    setup.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.withOps(cmd, func(cfg *config.Config, svc *ops.Service) error {
				n, err := svc.TopologyApply(cmd.Context(), func(ctx context.Context) (ops.TopologyCounts, error) {
					return topologyApply(ctx, cfg)
				})
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(c.out, "declared %d exchanges, %d queues, %d bindings, %d policies\n", n.Exchanges, n.Queues, n.Bindings, n.Policies)
				return err
			})
		},
	}
	cmd.AddCommand(export, apply)
	return cmd
}

// topologyApply declares cfg's topology on the broker and applies its
// policies.
func topologyApply(ctx context.Context, cfg *config.Config) (ops.TopologyCounts, error) {
	topo := setup.Topology(cfg)
	dialer, err := setup.Dialer(cfg, nil, nopLogger)
	if err != nil {
		return ops.TopologyCounts{}, err
	}
	conn, err := dialer.Dial("hookrelay-cli")
	if err != nil {
		return ops.TopologyCounts{}, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return ops.TopologyCounts{}, fmt.Errorf("opening channel: %w", err)
	}
	if err := topo.Declare(ch); err != nil {
		return ops.TopologyCounts{}, err
	}
	if err := amqp.ApplyPolicies(ctx, cfg.AMQP.Management(), cfg.AMQP.Nodes()[0], topo.Policies); err != nil {
		return ops.TopologyCounts{}, err
	}
	return ops.TopologyCounts{Exchanges: len(topo.Exchanges), Queues: len(topo.Queues), Bindings: len(topo.Bindings), Policies: len(topo.Policies)}, nil
}

func (c *cli) routesCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "routes",
		Short: "List the routes, their state and what waits on each; make, change, pause and delete them",
		Long: `List the routes, those of the config (KIND config) and those made at run time
(run-time vN, or deleted while they finish their backlog), with their team,
queue, bindings and how many of their deliveries are pending, retrying and
dead in Postgres, their state (active, paused, circuit open or half-open,
held by a Retry-After), the messages ready in their queue and the age of the
oldest undelivered event; then any route that has deliveries in Postgres but
is neither (no dispatcher delivers it).`,
		Example: `  hookrelay routes
  hookrelay routes --json
  hookrelay routes pause billing`,
		Args: setup.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var list *ops.RouteList
			err := c.operate(cmd, func(_ *config.Config, svc *ops.Service) (err error) {
				list, err = svc.RouteList(cmd.Context())
				return err
			}, func(r *remote) (err error) {
				list, err = r.routeList(cmd.Context())
				return err
			})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(c.out, list)
			}
			return printRoutes(c.out, list)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print JSON: {"routes": [{"route", "team", "declared", "version", "queue", "bindings", "pending", "retrying", "dead", "state", "paused", "circuit", "ready", "oldest_undelivered_seconds", "ordering", "waiting", "held", ...}], "broker_error"}`)
	cmd.AddCommand(c.routesPauseCmd(true), c.routesPauseCmd(false), c.routesCreateCmd(), c.routesUpdateCmd(), c.routesDeleteCmd(),
		c.routesRotateCmd(), c.routesResealCmd(), c.routesTestCmd(), c.routesSkipCmd())
	return cmd
}

// benchCmd is `hookrelay bench`: it parses its own flags (see its --help)
// and needs no config: it makes its own database and prefix.
func benchCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "bench [flags]",
		Short: "Benchmark the relay against its bare references on a throwaway database",
		Long: `Run the relay's benchmark: ingest and delivery against bare references, on
a database and a RabbitMQ prefix of its own, removed afterwards. It needs no
config. 'hookrelay bench --help' lists its own flags.`,
		Example:            `  hookrelay bench --quick`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			args = withoutConfigFlag(args)
			stderr := cmd.ErrOrStderr()
			if slices.ContainsFunc(args, func(a string) bool { return a == "-h" || a == "-help" || a == "--help" }) {
				stderr = cmd.OutOrStdout() // help goes to stdout, as every command's does
			}
			return bench.Main(cmd.Context(), args, cmd.OutOrStdout(), stderr)
		},
	}
}

// withoutConfigFlag drops the global --config from args: with its own flag
// parsing, bench sees it, and it needs no config.
func withoutConfigFlag(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == "--config" || args[i] == "-config":
			i++ // and its value
		case strings.HasPrefix(args[i], "--config=") || strings.HasPrefix(args[i], "-config="):
		default:
			out = append(out, args[i])
		}
	}
	return out
}

// benchChildCmd is a helper process the benchmark starts as this
// executable.
func benchChildCmd() *cobra.Command {
	return &cobra.Command{
		Use:                bench.ChildArg,
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return bench.Main(cmd.Context(), append([]string{bench.ChildArg}, args...), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
}
