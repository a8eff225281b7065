package main

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// routeFlags are the settings of a route made or changed at run time.
type routeFlags struct {
	team, url, timeout, cooldown, ordering string
	bindings, headers                      []string
	noRetry                                []int
	concurrency, maxAttempts, failures     int
	burst                                  int
	rate                                   float64
	sendTraceparent                        bool
	filter, transform, transformHeaders    string
	onDead                                 string
	kind, exchange, routingKey             string
}

func (f *routeFlags) add(fs *pflag.FlagSet, create bool) {
	if create {
		fs.StringVar(&f.team, "team", "", "the team that owns the route (default the platform)")
	}
	fs.StringVar(&f.kind, "kind", "", "http (POST each event to --url; the default) or amqp (publish it to --exchange on the broker at --url)")
	fs.StringVar(&f.url, "url", "", "the destination: an http:// or https:// URL; for --kind amqp an amqp:// or amqps:// URL (its credentials are stored sealed)")
	fs.StringVar(&f.exchange, "exchange", "", "--kind amqp: the exchange to publish to (it must exist on the destination broker)")
	fs.StringVar(&f.routingKey, "routing-key", "", "--kind amqp: the routing key, a template: {source}, {event_type}, {event_id}, {body.PATH} (default {source}.{event_type})")
	fs.StringSliceVar(&f.bindings, "binding", nil, "a topic pattern over <source>.<event_type> (repeat, or comma-separated); given, they replace all")
	fs.StringVar(&f.timeout, "timeout", "", "one attempt's time limit, with a unit (default 10s)")
	fs.IntVar(&f.concurrency, "concurrency", 0, "consumers per dispatcher, 1-256 (default 1)")
	fs.StringArrayVar(&f.headers, "header", nil, "a header added to every delivery, NAME=VALUE (repeat); given, they replace all; --header '' clears them")
	fs.IntSliceVar(&f.noRetry, "no-retry-status", nil, "a status that goes straight to dead letters (repeat)")
	fs.IntVar(&f.maxAttempts, "max-attempts", 0, "attempts before dead-lettering (default one per retry tier plus the first)")
	fs.IntVar(&f.failures, "circuit-failures", 0, "consecutive failures that open the circuit; 0 turns it off (default 10)")
	fs.StringVar(&f.cooldown, "circuit-cooldown", "", "how long the circuit stays open before a probe (default 30s)")
	fs.Float64Var(&f.rate, "rate-limit", 0, "deliveries per second for the route; 0 for none")
	fs.IntVar(&f.burst, "burst", 0, "deliveries that may go at once after a quiet spell (default 1)")
	fs.StringVar(&f.ordering, "ordering", "", "none, drop_stale or fifo: one event of a resource at a time, in order (default none)")
	fs.StringVar(&f.onDead, "on-dead", "", "with ordering fifo: block (a dead event holds its resource until requeued) or skip (default block)")
	fs.BoolVar(&f.sendTraceparent, "send-traceparent", true, "send the trace context (traceparent) to the destination when tracing; --send-traceparent=false keeps it out")
	addRuleFlags(fs, &f.filter, &f.transform, &f.transformHeaders)
}

// addRuleFlags adds the flags of a route's rules (docs/rules.md).
func addRuleFlags(fs *pflag.FlagSet, filter, transform, headers *string) {
	fs.StringVar(filter, "filter", "", "a CEL expression over the event (body, headers, source, event_type, received_at): the route takes an event only when it yields true; '' for none")
	fs.StringVar(transform, "transform", "", "a CEL expression that yields the body to deliver (a map or list as JSON, a string as is); '' for none")
	fs.StringVar(headers, "transform-headers", "", "a CEL expression that yields a map of headers to add to each delivery; '' for none")
}

