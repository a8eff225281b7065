package main

import (
	"io"
	"path/filepath"
	"testing"

	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/stretchr/testify/require"
)

// dryParse parses a command line as the CLI would, flags and arguments
// (its Args check, required flags, flag groups), and runs nothing. A
// reference (a command named in prose, without flags or arguments) is
// only looked up.
func dryParse(args []string, reference bool) error {
	c := &cli{lookupEnv: noEnv, out: io.Discard, errOut: io.Discard}
	root := c.root()
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	cmd, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	if reference && len(rest) == 0 {
		return nil
	}
	cmd.InitDefaultHelpFlag()
	cmd.InitDefaultVersionFlag()
	if err := cmd.ParseFlags(rest); err != nil {
		return err
	}
	help, _ := cmd.Flags().GetBool("help")       // absent: false
	version, _ := cmd.Flags().GetBool("version") // likewise
	if help || version {
		return nil // it prints and runs nothing
	}
	if !cmd.Runnable() && cmd != root {
		return nil // a group: it prints its help
	}
	if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
		return err
	}
	if err := cmd.ValidateRequiredFlags(); err != nil {
		return err
	}
	return cmd.ValidateFlagGroups()
}

// Issue 38, first-time user 1: every hookrelay command README.md and
// docs/*.md show parses as written, its flags and its arguments checked
// as the command checks them (README showed "tokens create --name me",
// an unknown flag).
func TestShownCommandsParseDry(t *testing.T) {
	t.Parallel()
	shown, err := testenv.ShownCommands(filepath.Join("..", ".."))
	require.NoError(t, err)
	require.Greater(t, len(shown), 40)
	var failed []string
	for _, c := range shown {
		if err := dryParse(c.Args, c.Prose); err != nil {
			failed = append(failed, c.String()+": "+err.Error())
		}
	}
	require.Empty(t, failed)
	t.Logf("%d commands parsed", len(shown))
	require.Error(t, dryParse([]string{"tokens", "create", "--name", "me", "--role", "operator"}, true), "the check sees a wrong flag")
	require.Error(t, dryParse([]string{"events", "show"}, false), "the check sees a missing argument")
	require.Error(t, dryParse([]string{"events", "shw"}, true), "the check sees an unknown command")
}
