package main

import (
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/spf13/cobra"
)

func (c *cli) teamsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "teams",
		Short: "Create and list the teams that own routes and sources",
		Long: `One platform team runs the relay; product teams own routes (routes[].team)
and sources (sources[].team), and their tokens (hookrelay tokens create --team)
see only their own routes, the deliveries and events of those routes, and
their own tokens and audit rows: anything of another team is "not found".
Postgres' row-level security keeps them apart, for a database.url role that
owns no table (hookrelay migrate with database.migrate_url makes it): the
receiver and the dispatcher refuse to run with a role it does not hold once a
team besides the platform exists.`,
		Args: setup.NoArgs,
		RunE: showHelp,
	}
	cmd.AddCommand(c.teamsCreateCmd(), c.teamsListCmd())
	return cmd
}

func (c *cli) teamsCreateCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "create NAME",
		Short:   "Create a team",
		Example: `  hookrelay teams create payments`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.withOps(cmd, func(_ *config.Config, svc *ops.Service) error {
				t, err := svc.TeamCreate(cmd.Context(), args[0])
				if errors.Is(err, ops.ErrInvalidRequest) {
					return setup.Usagef(cmd, "%s", strings.TrimPrefix(err.Error(), ops.ErrInvalidRequest.Error()+": "))
				}
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(c.out, "team %s created\n", t.Name)
				return err
			})
		},
	}
}

func (c *cli) teamsListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the teams",
		Args:  setup.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.withOps(cmd, func(_ *config.Config, svc *ops.Service) error {
				list, err := svc.TeamList(cmd.Context())
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(c.out, map[string]any{"total": len(list), "items": list})
				}
				tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tCREATED\tBY")
				for _, t := range list {
					fmt.Fprintf(tw, "%s\t%s\t%s\n", t.Name, t.CreatedAt.UTC().Format(time.RFC3339), t.CreatedBy)
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				_, err = fmt.Fprintf(c.out, "%d team(s)\n", len(list))
				return err
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print JSON: {"total", "items": [{"name", "created_at", "created_by"}]}`)
	return cmd
}
