package routeset

import (
	"context"
	"fmt"

	"github.com/hookrelay/hookrelay/internal/outgoing"
	"github.com/hookrelay/hookrelay/internal/rule"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/topic"
	"github.com/hookrelay/hookrelay/internal/webhook"
)

// compileRules compiles r's filter and transformation (docs/rules.md) with
// limits l. A route whose rules do not compile cannot be served: the
// config refuses them at load, and the admin API when they are saved, so
// this fails only for a route stored by another version.
func compileRules(r *Route, l rule.Limits) error {
	r.FilterProgram, r.TransformProgram, r.KeyTemplate = nil, nil, nil
	if r.IsAMQP() {
		k, err := outgoing.ParseKeyTemplate(r.RoutingKey)
		if err != nil {
			return fmt.Errorf("routing_key: %w", err)
		}
		r.KeyTemplate = k
	}
	if r.Filter != "" {
		f, err := rule.CompileFilter(r.Filter, l)
		if err != nil {
			return fmt.Errorf("filter: %w", err)
		}
		r.FilterProgram = f
	}
	if r.Transform != "" || r.TransformHeaders != "" {
		t, err := rule.CompileTransform(r.Transform, r.TransformHeaders, l)
		if err != nil {
			return fmt.Errorf("transform: %w", err)
		}
		r.TransformProgram = t
	}
	return nil
}

// Matches reports whether one of r's bindings matches a routing key, as
// the topic exchange matches it.
func (r *Route) Matches(key string) bool {
	for _, b := range r.Bindings {
		if topic.Match(b, key) {
			return true
		}
	}
	return false
}

// Routed is where one event goes.
type Routed struct {
	// Routes get a pair each: those whose bindings match the event's
	// routing key and whose filter, if any, took it.
	Routes []string
	// Addressed are the routes of Routes that have a filter: bound to no
	// pattern, they get the event by a copy addressed to them.
	Addressed []string
	// Filtered are the routes whose bindings match but whose filter said
	// no; Failed those whose filter could not judge the event (its error,
	// past its cost): no pair either, and counted as such.
	Filtered []string
	Failed   []RuleFailure
}

// RuleFailure is a filter that could not judge an event.
type RuleFailure struct {
	Route string
	Err   error
}

// Route says which routes get ev: those whose bindings match its routing
// key (Match) and, for a route with a filter, whose filter yields true.
// The body is parsed once, and only when a matching route has a filter.
func (s *Set) Route(ctx context.Context, ev *webhook.Event) Routed {
	var out Routed
	if s == nil {
		return out
	}
	var in *rule.Input
	for _, name := range s.Match(ev.RoutingKey()) {
		r := s.byName[name]
		if !r.Filtered() {
			out.Routes = append(out.Routes, name)
			continue
		}
		if ev.Source == store.RelaySource && !r.Sees(ev.Team) {
			// An event about another team's route: not this route's.
			out.Filtered = append(out.Filtered, name)
			continue
		}
		if r.FilterProgram == nil {
			out.Routes = append(out.Routes, name)
			out.Addressed = append(out.Addressed, name)
			continue
		}
		if in == nil {
			in = &rule.Input{Body: rule.ParseBody(ev.Body), Headers: rule.HeadersOf(ev.Headers), Source: ev.Source,
				EventType: ev.EventType, ReceivedAt: ev.ReceivedAt}
		}
		ok, err := r.FilterProgram.Match(ctx, *in)
		switch {
		case err != nil:
			out.Failed = append(out.Failed, RuleFailure{Route: name, Err: err})
		case ok:
			out.Routes = append(out.Routes, name)
			out.Addressed = append(out.Addressed, name)
		default:
			out.Filtered = append(out.Filtered, name)
		}
	}
	return out
}
