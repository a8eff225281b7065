// Package amqp is hookrelay's RabbitMQ layer, and the only package that
// speaks amqp091: the wire format of every message (envelope.go: the
// x-hookrelay-* headers, and the encode and decode of each kind); the
// topology (exchanges, quorum queues, bindings) built from the config,
// declared idempotently and exported as a definitions file; the dialer
// over a cluster's nodes; the confirming publishers that reconnect (the
// outbox's batch Publisher, which also sends the retry copies to their
// tiers, and the dispatcher's DispatchPublisher of dead letters); the dispatcher's
// Consumers, which hand each message over decoded; and DeadLetters, which
// reads and moves dead letters for an operator.
package amqp

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TopologyConfig is what the topology is built from.
type TopologyConfig struct {
	// Prefix starts every name.
	Prefix string
	Routes []RouteConfig
	// RetryDelays are the retry tiers, one queue each.
	RetryDelays []time.Duration
	// DeliveryLimit is applied to route queues by policy.
	DeliveryLimit int
}

// RouteConfig is one route's queue and its binding patterns.
type RouteConfig struct {
	Name     string
	Bindings []string
	// Filtered: the route has a filter. Its queue is bound to no pattern
	// (its events come addressed to it, once its filter took them); its
	// patterns bind its sink instead, which drops what they match, so an
	// event that only filtered routes match does not land in unrouted.
	Filtered bool
}

// Exchange is an exchange declaration.
type Exchange struct {
	Name string
	Kind string
	Args amqp.Table
}

// Queue is a durable queue declaration.
type Queue struct {
	Name string
	Args amqp.Table
}

// Binding binds a queue to an exchange.
type Binding struct {
	Exchange   string
	Queue      string
	RoutingKey string
}

// Policy is a RabbitMQ policy. Policies hold the tunables, because a
// queue's arguments cannot change without deleting it.
type Policy struct {
	Name       string
	Pattern    string
	ApplyTo    string
	Priority   int
	Definition map[string]any
}

// Topology is everything hookrelay declares, in declaration order.
type Topology struct {
	Exchanges []Exchange
	Queues    []Queue
	Bindings  []Binding
	Policies  []Policy
}

// Names derives every RabbitMQ name from the prefix.
type Names struct{ Prefix string }

// Events is the topic exchange every event is published to.
func (n Names) Events() string { return n.Prefix + ".events" }

// Unrouted is the alternate exchange of Events, and the queue behind it that
// keeps events no route binds.
func (n Names) Unrouted() string { return n.Prefix + ".unrouted" }

// RouteQueue is the queue a route's dispatchers consume.
func (n Names) RouteQueue(route string) string { return n.Prefix + ".route." + route }

// Sink is the filtered routes' sink: a quorum queue that holds nothing
// (x-max-length 0: a message routed there is dropped at once, confirmed),
// bound with every filtered route's patterns (their queues are bound to
// none), so that the topic copy of an event only filtered routes match is
// not taken for unrouted. One for all routes: a message reaches it once,
// whatever the number of filtered routes its key matches.
func (n Names) Sink() string { return n.Prefix + ".filtered" }

// SinkTopology is the sink bound with patterns.
func (n Names) SinkTopology(patterns []string) Topology {
	t := Topology{Queues: []Queue{{Name: n.Sink(), Args: sinkArgs()}}}
	for _, p := range patterns {
		t.Bindings = append(t.Bindings, Binding{Exchange: n.Events(), Queue: n.Sink(), RoutingKey: p})
	}
	return t
}

// DeadQueue is where a route's undeliverable messages wait for an operator.
func (n Names) DeadQueue(route string) string { return n.RouteQueue(route) + ".dead" }

// Retry is the exchange and the queue of the retry tier with delay d. The
// name carries the delay, so adding or changing a tier declares a new queue
// instead of redeclaring an old one with another TTL (which fails).
func (n Names) Retry(d time.Duration) string { return n.RetryPrefix() + FormatDelay(d) }

// RetryPrefix starts the name of every retry tier.
func (n Names) RetryPrefix() string { return n.Prefix + ".retry." }

