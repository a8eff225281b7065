package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"text/tabwriter"

	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

func (c *cli) loginCmd() *cobra.Command {
	var name string
	var fromStdin bool
	cmd := &cobra.Command{
		Use:   "login URL",
		Short: "Log in to a relay's admin API with a token, and use it from now on",
		Long: `Store a context: the admin listener's URL and a token (hookrelay tokens create,
or admin.token), in ~/.config/hookrelay/config.yaml (mode 0600), and make it
the current one. From then on every operator command (routes, events, retry,
replay, dead, purge, versions, tokens, audit, jobs, listen) is a request to
that relay's /api/v1 under the token's role and team: no database or broker
URL is needed, and a team's token gives that team's CLI.

The token is read from the terminal without echo, or from standard input
with --token-stdin. It is checked against the relay before it is stored.
HOOKRELAY_SERVER and HOOKRELAY_TOKEN, when both set, take the place of the
current context (for scripts).`,
		Example: `  hookrelay login https://relay-admin.example.com
  printf %s "$TOKEN" | hookrelay login http://127.0.0.1:8081 --token-stdin --name local`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return setup.Usagef(cmd, "login needs the admin listener's URL")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			token, err := c.readToken(fromStdin)
			if err != nil {
				return err
			}
			r, err := newRemote(args[0], token)
			if err != nil {
				return setup.Usagef(cmd, "%s", err.Error())
			}
			if u, _ := url.Parse(r.server); u.Scheme == "http" && !loopbackHost(u.Hostname()) {
				fmt.Fprintf(c.errOut, "warning: %s is plain HTTP: the token crosses the network in clear; use https:// (a proxy that terminates TLS)\n", r.server)
			}
			// Any token may list the routes: the check that it is one.
			var routes listing[struct{}]
			if err := into(&routes)(r.api.ListRoutes(cmd.Context())); err != nil {
				return fmt.Errorf("logging in to %s: %w", r.server, err)
			}
			if name == "" {
				u, _ := url.Parse(r.server) // newRemote parsed it
				name = u.Host
			}
			cs, path, err := c.loadContexts()
			if err != nil {
				return err
			}
			if cur := cs.find(name); cur != nil {
				cur.Server, cur.Token = r.server, token
			} else {
				cs.Contexts = append(cs.Contexts, cliContext{Name: name, Server: r.server, Token: token})
			}
			cs.Current = name
			if err := saveContexts(path, cs); err != nil {
				return fmt.Errorf("storing the context in %s: %w", path, err)
			}
			_, err = fmt.Fprintf(c.out, "logged in to %s (it shows this token %d route(s)); context %q is current, stored in %s\n",
				r.server, routes.Total, name, path)
			return err
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "the context's name (default: the URL's host:port)")
	cmd.Flags().BoolVar(&fromStdin, "token-stdin", false, "read the token from standard input")
	return cmd
}

// readToken reads a token from stdin (fromStdin) or, without echo, from
// the terminal.
func (c *cli) readToken(fromStdin bool) (string, error) {
	var raw []byte
	var err error
	switch {
	case fromStdin:
		raw, err = io.ReadAll(io.LimitReader(c.in, 4096))
	case c.inTerminal:
		fmt.Fprint(c.errOut, "token: ")
		raw, err = term.ReadPassword(0) // stdin is the terminal: checked above
		fmt.Fprintln(c.errOut)
	default:
		return "", errors.New("no terminal to read the token from: pass it on standard input with --token-stdin")
	}
	if err != nil {
		return "", fmt.Errorf("reading the token: %w", err)
	}
	token := strings.TrimSpace(string(raw))
	if token == "" {
		return "", errors.New("no token given")
	}
	return token, nil
}

func (c *cli) contextCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "context",
		Short: "List the relays logged in to, and choose the one the CLI uses",
		Long: `The contexts hookrelay login stored (~/.config/hookrelay/config.yaml): a name,
a server and a token each. The current one is where every operator command
goes; none current means the direct mode (config.yaml's database and broker).`,
		Args: setup.NoArgs,
		RunE: showHelp,
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List the stored contexts; * marks the current one",
		Args:  setup.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cs, _, err := c.loadContexts()
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "CURRENT\tNAME\tSERVER")
			for _, x := range cs.Contexts {
				mark := ""
				if x.Name == cs.Current {
					mark = "*"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", mark, x.Name, x.Server)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			_, err = fmt.Fprintf(c.out, "%d context(s)\n", len(cs.Contexts))
			return err
		},
	}
	use := &cobra.Command{
		Use:   "use NAME",
		Short: "Make a stored context the current one; --direct for none (config.yaml's database)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			direct, _ := cmd.Flags().GetBool("direct")
			if direct == (len(args) == 1) {
				return setup.Usagef(cmd, "give a context's name, or --direct")
			}
			cs, path, err := c.loadContexts()
			if err != nil {
				return err
			}
			name := ""
			if !direct {
				name = args[0]
				if cs.find(name) == nil {
					return fmt.Errorf("no context %q: hookrelay context list shows them", name)
				}
			}
			cs.Current = name
			if err := saveContexts(path, cs); err != nil {
				return err
			}
			if direct {
				_, err = fmt.Fprintln(c.out, "no context is current: the CLI uses config.yaml's database and broker")
				return err
			}
			_, err = fmt.Fprintf(c.out, "context %q is current\n", name)
			return err
		},
	}
	use.Flags().Bool("direct", false, "make no context current")
	cmd.AddCommand(list, use)
	return cmd
}

// loopbackHost reports whether host names this machine.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
