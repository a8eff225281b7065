package setup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"strings"

	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
)

// The command lines of the three binaries share these: cobra commands
// whose --help prints help and touches nothing (nothing connects before a
// command's own RunE), --version from the build info, the same --config,
// and exit statuses that tell a bad command line (2) from a failure (1).

// UsageError is a command line that cannot be run as given: an unknown
// command or flag, a missing or invalid argument, a flag that is
// required. Nothing was done. A binary says so, points at the command's
// --help, and exits with status 2.
type UsageError struct {
	Err error
	// Command is the command's path ("hookrelay events list").
	Command string
}

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// ConfigError is a config that cannot be found, read or validated; its
// message names each place looked at, or each key and its problem. A
// binary exits with status 2.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// Usagef is a UsageError for the command cmd, which found its command
// line wrong only once it ran (a combination of flags, say).
func Usagef(cmd *cobra.Command, format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...), Command: cmd.CommandPath()}
}

// ExitCode is a binary's exit status for err, the result of Execute: 0
// for success (or help), 2 for a bad command line or config, 1 for a
// command that failed.
func ExitCode(err error) int {
	var usage *UsageError
	var bad *ConfigError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &usage), errors.As(err, &bad):
		return 2
	}
	return 1
}

// Report writes what went wrong to stderr, prefixed with the binary's
// name; a usage error adds where the command's help is.
func Report(err error, name string, stderr io.Writer) {
	if err == nil {
		return
	}
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	var usage *UsageError
	if errors.As(err, &usage) && usage.Command != "" {
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", usage.Command)
	}
}

// Execute runs root with args, help to stdout and errors to stderr (which
// it does not print: see Report). Everything cobra refuses before a
// command's RunE starts (an unknown command or flag, arguments the command
// does not take, a required flag not set) comes back as a *UsageError.
func Execute(ctx context.Context, root *cobra.Command, args []string, stdout, stderr io.Writer) error {
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SilenceErrors = true
	root.SilenceUsage = true
	var ran bool
	var wrap func(c *cobra.Command)
	wrap = func(c *cobra.Command) {
		if c.RunE != nil {
			runE := c.RunE
			c.RunE = func(cmd *cobra.Command, args []string) error {
				ran = true
				return runE(cmd, args)
			}
		}
		for _, sub := range c.Commands() {
			wrap(sub)
		}
	}
	wrap(root)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &UsageError{Err: err, Command: c.CommandPath()}
	})
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil || ran {
		return err
	}
	var usage *UsageError
	if errors.As(err, &usage) {
		return err
	}
	path := root.CommandPath()
	if cmd != nil {
		path = cmd.CommandPath()
	}
	return &UsageError{Err: err, Command: path}
}

// NoArgs refuses arguments to a command that takes none; a command that
// only groups others names the one it does not know.
func NoArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	if cmd.HasSubCommands() {
		return fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())
	}
	return fmt.Errorf("%s takes no arguments, got %q", cmd.CommandPath(), strings.Join(args, " "))
}

// Version is the binary's version from its build info: the module's
// version (a tag, a pseudo-version, or "(devel)"), then the module path
// and, when built from a git checkout, the commit, its time, and
// "modified" when the checkout had uncommitted changes.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown: built without module information)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	parts := []string{bi.Main.Path}
	var rev, at string
	var modified bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev != "" {
		parts = append(parts, "revision "+rev[:min(12, len(rev))])
	}
	if at != "" {
		parts = append(parts, at)
	}
	if modified {
		parts = append(parts, "modified")
	}
	return v + " (" + strings.Join(parts, ", ") + ")"
}

// SetVersion gives cmd a --version flag printing "<name> <Version()>".
func SetVersion(cmd *cobra.Command) {
	cmd.Version = Version()
	cmd.SetVersionTemplate("{{.Name}} {{.Version}}\n")
}

// ConfigFlagUsage describes --config the same way in every binary.
const ConfigFlagUsage = "config file (default: $HOOKRELAY_CONFIG, else ./config.yaml)"

// Daemon is the command line of a daemon (the receiver, the dispatcher):
// no arguments, --config PATH, --version, --help. Running it finds and
// loads the config with every setting and secret (config.Load), builds the
// logger (writing to stderr) and calls run; it reports nothing itself
// (see Report). A config that cannot be found or loaded is a *ConfigError.
// --help and --version print to stdout and run nothing.
func Daemon(name, short, long string, lookupEnv config.LookupEnvFunc, stderr io.Writer,
	run func(ctx context.Context, cfg *config.Config, logger zerolog.Logger) error) *cobra.Command {
	var configPath string
	cmd := &cobra.Command{
		Use:   name,
		Short: short,
		Long:  long,
		Example: fmt.Sprintf("  %s --config /etc/hookrelay/config.yaml\n  HOOKRELAY_CONFIG=/etc/hookrelay/config.yaml %s",
			name, name),
		Args: NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, err := config.Find(configPath, lookupEnv)
			if err != nil {
				return &ConfigError{err}
			}
			cfg, err := config.Load(path, lookupEnv)
			if err != nil {
				return &ConfigError{err}
			}
			logger, err := NewLogger(cfg.Log, stderr)
			if err != nil {
				return &ConfigError{err}
			}
			return run(cmd.Context(), cfg, logger)
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", ConfigFlagUsage)
	SetVersion(cmd)
	return cmd
}
