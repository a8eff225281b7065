package ops

import (
	"context"
	"errors"
	"fmt"
	"net/textproto"
	"sort"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/outgoing"
	"github.com/hookrelay/hookrelay/internal/rule"
	"github.com/hookrelay/hookrelay/internal/webhook"
)

// RouteTestInput asks what a route would make of a stored event: its
// filter's answer, and the request its transformation shapes. With Route,
// that route's settings and rules are the base, and any rule given here
// replaces the route's; without, only the rules given are tried.
type RouteTestInput struct {
	EventID          string  `json:"event_id" doc:"The stored event to try the rules on (its id)."`
	Route            string  `json:"route,omitempty" doc:"A route whose settings and rules to start from; the rules given here replace its own."`
	Filter           *string `json:"filter,omitempty" doc:"A filter to try instead of the route's (empty: none)."`
	Transform        *string `json:"transform,omitempty" doc:"A transformation's body expression to try instead of the route's (empty: none)."`
	TransformHeaders *string `json:"transform_headers,omitempty" doc:"A transformation's headers expression to try instead of the route's (empty: none)."`
}

// RuleError is a rule that does not compile (Problems, each at a line and
// column) or that failed on the event (Message alone).
type RuleError struct {
	Rule     string         `json:"rule" doc:"filter, transform or transform_headers."`
	Phase    string         `json:"phase" doc:"compile: the expression is refused as written; eval: it failed on this event (reason says why)."`
	Reason   string         `json:"reason,omitempty" doc:"For eval: error (the expression's own, such as a missing field), cost (past its cost or time limit), output (past the output limit, or not deliverable)."`
	Message  string         `json:"message"`
	Problems []rule.Problem `json:"problems,omitempty"`
}

// RouteTestResult is what a delivery of the event would be. Nothing was
// delivered, stored or audited to answer it.
type RouteTestResult struct {
	EventID string `json:"event_id"`
	Route   string `json:"route,omitempty"`
	// BindingsMatch says whether the route's bindings match the event's
	// routing key (only with a route): a filter decides only among the
	// events the bindings match.
	BindingsMatch *bool `json:"bindings_match,omitempty"`
	// Matched is the filter's answer (true without a filter); false too
	// when it failed (FilterError).
	Matched     bool       `json:"matched"`
	FilterError *RuleError `json:"filter_error,omitempty"`
	// The request, when the filter took the event and the transformation
	// did not fail: the body (as text when it is UTF-8, else base64 in
	// BodyBase64), its content type, and the headers a delivery sends,
	// signed now with the route's secret (a delivery signs when it is
	// made: webhook-timestamp and webhook-signature differ from one
	// attempt to the next; everything else is what it sends).
	Body           string            `json:"body,omitempty"`
	BodyBase64     []byte            `json:"body_base64,omitempty"`
	ContentType    string            `json:"content_type,omitempty"`
	Headers        map[string]string `json:"headers,omitempty"`
	TransformError *RuleError        `json:"transform_error,omitempty"`
}