// TierTopology is the retry tier of delay d: its fanout exchange, and its
// quorum queue bound to it, which holds each message for d and then
// dead-letters it, at least once, to the default exchange with the
// routing key it was published with (its route queue's name).
func (n Names) TierTopology(d time.Duration) Topology {
	name := n.Retry(d)
	args := deadLetterArgs(quorumArgs(), "")
	args["x-message-ttl"] = d.Milliseconds()
	return Topology{
		Exchanges: []Exchange{{Name: name, Kind: amqp.ExchangeFanout}},
		Queues:    []Queue{{Name: name, Args: args}},
		Bindings:  []Binding{{Exchange: name, Queue: name, RoutingKey: ""}},
	}
}

// TierDelay is the delay of the retry tier named name (Retry's inverse);
// false for any other name.
func (n Names) TierDelay(name string) (time.Duration, bool) {
	rest, ok := strings.CutPrefix(name, n.RetryPrefix())
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(rest)
	if err != nil || n.Retry(d) != name {
		return 0, false
	}
	return d, true
}

// FormatDelay writes d in the largest unit that divides it: 10s, 5m, 2h,
// 250ms.
func FormatDelay(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	default:
		return fmt.Sprintf("%dms", d/time.Millisecond)
	}
}

// PolicyPriority is the priority of hookrelay's policies. RabbitMQ applies
// only the highest-priority policy that matches a queue, without merging,
// so an operator's own policy on these queues with a higher priority would
// replace ours and silently bring back a delivery limit on the dead-letter
// queues (or drop the route queues' limit). Operators use 0 to 10, now and
// then 100; 1000 is far above that. An operator who means to override ours
// uses a higher one and repeats delivery-limit (docs/deliveries.md).
const PolicyPriority = 1000

// quorumArgs are the arguments of every hookrelay queue. Quorum queues
// replicate with Raft and confirm a publish only once a majority stored it.
func quorumArgs() amqp.Table {
	return amqp.Table{"x-queue-type": "quorum"}
}

// deadLetterArgs make a quorum queue dead-letter at least once: without
// reject-publish overflow, RabbitMQ silently falls back to at-most-once.
// An empty exchange is the default exchange, which routes by queue name.
func deadLetterArgs(args amqp.Table, routingKey string) amqp.Table {
	args["x-dead-letter-exchange"] = ""
	if routingKey != "" {
		args["x-dead-letter-routing-key"] = routingKey
	}
	args["x-dead-letter-strategy"] = "at-least-once"
	args["x-overflow"] = "reject-publish"
	return args
}

