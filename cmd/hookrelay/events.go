package main

import (
	"errors"
	"os/user"
	"strings"

	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// withOps runs fn with the operator service over the database (schema
// checked) and the broker (dialled only when a command uses it), cmd's
// context naming the operator ("cli:<os user>") for the audit log.
func (c *cli) withOps(cmd *cobra.Command, fn func(cfg *config.Config, svc *ops.Service) error) error {
	cfg, err := c.config()
	if err != nil {
		return err
	}
	svc, closeOps, err := setup.OpenOps(cmd.Context(), cfg, "hookrelay-cli")
	if err != nil {
		return err
	}
	defer closeOps()
	// The CLI logs in to Postgres itself: it acts for the platform.
	cmd.SetContext(ops.WithTeam(ops.WithActor(cmd.Context(), cliActor()), ops.PlatformTeam))
	return fn(cfg, svc)
}

// cliActor names the operator at the shell: cli:<os user>.
func cliActor() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	return "cli:" + name
}

func (c *cli) eventsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "events",
		Short: "List events and show one with every attempt",
		Long: `Events are what the senders posted; each has a delivery per route it is bound
to: pending, retrying, delivered, dead or stale (not sent: a newer version of
its resource was delivered on a route with ordering drop_stale).`,
		Args: setup.NoArgs,
		RunE: showHelp,
	}
	cmd.AddCommand(c.eventsListCmd(), c.eventsShowCmd())
	return cmd
}

// filter is the event filter flags of events list and replay: the
// filter's one typed shape (ops.FilterFields), as the admin API and the
// console read it, with the command's limit.
type filter struct {
	ops.FilterFields
	limit int
	// key is events list's --key (replay has none: it replays by id).
	key string
}

func (f *filter) flags(fs *pflag.FlagSet, limit int, limitUsage string) {
	fs.StringVar(&f.Source, "source", "", "only events of this source")
	fs.StringVar(&f.EventType, "event-type", "", "only events of this type")
	fs.StringVar(&f.State, "state", "", "only events with a delivery in this state: pending, retrying, delivered, dead or stale")
	fs.StringVar(&f.Route, "route", "", "only events with a delivery to this route")
	fs.StringVar(&f.Since, "since", "", "only events received at or after this time: RFC 3339, or an age (2h, 3d)")
	fs.StringVar(&f.Until, "until", "", "only events received before this time: RFC 3339, or an age (2h, 3d)")
	fs.StringVar(&f.Where, "where", "", `only events this expression takes (the route filters' language, CEL): body.data.object.customer == "cus_Q8x"; without --since, the last 24h`)
	fs.IntVar(&f.limit, "limit", limit, limitUsage)
}

// filter is the store filter the flags give, checked as the admin API
// checks its query; a wrong one is a usage error naming its flag.
func (f *filter) filter(cmd *cobra.Command) (ops.EventFilter, error) {
	if f.limit < 0 {
		return ops.EventFilter{}, setup.Usagef(cmd, "--limit: must be positive")
	}
	sf, err := ops.ListFilter(f.FilterFields, f.limit, "", f.key)
	if err != nil {
		msg := strings.TrimPrefix(err.Error(), ops.ErrInvalidRequest.Error()+": ")
		return sf, setup.Usagef(cmd, "--%s", strings.Replace(msg, "_", "-", 1))
	}
	return sf, nil
}

func (c *cli) eventsListCmd() *cobra.Command {
	var f filter
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List events with each route's delivery state, newest first",
		Long: `List the events the filters select, newest first, with each route's delivery
state and attempt count. It shows --limit of them and, when more match, ends
with "100 of 112 shown (--limit N for more)".

--where searches what the events say: a bool expression over body, headers,
source, event_type and received_at, in the language of route filters (CEL).
It needs a window: without --since it searches the last 24 hours, and says so.
A comparison of a body field with a constant (body.a.b == "x", joined to the
rest with &&) is found through an index; any other expression reads every body
in the window.`,
		Example: `  hookrelay events list --route billing --state dead --since 3h
  hookrelay events list --where 'body.data.object.customer == "cus_Q8x"' --since 7d
  hookrelay events list --source github --where 'body.repository.name == "billing-service"' --state dead
  hookrelay events list --key evt_1QAbc
  hookrelay events list --source stripe --event-type invoice.paid --since 2026-11-27T14:00:00Z --json`,
		Args: setup.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sf, err := f.filter(cmd)
			if err != nil {
				return err
			}
			var list *ops.EventList
			err = c.operate(cmd, func(_ *config.Config, svc *ops.Service) (err error) {
				list, err = svc.EventList(cmd.Context(), sf)
				return err
			}, func(r *remote) (err error) {
				list, err = r.eventList(cmd.Context(), f)
				return err
			})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(c.out, list)
			}
			return printEvents(c.out, list)
		},
	}
	f.flags(cmd.Flags(), ops.DefaultListLimit, "most events to show")
	cmd.Flags().StringVar(&f.key, "key", "", "only events with this sender's id (idempotency key), of any source")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print JSON: {"total", "shown", "items"}`)
	return cmd
}

func (c *cli) eventsShowCmd() *cobra.Command {
	var asJSON bool
	var source string
	cmd := &cobra.Command{
		Use:   "show EVENT-ID",
		Short: "Show one event, its deliveries and every attempt",
		Long: `Show one event, by our id or the sender's own (its idempotency key, evt_1Q…;
--source when two sources used it), each route's delivery and every attempt: when it started, how
long it took, the HTTP status, the error, the first KiB of the response.
Attempts are numbered within their series: a replay or a requeued dead
letter starts a new series. A retrying delivery says when its next attempt
is due.`,
		Example: `  hookrelay events show 01a229c8-bab8-7a6b-bf48-19685687e687 --json
  hookrelay events show evt_1QAbc --source stripe`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 || strings.TrimSpace(args[0]) == "" {
				return errors.New("events show needs one event id: ours, or the sender's")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var ev *ops.EventDetail
			err := c.operate(cmd, func(_ *config.Config, svc *ops.Service) (err error) {
				ev, err = svc.EventFind(cmd.Context(), args[0], source)
				if errors.Is(err, ops.ErrNotFound) || errors.Is(err, ops.ErrInvalidRequest) {
					return errors.New(plainMessage(err))
				}
				return err
			}, func(r *remote) (err error) {
				ev, err = r.eventFind(cmd.Context(), args[0], source)
				return err
			})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(c.out, ev)
			}
			return printEvent(c.out, ev)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (response headers included)")
	cmd.Flags().StringVar(&source, "source", "", "the source whose event it is, when two sources used the sender's id")
	return cmd
}

// plainMessage is err's message without the prefix of the sentinel it
// wraps ("invalid request: ", "not found: "): what the operator reads.
func plainMessage(err error) string {
	msg := err.Error()
	for _, s := range []error{ops.ErrInvalidRequest, ops.ErrNotFound, ops.ErrConflict} {
		msg = strings.TrimPrefix(msg, s.Error()+": ")
	}
	return msg
}