// input is the settings whose flags were given.
func (f *routeFlags) input(cmd *cobra.Command) (ops.RouteInput, error) {
	in := ops.RouteInput{Bindings: given(cmd, "binding", f.bindings), NoRetryStatuses: given(cmd, "no-retry-status", f.noRetry)}
	if cmd.Flags().Changed("team") {
		in.Team = f.team
	}
	for flag, set := range map[string]func(){
		"url": func() { in.URL = &f.url }, "timeout": func() { in.Timeout = &f.timeout },
		"kind": func() { in.Kind = &f.kind }, "exchange": func() { in.Exchange = &f.exchange }, "routing-key": func() { in.RoutingKey = &f.routingKey },
		"concurrency": func() { in.Concurrency = &f.concurrency }, "max-attempts": func() { in.MaxAttempts = &f.maxAttempts },
		"circuit-failures": func() { in.CircuitFailures = &f.failures }, "circuit-cooldown": func() { in.CircuitCooldown = &f.cooldown },
		"rate-limit": func() { in.RateLimit = &f.rate }, "burst": func() { in.Burst = &f.burst }, "ordering": func() { in.Ordering = &f.ordering },
		"on-dead":          func() { in.OnDead = &f.onDead },
		"send-traceparent": func() { in.SendTraceparent = &f.sendTraceparent },
		"filter":           func() { in.Filter = &f.filter }, "transform": func() { in.Transform = &f.transform },
		"transform-headers": func() { in.TransformHeaders = &f.transformHeaders },
	} {
		if cmd.Flags().Changed(flag) {
			set()
		}
	}
	if cmd.Flags().Changed("header") {
		in.Headers = map[string]string{}
		for _, h := range f.headers {
			if h == "" {
				continue
			}
			k, v, ok := strings.Cut(h, "=")
			if !ok || k == "" {
				return in, setup.Usagef(cmd, "--header: want NAME=VALUE")
			}
			in.Headers[k] = v
		}
	}
	return in, nil
}

// given is v when flag was given, else nil (unchanged).
func given[T any](cmd *cobra.Command, flag string, v []T) []T {
	if !cmd.Flags().Changed(flag) {
		return nil
	}
	if v == nil {
		return []T{}
	}
	return v
}

// usage turns a refused request into a usage error (exit 2).
func usage(cmd *cobra.Command, err error) error {
	if errors.Is(err, ops.ErrInvalidRequest) {
		return setup.Usagef(cmd, "%s", strings.TrimPrefix(err.Error(), ops.ErrInvalidRequest.Error()+": "))
	}
	return err
}

func (c *cli) routesCreateCmd() *cobra.Command {
	var f routeFlags
	cmd := &cobra.Command{
		Use:   "create NAME --url URL --binding PATTERN...",
		Short: "Make a route at run time; prints its signing secret once",
		Long: `Make a route without a deploy: stored in Postgres, followed by every receiver
and dispatcher within 2 seconds (its queue and bindings declared, its consumers
started). The relay makes its signing secret and prints it once: give it to the
destination, which verifies each delivery's webhook-signature with it. It is
stored sealed with secrets.key (HOOKRELAY_SECRETS_KEY); only its fingerprint is
shown afterwards. A setting left out gets the default a route of config.yaml
gets. A route of a team other than the platform is named TEAM:NAME (the team
taken from the name when --team is not given), so that its name never meets
a route of config.yaml or another team's. A team's route never reaches the relay's own side: a URL whose
address (or whose name's address) is loopback, private, link-local or otherwise
not globally reachable is refused, unless team_routes.allowed_networks names its
network; the dispatchers check again at every connect.`,
		Example: `  hookrelay routes create billing-audit --url https://audit.example.com/hooks --binding 'acme.invoice.*'
  hookrelay routes create sales:crm --url https://crm.example.com/in --binding acme.customer.created --concurrency 4`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, err := f.input(cmd)
			if err != nil {
				return err
			}
			var res *ops.RouteCreated
			err = c.operate(cmd, func(_ *config.Config, svc *ops.Service) (err error) {
				res, err = svc.RouteCreate(cmd.Context(), args[0], in)
				return usage(cmd, err)
			}, func(r *remote) (err error) {
				res, err = r.routeCreate(cmd.Context(), args[0], in)
				return err
			})
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(c.out, "route %s created for team %s (secret %s); every dispatcher delivers it within 2s\nsigning secret (shown once): %s\n",
				res.Route.Name, res.Route.Team, res.Route.SecretFingerprint, res.Secret)
			return err
		},
	}
	f.add(cmd.Flags(), true)
	return cmd
}

func (c *cli) routesUpdateCmd() *cobra.Command {
	var f routeFlags
	cmd := &cobra.Command{
		Use:   "update NAME [flags]",
		Short: "Change a route made at run time; every dispatcher follows within 2s",
		Long: `Change the settings given of a route made at run time (a route of config.yaml
changes by a deploy of the config). Removing a binding stops its events within
2 seconds: the queue is unbound from it.`,
		Example: `  hookrelay routes update billing-audit --binding 'acme.invoice.paid' --concurrency 2`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, err := f.input(cmd)
			if err != nil {
				return err
			}
			var d *ops.RouteDetail
			err = c.operate(cmd, func(_ *config.Config, svc *ops.Service) (err error) {
				d, err = svc.RouteUpdate(cmd.Context(), args[0], in)
				return usage(cmd, err)
			}, func(r *remote) (err error) {
				d, err = r.routeUpdate(cmd.Context(), args[0], in)
				return err
			})
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(c.out, "route %s updated to version %d (bindings %s)\n", d.Name, d.Version, strings.Join(d.Settings.Bindings, ", "))
			return err
		},
	}
	f.add(cmd.Flags(), false)
	return cmd
}