// BuildTopology returns the topology for cfg.
//
// Events go to the topic exchange <prefix>.events with routing key
// "<source>.<event_type>". Each route has a quorum queue bound with its
// patterns. An event that no pattern matches is not dropped: the exchange's
// alternate exchange (<prefix>.unrouted, fanout) collects it in the quorum
// queue <prefix>.unrouted, where an operator sees it.
//
// Retry tiers are shared by all routes: one fanout exchange and one quorum
// queue per delay, with the delay as queue-level TTL (never per-message
// expiration, which only expires at the head of a queue). A dispatcher
// publishes a failed message to the tier's exchange with the route queue's
// name as routing key; the fanout ignores the key but keeps it, and when the
// TTL expires the tier dead-letters to the default exchange, which routes by
// that key back to the route queue. Shared tiers keep the queue count at
// routes + tiers instead of routes × tiers.
//
// Each route has a dead-letter queue <route queue>.dead. Dispatchers publish
// there after the last attempt; the route queue also dead-letters there when
// a message exceeds the delivery limit (a message that keeps crashing
// dispatchers). The limit is a policy, so changing it redeclares nothing.
func BuildTopology(cfg TopologyConfig) Topology {
	n := Names{Prefix: cfg.Prefix}
	t := Topology{
		Exchanges: []Exchange{
			{Name: n.Unrouted(), Kind: amqp.ExchangeFanout},
			{Name: n.Events(), Kind: amqp.ExchangeTopic, Args: amqp.Table{"alternate-exchange": n.Unrouted()}},
		},
		Queues:   []Queue{{Name: n.Unrouted(), Args: quorumArgs()}},
		Bindings: []Binding{{Exchange: n.Unrouted(), Queue: n.Unrouted(), RoutingKey: ""}},
	}
	for _, d := range cfg.RetryDelays {
		tier := n.TierTopology(d)
		t.Exchanges = append(t.Exchanges, tier.Exchanges...)
		t.Queues = append(t.Queues, tier.Queues...)
		t.Bindings = append(t.Bindings, tier.Bindings...)
	}
	var sunk []string
	for _, r := range cfg.Routes {
		rt := n.RouteTopology(r)
		t.Queues = append(t.Queues, rt.Queues...)
		t.Bindings = append(t.Bindings, rt.Bindings...)
		if r.Filtered {
			sunk = append(sunk, r.Bindings...)
		}
	}
	slices.Sort(sunk)
	sink := n.SinkTopology(slices.Compact(sunk))
	t.Queues = append(t.Queues, sink.Queues...)
	t.Bindings = append(t.Bindings, sink.Bindings...)
	// Dead-letter and unrouted queues are where messages wait for a person,
	// and reading one in the UI counts as a delivery. RabbitMQ 4 gives
	// quorum queues a default delivery limit of 20, after which these
	// queues (which have no dead-letter target) would drop the message.
	// 3.10 refuses -1 ("unlimited"), so the largest accepted value stands
	// in for it.
	t.Policies = append(t.Policies, Policy{
		Name:       cfg.Prefix + ".parking-no-delivery-limit",
		Pattern:    "^" + regexp.QuoteMeta(cfg.Prefix+".") + `(unrouted|route\.[^.]+\.dead)$`,
		ApplyTo:    "queues",
		Priority:   PolicyPriority,
		Definition: map[string]any{"delivery-limit": math.MaxInt32},
	})
	if cfg.DeliveryLimit > 0 {
		t.Policies = append(t.Policies, Policy{
			Name: cfg.Prefix + ".route-delivery-limit",
			// Route queues only: names have no dot after the route, so the
			// .dead queues do not match.
			Pattern:    "^" + regexp.QuoteMeta(n.RouteQueue("")) + "[^.]+$",
			ApplyTo:    "queues",
			Priority:   PolicyPriority,
			Definition: map[string]any{"delivery-limit": cfg.DeliveryLimit},
		})
	}
	return t
}

// RouteTopology is route r's queue, its dead-letter queue and its
// bindings to the events exchange (which BuildTopology declares); none for
// a filtered route, whose patterns bind the sink instead (SinkTopology).
func (n Names) RouteTopology(r RouteConfig) Topology {
	q := n.RouteQueue(r.Name)
	t := Topology{Queues: []Queue{
		{Name: q, Args: deadLetterArgs(quorumArgs(), n.DeadQueue(r.Name))},
		// No delivery limit here: reading a message in the management UI
		// counts as a delivery.
		{Name: n.DeadQueue(r.Name), Args: quorumArgs()},
	}}
	if r.Filtered {
		return t // its patterns bind the sink (SinkTopology)
	}
	for _, pattern := range r.Bindings {
		t.Bindings = append(t.Bindings, Binding{Exchange: n.Events(), Queue: q, RoutingKey: pattern})
	}
	return t
}

// sinkArgs make a queue that keeps no message: at most 0 messages, the
// oldest dropped first, so every message routed there is dropped at once
// and confirmed to the publisher. Quorum, like every queue publishing
// depends on: a classic queue lives on one node, and while that node is
// down, declaring it fails, which would stop every receiver's outbox in a
// cluster (TestDispatcherMovesWhenItsNodeIsKilled). Its Raft log takes one
// entry per event a filtered route's pattern matches, however many do.
func sinkArgs() amqp.Table {
	return amqp.Table{"x-queue-type": "quorum", "x-max-length": int32(0), "x-overflow": "drop-head"}
}

// Unbind removes t's bindings on ch (one that is not there is no error).
func (t Topology) Unbind(ch *amqp.Channel) error {
	for _, b := range t.Bindings {
		if err := ch.QueueUnbind(b.Queue, b.RoutingKey, b.Exchange, nil); err != nil {
			return fmt.Errorf("unbinding queue %s from %s with %q: %w", b.Queue, b.Exchange, b.RoutingKey, err)
		}
	}
	return nil
}

