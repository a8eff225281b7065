package config

import (
	"fmt"
	"strings"

	"github.com/hookrelay/hookrelay/internal/outgoing"
	"github.com/hookrelay/hookrelay/internal/rule"
)

// RuleLimits are the bounds of one evaluation of a route's expressions.
func (c *Config) RuleLimits() rule.Limits {
	return rule.Limits{Cost: c.Rules.CostLimit, OutputBytes: c.Rules.MaxOutputBytes, Timeout: c.Rules.Timeout}
}

// CheckRouteRules compiles r's filter and transformation and returns what
// does not compile, each problem with its key (prefix.filter, ...) and its
// line and column. A run-time route is checked by the same function when it
// is made or changed.
func CheckRouteRules(prefix string, r Route, l rule.Limits) []string {
	var problems []string
	if prefix != "" {
		prefix += "."
	}
	if r.OnDead != "" && r.Ordering != OrderingFIFO {
		problems = append(problems, fmt.Sprintf("%son_dead: only a route with ordering fifo has it (ordering is %q)", prefix, r.Ordering))
	}
	if r.Filter != "" {
		if _, err := rule.CompileFilter(r.Filter, l); err != nil {
			problems = append(problems, fmt.Sprintf("%sfilter: %v", prefix, err))
		}
	}
	if r.Transform != "" || r.TransformHeaders != "" {
		if r.Transform != "" {
			if _, err := rule.CompileTransform(r.Transform, "", l); err != nil {
				problems = append(problems, fmt.Sprintf("%stransform: %v", prefix, err))
			}
		}
		if r.TransformHeaders != "" {
			if _, err := rule.CompileTransform("", r.TransformHeaders, l); err != nil {
				problems = append(problems, fmt.Sprintf("%stransform_headers: %v", prefix, err))
			}
		}
	}
	return problems
}

func checkRules(cfg *Config) []string {
	var problems []string
	for i, r := range cfg.Routes {
		key := fmt.Sprintf("routes[%d]", i)
		if r.Name != "" {
			key = fmt.Sprintf("routes[%s]", r.Name)
		}
		problems = append(problems, CheckRouteRules(key, r, cfg.RuleLimits())...)
		problems = append(problems, CheckRouteKind(key, r, cfg.AMQP.Prefix)...)
	}
	return problems
}

// CheckRouteKind checks what a route's kind asks of its url, exchange and
// routing key. prefix is the relay's amqp.prefix: an amqp route may not
// publish to an exchange named with it, so a route aimed at the relay's
// own broker cannot feed the relay's own exchanges (a loop, or messages
// the dispatchers would take for their own).
func CheckRouteKind(prefix string, r Route, relayPrefix string) []string {
	var problems []string
	if prefix != "" {
		prefix += "."
	}
	add := func(format string, args ...any) { problems = append(problems, prefix+fmt.Sprintf(format, args...)) }
	if !r.IsAMQP() {
		if r.URL != "" && !urlWithScheme(r.URL, "http", "https") {
			add("url: must be an http:// or https:// URL with a host (or set kind: amqp for an amqp:// URL)")
		}
		if r.Exchange != "" || r.RoutingKey != "" {
			add("exchange: only a route of kind amqp has an exchange and a routing_key")
		}
		return problems
	}
	if r.URL != "" && !urlWithScheme(r.URL, "amqp", "amqps") {
		add("url: must be an amqp:// or amqps:// URL with a host (kind amqp)")
	}
	switch {
	case r.Exchange == "":
		add("exchange: is required for kind amqp (declare it on the broker and bind your queues to it)")
	case len(r.Exchange) > 255 || !validHeaderValue(r.Exchange) || strings.ContainsAny(r.Exchange, "\t "):
		add("exchange: at most 255 bytes, no spaces or control characters")
	case relayPrefix != "" && strings.HasPrefix(r.Exchange, relayPrefix+"."):
		add("exchange: %q is named like the relay's own exchanges (amqp.prefix %q): a route may not publish into the relay", r.Exchange, relayPrefix)
	}
	if _, err := outgoing.ParseKeyTemplate(r.RoutingKey); err != nil {
		add("routing_key: %v", err)
	}
	return problems
}