// RouteTest tries a route's rules (or the ones given) on a stored event,
// as the receiver's filter and the dispatcher's transformation would. It
// reads only: nothing is delivered, changed or audited.
func (s *Service) RouteTest(ctx context.Context, in RouteTestInput) (*RouteTestResult, error) {
	id, err := uuid.Parse(in.EventID)
	if err != nil {
		return nil, fmt.Errorf("%w: event_id: %q is not an event id", ErrInvalidRequest, in.EventID)
	}
	ev, err := s.Store.EventShow(ctx, id)
	if err != nil {
		return nil, err
	}
	if ev.Purged {
		return nil, fmt.Errorf("%w: event %s was purged: its body and headers are gone", ErrInvalidRequest, id)
	}
	res := &RouteTestResult{EventID: id.String(), Route: in.Route}
	var r config.Route
	var keys [][]byte
	if in.Route != "" {
		if err := s.requireRoute(ctx, in.Route); err != nil {
			return nil, err
		}
		route := s.RoutesNow().Get(in.Route)
		if route == nil {
			return nil, fmt.Errorf("%w: %s", ErrUnknownRoute, in.Route)
		}
		r, keys = route.Route, route.Keys
		match := route.Matches(webhook.RoutingKey(ev.Source, ev.EventType))
		res.BindingsMatch = &match
	}
	if in.Filter != nil {
		r.Filter = *in.Filter
	}
	if in.Transform != nil {
		r.Transform = *in.Transform
	}
	if in.TransformHeaders != nil {
		r.TransformHeaders = *in.TransformHeaders
	}
	limits := rule.Limits{}
	if s.Config != nil {
		limits = s.Config.RuleLimits()
	}

	body := []byte(ev.Body)
	input := rule.Input{Body: rule.ParseBody(body), Headers: rule.HeadersOf(ev.Headers), Source: ev.Source,
		EventType: ev.EventType, ReceivedAt: outgoing.ReceivedAt(id)}
	res.Matched = true
	if r.Filter != "" {
		f, err := rule.CompileFilter(r.Filter, limits)
		if err != nil {
			res.Matched, res.FilterError = false, ruleError("filter", err)
			return res, nil
		}
		if res.Matched, err = f.Match(ctx, input); err != nil {
			res.Matched, res.FilterError = false, ruleError("filter", err)
			return res, nil
		}
	}
	if !res.Matched {
		return res, nil
	}
	var t *rule.Transform
	if r.Transform != "" || r.TransformHeaders != "" {
		for _, part := range []struct{ name, body, headers string }{{"transform", r.Transform, ""}, {"transform_headers", "", r.TransformHeaders}} {
			if part.body == "" && part.headers == "" {
				continue
			}
			if _, err := rule.CompileTransform(part.body, part.headers, limits); err != nil {
				res.TransformError = ruleError(part.name, err)
				return res, nil
			}
		}
		if t, err = rule.CompileTransform(r.Transform, r.TransformHeaders, limits); err != nil {
			res.TransformError = ruleError("transform", err)
			return res, nil
		}
	}
	req, err := outgoing.Shape(ctx, t, input, body, ev.ContentType)
	if err != nil {
		res.TransformError = ruleError("transform", err)
		return res, nil
	}
	h := outgoing.Headers(r.Headers, req, outgoing.Event{ID: id, Source: ev.Source, EventType: ev.EventType, Attempt: 1}, keys, s.now())
	res.Headers = flatHeaders(h, r.Headers)
	res.ContentType = h.Get("Content-Type")
	if utf8.Valid(req.Body) {
		res.Body = string(req.Body)
	} else {
		res.BodyBase64 = req.Body
	}
	return res, nil
}

// flatHeaders is h as one value a name, the route's own header values
// hidden as the route view hides them (they may carry a token).
func flatHeaders(h map[string][]string, own map[string]string) map[string]string {
	hidden := map[string]string{}
	for k, v := range own {
		hidden[textproto.CanonicalMIMEHeaderKey(k)] = v
	}
	out := make(map[string]string, len(h))
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		v := textproto.MIMEHeader(h).Get(k)
		if ownValue, ok := hidden[k]; ok && v == ownValue {
			v = "(set)"
		}
		out[k] = v
	}
	return out
}

// ruleError describes err of the named rule.
func ruleError(name string, err error) *RuleError {
	var ce *rule.CompileError
	if errors.As(err, &ce) {
		return &RuleError{Rule: name, Phase: "compile", Message: ce.Error(), Problems: ce.Problems}
	}
	var ee *rule.EvalError
	if errors.As(err, &ee) {
		return &RuleError{Rule: name, Phase: "eval", Reason: ee.Reason, Message: ee.Error()}
	}
	return &RuleError{Rule: name, Phase: "eval", Reason: "error", Message: err.Error()}
}
