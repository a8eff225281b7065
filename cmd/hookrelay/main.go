// Command hookrelay is the operator CLI: migrations, the RabbitMQ
// topology, events and their attempts, replays, retries, dead letters,
// purges and the benchmark. `hookrelay help` lists the commands, and
// `hookrelay help COMMAND` (or COMMAND --help) explains one; help never
// touches the database or the broker.
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr)
	stop()
	os.Exit(setup.ExitCode(err))
}

// run runs one command line. A command's output goes to stdout, its
// progress and errors to stderr; lookupEnv gives HOOKRELAY_CONFIG and the
// HOOKRELAY_* overrides. It reports a failure on stderr and returns it for
// the exit status (setup.ExitCode).
func run(ctx context.Context, args []string, lookupEnv config.LookupEnvFunc, stdout, stderr io.Writer) error {
	c := &cli{lookupEnv: lookupEnv, out: stdout, errOut: stderr, in: os.Stdin}
	c.inTerminal = isTerminal(os.Stdin)
	c.errTerminal = isTerminal(stderr)
	err := setup.Execute(ctx, c.root(), args, stdout, stderr)
	setup.Report(err, "hookrelay", stderr)
	return err
}

// showHelp is what a command that only groups others does: print its help.
func showHelp(cmd *cobra.Command, _ []string) error { return cmd.Help() }

// isTerminal reports whether w is a terminal (a person watching).
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// cli is one command line's state: where the config comes from and where
// output goes.
type cli struct {
	configPath string
	lookupEnv  config.LookupEnvFunc
	out        io.Writer
	errOut     io.Writer
	in         io.Reader
	// inTerminal: a person can answer a question; errTerminal: progress
	// is drawn as a bar.
	inTerminal, errTerminal bool
}

// config finds and loads the config as the operator commands need it
// (config.LoadOperator: the senders' secrets are not read).
func (c *cli) config() (*config.Config, error) {
	path, err := config.Find(c.configPath, c.lookupEnv)
	if err != nil {
		return nil, &setup.ConfigError{Err: err}
	}
	cfg, err := config.LoadOperator(path, c.lookupEnv)
	if err != nil {
		return nil, &setup.ConfigError{Err: err}
	}
	return cfg, nil
}

func (c *cli) root() *cobra.Command {
	root := &cobra.Command{
		Use:   "hookrelay",
		Short: "Operate a hookrelay: migrations, topology, events, replays, retries, dead letters, purges",
		Long: `hookrelay is the operator CLI of the hookrelay webhook relay.

After 'hookrelay login URL' (or with HOOKRELAY_SERVER and HOOKRELAY_TOKEN
set) the operator commands (routes, events, retry, replay, dead, purge,
versions, tokens, audit, jobs, listen) are requests to that relay's admin
API under the token's role and team: no database or broker URL is needed.

Without a server they work directly, as migrate, topology apply, teams,
secret key and routes reseal always do: they read the config file
(--config PATH, else $HOOKRELAY_CONFIG, else ./config.yaml; HOOKRELAY_*
variables override its keys), only the settings they use (the database,
RabbitMQ, and the routes' names and bindings), and act for the platform.

Listings print a table (--json for scripts) and say how many they show of
how many there are. Nothing is printed as done before it is done, and
--help never touches the database or the broker.`,
		Example: `  hookrelay events list --state dead --since 3h
  hookrelay help replay`,
		Args: setup.NoArgs,
		RunE: showHelp,
	}
	root.PersistentFlags().StringVar(&c.configPath, "config", "", setup.ConfigFlagUsage)
	setup.SetVersion(root)
	root.AddGroup(
		&cobra.Group{ID: "events", Title: "Events and deliveries:"},
		&cobra.Group{ID: "setup", Title: "Set-up:"},
	)
	for _, cmd := range []*cobra.Command{c.eventsCmd(), c.replayCmd(), c.retryCmd(), c.deadCmd(), c.purgeCmd(), c.routesCmd(), c.versionsCmd(), c.auditCmd(),
		c.jobsCmd(), c.listenCmd()} {
		cmd.GroupID = "events"
		root.AddCommand(cmd)
	}
	for _, cmd := range []*cobra.Command{c.loginCmd(), c.contextCmd(), c.migrateCmd(), c.topologyCmd(), c.secretCmd(), c.tokensCmd(), c.teamsCmd(), benchCmd(), benchChildCmd()} {
		cmd.GroupID = "setup"
		root.AddCommand(cmd)
	}
	markDirect(root)
	root.SetHelpCommandGroupID("setup")
	root.SetCompletionCommandGroupID("setup")
	c.registerCompletions(root)
	return root
}

// registerCompletions completes, in every command under cmd, the --route
// and --source flags with the config's route and source names (read from
// the config alone: no database, no broker), and dead list's --state.
func (c *cli) registerCompletions(cmd *cobra.Command) {
	for _, sub := range cmd.Commands() {
		c.registerCompletions(sub)
	}
	if cmd.Flags().Lookup("route") != nil {
		_ = cmd.RegisterFlagCompletionFunc("route", c.completeNames(c.routeNames)) // the flag exists: checked above
	}
	if cmd.Flags().Lookup("source") != nil {
		_ = cmd.RegisterFlagCompletionFunc("source", c.completeNames(c.sourceNames)) // likewise
	}
}

func (c *cli) routeNames() ([]string, error) {
	cfg, err := c.config()
	if err != nil {
		return nil, err
	}
	return setup.RouteNames(cfg), nil
}

// sourceNames reads the names alone: the operator's config leaves the
// sources out.
func (c *cli) sourceNames() ([]string, error) {
	path, err := config.Find(c.configPath, c.lookupEnv)
	if err != nil {
		return nil, err
	}
	return config.SourceNames(path)
}

// completeNames completes with the names that start with what was typed;
// with no readable config it offers nothing (and no file names).
func (c *cli) completeNames(names func() ([]string, error)) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		all, err := names()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []string
		for _, n := range all {
			if strings.HasPrefix(n, toComplete) {
				out = append(out, n)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// directOnly are the commands with no admin API: they work directly
// whatever the CLI is logged in to, and their help says so.
var directOnly = map[string]string{
	"hookrelay migrate":        "it connects to database.migrate_url (else database.url)",
	"hookrelay topology apply": "it connects to RabbitMQ and to database.url (for the audit row)",
	"hookrelay teams create":   "it connects to database.url",
	"hookrelay teams list":     "it connects to database.url",
	"hookrelay routes reseal":  "it connects to database.url, with secrets.key",
	"hookrelay routes skip":    "it connects to database.url",
	"hookrelay secret key":     "it connects nowhere: the key is made on this machine",
	"hookrelay secret new":     "it connects nowhere: the secret is made on this machine",
	"hookrelay bench":          "it makes its own database and broker prefix on this machine",
}

// markDirect adds the direct mode's note to the help of every command of
// directOnly under cmd.
func markDirect(cmd *cobra.Command) {
	for _, sub := range cmd.Commands() {
		markDirect(sub)
	}
	if how, ok := directOnly[cmd.CommandPath()]; ok {
		cmd.Long += "\n\nDirect mode only: this command has no admin API, so it runs here whatever\n'hookrelay login' chose; " + how + "."
	}
}