func (c *cli) routesDeleteCmd() *cobra.Command {
	var drain, deadLetter bool
	cmd := &cobra.Command{
		Use:   "delete NAME [--drain | --dead-letter]",
		Short: "Delete a route made at run time",
		Long: `Delete a route made at run time: it takes no new event within 2 seconds. A
route with undelivered deliveries is refused unless told what to do with them:
--drain delivers them first, --dead-letter moves them to the route's dead-letter
queue (each recorded dead, reason route_deleted). The route's queue goes once
nothing of it is undelivered; its dead-letter queue stays for the operator.`,
		Example: `  hookrelay routes delete billing-audit
  hookrelay routes delete billing-audit --dead-letter`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			disposal := ""
			switch {
			case drain && deadLetter:
				return setup.Usagef(cmd, "--drain and --dead-letter: give one")
			case drain:
				disposal = ops.DisposeDeliver
			case deadLetter:
				disposal = ops.DisposeDeadLetter
			}
			var res *ops.RouteDeleted
			err := c.operate(cmd, func(_ *config.Config, svc *ops.Service) (err error) {
				res, err = svc.RouteDelete(cmd.Context(), args[0], disposal)
				return usage(cmd, err)
			}, func(r *remote) (err error) {
				res, err = r.routeDelete(cmd.Context(), args[0], disposal)
				return err
			})
			if err != nil {
				return err
			}
			if res.Undelivered == 0 {
				_, err = fmt.Fprintf(c.out, "route %s deleted; nothing undelivered: it goes within seconds (anything arriving late: %s)\n", res.Route, dispose(res.Disposal))
				return err
			}
			_, err = fmt.Fprintf(c.out, "route %s deleted; %d undelivered: %s, then the route goes\n", res.Route, res.Undelivered, dispose(res.Disposal))
			return err
		},
	}
	cmd.Flags().BoolVar(&drain, "drain", false, "deliver the route's undelivered work first")
	cmd.Flags().BoolVar(&deadLetter, "dead-letter", false, "move the route's undelivered work to its dead letters")
	return cmd
}

func dispose(disposal string) string {
	if disposal == ops.DisposeDeliver {
		return "the dispatchers deliver them"
	}
	return "the dispatchers move them to its dead letters"
}

func (c *cli) routesRotateCmd() *cobra.Command {
	var overlap time.Duration
	cmd := &cobra.Command{
		Use:   "rotate-secret NAME [--overlap 24h]",
		Short: "Give a route made at run time a new signing secret; prints it once",
		Long: `Make a new signing secret for a route made at run time and print it once. For
the overlap (default secrets.overlap, 24h) every delivery carries both
signatures, the new one first, so the destination can switch; then only the
new one.`,
		Example: `  hookrelay routes rotate-secret billing-audit --overlap 1h`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var d *time.Duration
			if cmd.Flags().Changed("overlap") {
				d = &overlap
			}
			var res *ops.SecretRotated
			err := c.operate(cmd, func(_ *config.Config, svc *ops.Service) (err error) {
				res, err = svc.RouteRotateSecret(cmd.Context(), args[0], d)
				return usage(cmd, err)
			}, func(r *remote) (err error) {
				res, err = r.routeRotate(cmd.Context(), args[0], d)
				return err
			})
			if err != nil {
				return err
			}
			until := "the previous secret no longer signs"
			if res.PreviousUntil != nil {
				until = "the previous secret still signs until " + res.PreviousUntil.UTC().Format(time.RFC3339)
			}
			_, err = fmt.Fprintf(c.out, "route %s: new secret %s; %s\nsigning secret (shown once): %s\n", res.Route, res.Fingerprint, until, res.Secret)
			return err
		},
	}
	cmd.Flags().DurationVar(&overlap, "overlap", 0, "how long the previous secret still signs (default secrets.overlap)")
	return cmd
}

func (c *cli) routesResealCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "reseal",
		Short: "Seal every run-time route's secrets with secrets.key (after a key rotation)",
		Long: `Rotating secrets.key: put the new key in secrets.key and the old one in
secrets.previous_keys on every process, restart them, run this, then remove
the old key. It opens each sealed signing secret and header value with
whichever key sealed it and seals it again with secrets.key, in one
transaction.`,
		Args: setup.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.withOps(cmd, func(_ *config.Config, svc *ops.Service) error {
				n, err := svc.RouteReseal(cmd.Context())
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(c.out, "%d route(s) sealed with secrets.key\n", n)
				return err
			})
		},
	}
}