// Declare declares every exchange, queue and binding on ch. Declaring is
// idempotent; a queue or exchange that exists with other arguments makes the
// broker close ch with 406 PRECONDITION_FAILED, reported here.
func (t Topology) Declare(ch *amqp.Channel) error {
	for _, e := range t.Exchanges {
		if err := ch.ExchangeDeclare(e.Name, e.Kind, true, false, false, false, e.Args); err != nil {
			return fmt.Errorf("declaring exchange %s: %w", e.Name, err)
		}
	}
	for _, q := range t.Queues {
		if _, err := ch.QueueDeclare(q.Name, true, false, false, false, q.Args); err != nil {
			return fmt.Errorf("declaring queue %s: %w", q.Name, err)
		}
	}
	for _, b := range t.Bindings {
		if err := ch.QueueBind(b.Queue, b.RoutingKey, b.Exchange, false, nil); err != nil {
			return fmt.Errorf("binding queue %s to %s with %q: %w", b.Queue, b.Exchange, b.RoutingKey, err)
		}
	}
	return nil
}

// Definitions renders t as a RabbitMQ definitions file for vhost "/", which
// the management UI ("Import definitions") and `rabbitmqctl
// import_definitions` accept.
func (t Topology) Definitions() ([]byte, error) {
	type exchange struct {
		Name       string         `json:"name"`
		VHost      string         `json:"vhost"`
		Type       string         `json:"type"`
		Durable    bool           `json:"durable"`
		AutoDelete bool           `json:"auto_delete"`
		Internal   bool           `json:"internal"`
		Arguments  map[string]any `json:"arguments"`
	}
	type queue struct {
		Name       string         `json:"name"`
		VHost      string         `json:"vhost"`
		Durable    bool           `json:"durable"`
		AutoDelete bool           `json:"auto_delete"`
		Arguments  map[string]any `json:"arguments"`
	}
	type binding struct {
		Source          string         `json:"source"`
		VHost           string         `json:"vhost"`
		Destination     string         `json:"destination"`
		DestinationType string         `json:"destination_type"`
		RoutingKey      string         `json:"routing_key"`
		Arguments       map[string]any `json:"arguments"`
	}
	type policy struct {
		VHost      string         `json:"vhost"`
		Name       string         `json:"name"`
		Pattern    string         `json:"pattern"`
		ApplyTo    string         `json:"apply-to"`
		Priority   int            `json:"priority"`
		Definition map[string]any `json:"definition"`
	}
	// Empty lists, never null: the import rejects null with a 500.
	defs := struct {
		Policies  []policy   `json:"policies"`
		Exchanges []exchange `json:"exchanges"`
		Queues    []queue    `json:"queues"`
		Bindings  []binding  `json:"bindings"`
	}{Policies: []policy{}, Exchanges: []exchange{}, Queues: []queue{}, Bindings: []binding{}}
	for _, p := range t.Policies {
		defs.Policies = append(defs.Policies, policy{VHost: "/", Name: p.Name, Pattern: p.Pattern, ApplyTo: p.ApplyTo, Priority: p.Priority, Definition: p.Definition})
	}
	args := func(t amqp.Table) map[string]any {
		m := map[string]any{}
		for k, v := range t {
			m[k] = v
		}
		return m
	}
	for _, e := range t.Exchanges {
		defs.Exchanges = append(defs.Exchanges, exchange{Name: e.Name, VHost: "/", Type: e.Kind, Durable: true, Arguments: args(e.Args)})
	}
	for _, q := range t.Queues {
		defs.Queues = append(defs.Queues, queue{Name: q.Name, VHost: "/", Durable: true, Arguments: args(q.Args)})
	}
	for _, b := range t.Bindings {
		defs.Bindings = append(defs.Bindings, binding{
			Source: b.Exchange, VHost: "/", Destination: b.Queue, DestinationType: "queue",
			RoutingKey: b.RoutingKey, Arguments: map[string]any{},
		})
	}
	out, err := json.MarshalIndent(defs, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding definitions: %w", err)
	}
	return append(out, '\n'), nil
}
