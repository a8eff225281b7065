package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/spf13/cobra"
)

func (c *cli) tokensCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tokens",
		Short: "Create, list and revoke the admin API's named tokens",
		Long: `The admin API (/api/v1, on admin.listen) takes a named token with a role:
viewer reads; operator also retries, replays, requeues, drops dead letters and
pauses routes; admin also purges, resets versions and manages tokens. Postgres
keeps only a hash of each token; the token itself is printed once, when it is
created. Every change made with it is in the audit log under token:NAME.`,
		Args: setup.NoArgs,
		RunE: showHelp,
	}
	cmd.AddCommand(c.tokensCreateCmd(), c.tokensListCmd(), c.tokensRevokeCmd())
	return cmd
}

func (c *cli) tokensCreateCmd() *cobra.Command {
	var role, expires, team string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "create NAME --role viewer|operator|admin [--team TEAM] [--expires 90d]",
		Short: "Create a token and print it, once",
		Long: `Create the token NAME with a role and print it on stdout, once: Postgres
keeps only its hash, so a lost token is revoked and made anew. A token acts
for a team: the platform team's (the default) see every team; another
team's see only that team's routes, their deliveries and events, and its
own tokens and audit rows.`,
		Example: `  hookrelay tokens create ci-bot --role operator --expires 90d
  hookrelay tokens create payments-oncall --role operator --team payments`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := ops.TokenRequest{Name: args[0], Role: role, Team: team}
			if expires != "" {
				d, err := config.ParseDuration(expires)
				if err != nil || d <= 0 {
					return setup.Usagef(cmd, "--expires: want a positive duration with a unit (90d, 12h)")
				}
				req.ExpiresIn = d
			}
			var t *ops.NewToken
			err := c.operate(cmd, func(_ *config.Config, svc *ops.Service) (err error) {
				t, err = svc.TokenCreate(cmd.Context(), req)
				if errors.Is(err, ops.ErrInvalidRequest) {
					return setup.Usagef(cmd, "%s", strings.TrimPrefix(err.Error(), ops.ErrInvalidRequest.Error()+": "))
				}
				return err
			}, func(r *remote) (err error) {
				t, err = r.tokenCreate(cmd.Context(), req.Name, req.Role, req.Team, expires)
				return err
			})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(c.out, t)
			}
			exp := "never"
			if t.ExpiresAt != nil {
				exp = t.ExpiresAt.Format(time.RFC3339)
			}
			fmt.Fprintf(c.errOut, "token %s created for team %s with role %s, expires %s; it is shown this once:\n", t.Name, t.Team, t.Role, exp)
			_, err = fmt.Fprintln(c.out, t.Secret)
			return err
		},
	}
	cmd.Flags().StringVar(&role, "role", "", "viewer, operator or admin (required)")
	cmd.Flags().StringVar(&expires, "expires", "", "end the token this long after now (90d, 12h); default never")
	cmd.Flags().StringVar(&team, "team", "", "the team the token acts for (hookrelay teams list); default the platform team, which sees every team")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print JSON: {"name", "role", "team", "created_at", "expires_at", "secret"}`)
	_ = cmd.MarkFlagRequired("role") // declared just above
	_ = cmd.RegisterFlagCompletionFunc("role", cobra.FixedCompletions(ops.Roles, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func (c *cli) tokensListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the tokens: name, role, created, last used, expiry; never the tokens themselves",
		Args:  setup.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var list []ops.Token
			err := c.operate(cmd, func(_ *config.Config, svc *ops.Service) (err error) {
				list, err = svc.TokenList(cmd.Context())
				return err
			}, func(r *remote) (err error) {
				list, err = r.tokenList(cmd.Context())
				return err
			})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(c.out, map[string]any{"total": len(list), "items": list})
			}
			return printTokens(c.out, list)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print JSON: {"total", "items": [{"name", "role", "team", "created_at", "created_by", "expires_at", "last_used_at", "revoked_at"}]}`)
	return cmd
}

