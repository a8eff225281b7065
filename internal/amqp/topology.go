// Package amqp is hookrelay's RabbitMQ layer: the topology (exchanges,
// quorum queues, bindings) built from the config, declared idempotently and
// exported as a definitions file, and a confirming publisher that reconnects.
package amqp

import (
	"encoding/json"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TopologyConfig is what the topology is built from.
type TopologyConfig struct {
	// Prefix starts every name.
	Prefix string
	Routes []RouteConfig
}

// RouteConfig is one route's queue and its binding patterns.
type RouteConfig struct {
	Name     string
	Bindings []string
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

// Topology is everything hookrelay declares, in declaration order.
type Topology struct {
	Exchanges []Exchange
	Queues    []Queue
	Bindings  []Binding
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

// quorumArgs are the arguments of every hookrelay queue. Quorum queues
// replicate with Raft and confirm a publish only once a majority stored it.
func quorumArgs() amqp.Table {
	return amqp.Table{"x-queue-type": "quorum"}
}

// BuildTopology returns the topology for cfg.
//
// Events go to the topic exchange <prefix>.events with routing key
// "<source>.<event_type>". Each route has a quorum queue bound with its
// patterns. An event that no pattern matches is not dropped: the exchange's
// alternate exchange (<prefix>.unrouted, fanout) collects it in the quorum
// queue <prefix>.unrouted, where an operator sees it.
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
	for _, r := range cfg.Routes {
		q := n.RouteQueue(r.Name)
		t.Queues = append(t.Queues, Queue{Name: q, Args: quorumArgs()})
		for _, pattern := range r.Bindings {
			t.Bindings = append(t.Bindings, Binding{Exchange: n.Events(), Queue: q, RoutingKey: pattern})
		}
	}
	return t
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
	var defs struct {
		Exchanges []exchange `json:"exchanges"`
		Queues    []queue    `json:"queues"`
		Bindings  []binding  `json:"bindings"`
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
