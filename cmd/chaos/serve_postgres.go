package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
)

// settingRE is one name=value Postgres setting, without spaces or quotes
// (pg_ctl hands its -o options to a shell).
var settingRE = regexp.MustCompile(`^[a-z_][a-z0-9_.]*=[A-Za-z0-9_.,:/+-]+$`)

// settingsFlag collects repeated --setting name=value flags.
type settingsFlag []string

func (s *settingsFlag) String() string { return strings.Join(*s, " ") }

func (s *settingsFlag) Set(v string) error {
	if !settingRE.MatchString(v) {
		return fmt.Errorf("want name=value without spaces or quotes, got %q", v)
	}
	*s = append(*s, v)
	return nil
}

// servePostgres is `chaos postgres`: the suite's scratch Postgres alone
// (initdb in --work, on --pg-port, with the given settings instead of the
// suite's), for other tools such as scripts/profile.sh. It prints
// "ready <url>" once the server accepts connections, and stops the server
// when ctx is done (SIGINT, SIGTERM).
func servePostgres(ctx context.Context, args []string, out io.Writer) (err error) {
	fs := flag.NewFlagSet("chaos postgres", flag.ContinueOnError)
	work := fs.String("work", "", "folder for the data directory and the log (required; must not hold a data directory yet)")
	port := fs.Int("pg-port", defaultPGPort, "port to listen on (127.0.0.1)")
	var settings settingsFlag
	fs.Var(&settings, "setting", "a server setting name=value (repeatable), e.g. shared_preload_libraries=pg_stat_statements")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("postgres: unexpected arguments %q", fs.Args())
	}
	if *work == "" {
		return errors.New("postgres: --work is required")
	}
	if *port < 1 || *port > 65535 {
		return fmt.Errorf("postgres: --pg-port %d is not a port", *port)
	}
	if err := os.MkdirAll(*work, 0o755); err != nil {
		return err
	}
	if err := chownToPostgres(*work); err != nil {
		return err
	}
	pg, err := newPostgres(*work, *port)
	if err != nil {
		return err
	}
	pg.settings = settings
	if err := pg.start(); err != nil {
		return fmt.Errorf("starting postgres (log: %s): %w", pg.log, err)
	}
	defer func() {
		if serr := pg.stop(); serr != nil {
			err = errors.Join(err, fmt.Errorf("stopping postgres: %w", serr))
		}
	}()
	fmt.Fprintln(out, "ready", pg.url("postgres"))
	<-ctx.Done()
	return nil
}
