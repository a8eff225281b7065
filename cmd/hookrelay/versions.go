package main

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/spf13/cobra"
)

func (c *cli) versionsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "versions",
		Short: "Show or reset the newest delivered version of a resource on a route",
		Long: `On a route with ordering drop_stale, an event is not POSTed when a newer version
of its resource (its source's ordering) was delivered there before. The newest
version kept per route and resource can be shown, and reset: the resource's
next event is then delivered whatever its version (a sender whose versions
went back, or a wrong version that silenced the resource). Purge forgets a
version once no event of its resource is left whole.`,
		Args: setup.NoArgs,
		RunE: showHelp,
	}
	cmd.AddCommand(c.versionCmd(false), c.versionCmd(true))
	return cmd
}

func (c *cli) versionCmd(reset bool) *cobra.Command {
	var req ops.VersionRequest
	var asJSON bool
	use, short, example := "show", "Show the newest version of a resource delivered on a route",
		`  hookrelay versions show --route orders --source shop --resource gid://shopify/Order/1`
	if reset {
		use, short, example = "reset", "Forget the version of a resource on a route: its next event is delivered",
			`  hookrelay versions reset --route orders --source shop --resource gid://shopify/Order/1`
	}
	cmd := &cobra.Command{
		Use:     use + " --route ROUTE --source SOURCE --resource RESOURCE",
		Short:   short,
		Example: example,
		Args:    setup.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var v *ops.Version
			err := c.operate(cmd, func(_ *config.Config, svc *ops.Service) (err error) {
				if reset {
					v, err = svc.ResourceVersionReset(cmd.Context(), req)
				} else {
					v, err = svc.ResourceVersion(cmd.Context(), req)
				}
				return err
			}, func(r *remote) (err error) {
				v, err = r.version(cmd.Context(), req, reset)
				var ae *APIError
				if errors.As(err, &ae) && ae.Code == "not_found" {
					return ops.ErrNotFound
				}
				return err
			})
			if errors.Is(err, ops.ErrNotFound) {
				return fmt.Errorf("no version of %s %s is kept on route %s (none delivered, or reset, or purged)", req.Source, req.Resource, req.Route)
			}
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(c.out, v)
			}
			return printVersion(c.out, v, reset)
		},
	}
	cmd.Flags().StringVar(&req.Route, "route", "", "the route (required)")
	cmd.Flags().StringVar(&req.Source, "source", "", "the source whose resource it is (required)")
	cmd.Flags().StringVar(&req.Resource, "resource", "", "the resource, as its events carry it (required)")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print JSON: {"route", "source", "resource", "version", "event_id", "delivered_at"}`)
	for _, f := range []string{"route", "source", "resource"} {
		_ = cmd.MarkFlagRequired(f) // declared just above
	}
	return cmd
}

func printVersion(w io.Writer, v *ops.Version, reset bool) error {
	verb := "newest version"
	if reset {
		verb = "forgot version"
	}
	_, err := fmt.Fprintf(w, "%s %s of %s %s on route %s (delivered by event %s at %s)\n",
		verb, v.Version, v.Source, v.Resource, v.Route, v.EventID, v.DeliveredAt.UTC().Format(time.RFC3339))
	return err
}