func printTokens(w io.Writer, list []ops.Token) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tROLE\tTEAM\tCREATED\tBY\tLAST USED\tEXPIRES\tSTATE")
	at := func(t *time.Time, none string) string {
		if t == nil {
			return none
		}
		return t.UTC().Format(time.RFC3339)
	}
	now := time.Now()
	for _, t := range list {
		state := "active"
		switch {
		case t.RevokedAt != nil:
			state = "revoked " + at(t.RevokedAt, "")
		case t.ExpiresAt != nil && !t.ExpiresAt.After(now):
			state = "expired"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, t.Role, t.Team, t.CreatedAt.UTC().Format(time.RFC3339), t.CreatedBy,
			at(t.LastUsedAt, "never"), at(t.ExpiresAt, "never"), state)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d token(s)\n", len(list))
	return err
}

func (c *cli) tokensRevokeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "revoke NAME",
		Short: "Revoke a token: the next request that carries it is refused",
		Long: `Revoke the token NAME: the next request that carries it is refused. Token
names are each team's own: name another team's token as TEAM:NAME, or by its
name alone when one team only has a live token so named.`,
		Example: `  hookrelay tokens revoke ci-bot
  hookrelay tokens revoke payments:ci-bot`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			err := c.operate(cmd, func(_ *config.Config, svc *ops.Service) error {
				err := svc.TokenRevoke(cmd.Context(), args[0])
				if errors.Is(err, ops.ErrNotFound) {
					return fmt.Errorf("no token %q to revoke (hookrelay tokens list shows them)", args[0])
				}
				return err
			}, func(r *remote) error { return r.tokenRevoke(cmd.Context(), args[0]) })
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(c.out, "token %s revoked: requests carrying it are refused from now on\n", args[0])
			return err
		},
	}
}

func (c *cli) auditCmd() *cobra.Command {
	var f ops.AuditFilterFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "List the audit log: who changed what, when, with what result",
		Long: `Every change made from the CLI or the admin API (pause, resume, retry, replay,
requeue, drop, purge, version reset, token create and revoke) is logged in
Postgres with who made it (token:NAME, cli:USER or config:admin.token), its
arguments, when, and how it ended. Reading writes nothing to it. Newest first.`,
		Example: `  hookrelay audit --since 24h
  hookrelay audit --actor token:ci-bot --action replay --json`,
		Args: setup.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			filter, err := f.Filter()
			if err != nil {
				return setup.Usagef(cmd, "%s", err.Error())
			}
			var rows []ops.AuditEntry
			var total int64
			err = c.operate(cmd, func(_ *config.Config, svc *ops.Service) (err error) {
				rows, total, err = svc.AuditList(cmd.Context(), filter)
				return err
			}, func(r *remote) (err error) {
				rows, total, err = r.auditList(cmd.Context(), f)
				return err
			})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(c.out, map[string]any{"total": total, "items": rows})
			}
			return printAudit(c.out, rows, total)
		},
	}
	cmd.Flags().StringVar(&f.Actor, "actor", "", "only this actor (token:NAME, cli:USER, config:admin.token)")
	cmd.Flags().StringVar(&f.Action, "action", "", "only this action ("+strings.Join(ops.AuditActions, ", ")+")")
	cmd.Flags().StringVar(&f.Target, "target", "", "only this target (a route, a token name)")
	cmd.Flags().StringVar(&f.Since, "since", "", "from this time (RFC 3339) or age (2h, 3d)")
	cmd.Flags().StringVar(&f.Until, "until", "", "before this time (RFC 3339) or age")
	cmd.Flags().IntVar(&f.Limit, "limit", ops.DefaultListLimit, "show at most this many")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print JSON: {"total", "items": [{"id", "at", "actor", "action", "target", "args", "outcome", "result"}]}`)
	_ = cmd.RegisterFlagCompletionFunc("action", cobra.FixedCompletions(ops.AuditActions, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func printAudit(w io.Writer, rows []ops.AuditEntry, total int64) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tACTOR\tACTION\tTARGET\tOUTCOME\tARGS\tRESULT")
	for _, e := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.At.UTC().Format(time.RFC3339), e.Actor, e.Action, dash(e.Target), e.Outcome,
			compact(e.Args), compact(e.Result))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d of %d row(s)\n", len(rows), total)
	return err
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// compact prints a map as k=v pairs in key order.
func compact(m map[string]any) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%v", k, m[k])
	}
	return strings.Join(parts, " ")
}