func (c *cli) routesTestCmd() *cobra.Command {
	var (
		event, route                        string
		filter, transform, transformHeaders string
		asJSON                              bool
	)
	cmd := &cobra.Command{
		Use:   "test --event ID [--route NAME] [--filter EXPR] [--transform EXPR] [--transform-headers EXPR]",
		Short: "Try a filter and a transformation on a stored event; nothing is sent or changed",
		Long: `Try a route's rules (docs/rules.md) on an event the relay stored: whether the
route would take it, and the body and headers it would send. With --route, that
route's settings and rules are tried, each rule given here replacing its own;
without, only the rules given. The headers are signed now (a delivery signs when
it is made: webhook-timestamp and webhook-signature differ from one attempt to
the next; everything else is what a delivery sends). Nothing is delivered,
changed or audited. It exits 0 when the rules could judge the event (whether the
route takes it or not), 1 when a rule does not compile or fails on it.`,
		Example: `  hookrelay routes test --event 01a2... --filter 'body.livemode && body.data.object.amount_paid > 100000'
  hookrelay routes test --event 01a2... --route ledger --transform '{"id": body.id, "amount": body.data.object.amount_paid}'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if event == "" {
				return setup.Usagef(cmd, "--event is required")
			}
			in := ops.RouteTestInput{EventID: event, Route: route}
			for flag, set := range map[string]func(){
				"filter": func() { in.Filter = &filter }, "transform": func() { in.Transform = &transform },
				"transform-headers": func() { in.TransformHeaders = &transformHeaders },
			} {
				if cmd.Flags().Changed(flag) {
					set()
				}
			}
			var res *ops.RouteTestResult
			err := c.operate(cmd, func(_ *config.Config, svc *ops.Service) (err error) {
				res, err = svc.RouteTest(cmd.Context(), in)
				return usage(cmd, err)
			}, func(r *remote) (err error) {
				res, err = r.routeTest(cmd.Context(), in)
				return err
			})
			if err != nil {
				return err
			}
			if asJSON {
				if err := printJSON(c.out, res); err != nil {
					return err
				}
			} else if err := printRouteTest(c.out, res); err != nil {
				return err
			}
			if res.FilterError != nil || res.TransformError != nil {
				return errors.New("a rule does not compile or failed on this event (above)")
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&event, "event", "", "the stored event to try the rules on (its id)")
	fs.StringVar(&route, "route", "", "a route whose settings and rules to start from")
	addRuleFlags(fs, &filter, &transform, &transformHeaders)
	fs.BoolVar(&asJSON, "json", false, `print JSON: {"event_id", "route", "bindings_match", "matched", "filter_error", "body", "body_base64", "content_type", "headers", "transform_error"}`)
	return cmd
}

// printRouteTest prints what a route test found.
func printRouteTest(w io.Writer, res *ops.RouteTestResult) error {
	var b strings.Builder
	if res.BindingsMatch != nil && !*res.BindingsMatch {
		fmt.Fprintf(&b, "the route's bindings do not match this event's routing key: its filter would not even be asked\n")
	}
	switch {
	case res.FilterError != nil:
		fmt.Fprintf(&b, "filter: %s\n", ruleErrorText(res.FilterError))
	case !res.Matched:
		fmt.Fprintf(&b, "filter: false: the route does not take this event (no pair, counted as filtered)\n")
	default:
		fmt.Fprintf(&b, "filter: true: the route takes this event\n")
	}
	if res.TransformError != nil {
		fmt.Fprintf(&b, "%s: %s\n", res.TransformError.Rule, ruleErrorText(res.TransformError))
	}
	if res.Matched && res.TransformError == nil {
		names := make([]string, 0, len(res.Headers))
		for k := range res.Headers {
			names = append(names, k)
		}
		sort.Strings(names)
		fmt.Fprintf(&b, "would send (signed now; webhook-timestamp and webhook-signature differ at delivery):\n")
		for _, k := range names {
			fmt.Fprintf(&b, "  %s: %s\n", k, res.Headers[k])
		}
		if res.BodyBase64 != nil {
			fmt.Fprintf(&b, "  body (%d bytes, not UTF-8, base64): %s\n", len(res.BodyBase64), base64.StdEncoding.EncodeToString(res.BodyBase64))
		} else {
			fmt.Fprintf(&b, "  body (%d bytes):\n%s\n", len(res.Body), res.Body)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// ruleErrorText is a rule's failure as one line.
func ruleErrorText(e *ops.RuleError) string {
	if e.Phase == "compile" {
		return "does not compile: " + e.Message
	}
	return fmt.Sprintf("failed on this event (%s): %s", e.Reason, e.Message)
}
