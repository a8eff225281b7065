// Package rule compiles and runs the expressions a route reads events with:
// a filter (does the route take this event?) and a transformation (what
// body and headers does it deliver?). The language is CEL
// (github.com/google/cel-go): no I/O, not Turing-complete, typed when
// compiled, and bounded in cost when run, the way Kubernetes and Envoy use
// it for rules their users write.
//
// An expression sees the event as these variables:
//
//	body         the body parsed as JSON (null when it is not JSON)
//	headers      the sender's headers, names lower-cased, repeated values
//	             joined with ", " (a map of string to string)
//	source       the source's name
//	event_type   the event type
//	received_at  when the relay accepted the event (a timestamp, to the
//	             millisecond)
//
// Compile errors name the line and column. A program that errs on an event,
// runs past its cost limit or its time, or yields more than its output
// limit fails for that event only, with an *EvalError; nothing here stalls
// its caller.
package rule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/ext"
)

// Limits bound one evaluation.
type Limits struct {
	// Cost is CEL's cost limit of one evaluation (roughly the number of
	// operations, each element a comprehension visits counted): past it
	// the evaluation stops with an error. Default DefaultCost.
	Cost uint64
	// OutputBytes is the most a transformation may yield (the body, and
	// the headers together). Default DefaultOutputBytes.
	OutputBytes int
	// Timeout bounds one evaluation's time, a second guard besides the
	// cost. Default DefaultTimeout.
	Timeout time.Duration
}

// Defaults of Limits. The cost lets a transformation map some thousand
// line items (a few units an item) while a comprehension nested over a
// large body is stopped within some 25 ms of a 2-core machine's time
// (cel-go's cost tracking runs at about 2 units a microsecond here; it is
// what makes the bound deterministic, and costs a filter of tens of units
// nothing that shows). The output fits a large webhook body; the timeout
// only guards the cost, far above any evaluation within it, and far below
// a delivery's timeout.
const (
	DefaultCost        = 50_000
	DefaultOutputBytes = 1 << 20
	DefaultTimeout     = time.Second
)

func (l Limits) withDefaults() Limits {
	if l.Cost == 0 {
		l.Cost = DefaultCost
	}
	if l.OutputBytes == 0 {
		l.OutputBytes = DefaultOutputBytes
	}
	if l.Timeout == 0 {
		l.Timeout = DefaultTimeout
	}
	return l
}

// The variables an expression sees.
const (
	VarBody       = "body"
	VarHeaders    = "headers"
	VarSource     = "source"
	VarEventType  = "event_type"
	VarReceivedAt = "received_at"
)

// maxExpression bounds an expression's text: a rule is a few lines, and the
// parser's work grows with it.
const maxExpression = 16 << 10

var env = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable(VarBody, cel.DynType),
		cel.Variable(VarHeaders, cel.MapType(cel.StringType, cel.StringType)),
		cel.Variable(VarSource, cel.StringType),
		cel.Variable(VarEventType, cel.StringType),
		cel.Variable(VarReceivedAt, cel.TimestampType),
		// `body.amount > 100` where amount was sent as 100.5 or 100:
		// JSON numbers compare with integer literals.
		cel.CrossTypeNumericComparisons(true),
		// body.?data.?object.orValue({}) and friends, for fields a sender
		// may leave out.
		cel.OptionalTypes(),
		ext.Strings(),
		ext.Encoders(),
		ext.Math(),
		ext.Lists(),
		ext.Sets(),
		cel.ParserExpressionSizeLimit(maxExpression),
		cel.ParserRecursionLimit(100),
	)
})

// Problem is one compile error, at a 1-based line and column.
type Problem struct {
	Line    int    `json:"line"`
	Column  int    `json:"column"`
	Message string `json:"message"`
}

func (p Problem) String() string { return fmt.Sprintf("%d:%d: %s", p.Line, p.Column, p.Message) }

// CompileError says why an expression does not compile.
type CompileError struct {
	Problems []Problem
}

func (e *CompileError) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = p.String()
	}
	return strings.Join(parts, "; ")
}

// EvalError is an expression's failure on one event.
type EvalError struct {
	// Reason is "cost" (past the cost limit or the time limit), "output"
	// (past the output limit or not deliverable) or "error" (the
	// expression's own error, such as a missing field).
	Reason string
	Msg    string
}

func (e *EvalError) Error() string { return e.Msg }

// compile parses and checks src and builds its program; want, when not
// nil, is the type the expression must yield (dyn passes, and is checked
// when run).
func compile(src string, want *cel.Type, l Limits) (cel.Program, *cel.Ast, error) {
	e, err := env()
	if err != nil {
		return nil, nil, fmt.Errorf("building the expression environment: %w", err)
	}
	if strings.TrimSpace(src) == "" {
		return nil, nil, &CompileError{Problems: []Problem{{Line: 1, Column: 1, Message: "empty expression"}}}
	}
	if len(src) > maxExpression {
		return nil, nil, &CompileError{Problems: []Problem{{Line: 1, Column: 1, Message: fmt.Sprintf("expression longer than %d bytes", maxExpression)}}}
	}
	ast, iss := e.Compile(src)
	if iss != nil && iss.Err() != nil {
		ce := &CompileError{}
		for _, ie := range iss.Errors() {
			// cel-go names the container it resolved in; ours is always
			// the empty one, which says nothing to the reader.
			msg := strings.TrimSuffix(ie.Message, " (in container '')")
			ce.Problems = append(ce.Problems, Problem{Line: ie.Location.Line(), Column: ie.Location.Column() + 1, Message: msg})
		}
		return nil, nil, ce
	}
	if want != nil {
		out := ast.OutputType()
		if !out.IsExactType(want) && !out.IsExactType(cel.DynType) {
			return nil, nil, &CompileError{Problems: []Problem{{Line: 1, Column: 1,
				Message: fmt.Sprintf("the expression yields %s; it must yield %s", out, want)}}}
		}
	}
	l = l.withDefaults()
	prg, err := e.Program(ast, cel.CostLimit(l.Cost), cel.InterruptCheckFrequency(64), cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return nil, nil, &CompileError{Problems: []Problem{{Line: 1, Column: 1, Message: err.Error()}}}
	}
	return prg, ast, nil
}

// eval runs prg on in within l's time.
func eval(ctx context.Context, prg cel.Program, in Input, l Limits) (ref.Val, error) {
	ctx, cancel := context.WithTimeout(ctx, l.Timeout)
	defer cancel()
	out, _, err := prg.ContextEval(ctx, in.activation())
	if err != nil {
		msg := err.Error()
		switch {
		case strings.Contains(msg, "cost limit exceeded"):
			return nil, &EvalError{Reason: "cost", Msg: fmt.Sprintf("stopped: past the cost limit of %d", l.Cost)}
		case errors.Is(err, context.DeadlineExceeded) || strings.Contains(msg, "operation interrupted") || strings.Contains(msg, "operation cancelled"):
			return nil, &EvalError{Reason: "cost", Msg: fmt.Sprintf("stopped: ran past %s", l.Timeout)}
		}
		return nil, &EvalError{Reason: "error", Msg: msg}
	}
	if types.IsUnknown(out) {
		return nil, &EvalError{Reason: "error", Msg: "the expression's value is unknown"}
	}
	return out, nil
}

// Input is an event as an expression sees it.
type Input struct {
	// Body is the parsed body (ParseBody), nil when not JSON.
	Body       any
	Headers    map[string]string
	Source     string
	EventType  string
	ReceivedAt time.Time
}

func (in Input) activation() map[string]any {
	h := in.Headers
	if h == nil {
		h = map[string]string{}
	}
	return map[string]any{
		VarBody:       in.Body,
		VarHeaders:    h,
		VarSource:     in.Source,
		VarEventType:  in.EventType,
		VarReceivedAt: in.ReceivedAt.Truncate(time.Millisecond).UTC(),
	}
}

// ParseBody reads body as JSON for an expression: objects, arrays, strings,
// booleans and null as they are; a number as an integer when it is one
// that fits 64 bits, else as a double. A body that is not JSON (form data,
// XML, empty) is nil: `body == null` tells it.
func ParseBody(body []byte) any {
	if len(body) == 0 || !json.Valid(body) {
		return nil
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil
	}
	return numbers(v)
}

// numbers turns json.Number into int64 or float64, in place.
func numbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, err := x.Float64()
		if err != nil {
			return x.String()
		}
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = numbers(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = numbers(e)
		}
		return x
	}
	return v
}

// HeadersOf returns h as an expression sees it: names lower-cased,
// repeated values joined with ", ".
func HeadersOf(h map[string][]string) map[string]string {
	out := make(map[string]string, len(h))
	for k, vs := range h {
		k = strings.ToLower(k)
		if prev, ok := out[k]; ok {
			out[k] = prev + ", " + strings.Join(vs, ", ")
			continue
		}
		out[k] = strings.Join(vs, ", ")
	}
	return out
}

// references reports whether a checked expression reads the variable name.
func references(ast *cel.Ast, name string) bool {
	for _, ref := range ast.NativeRep().ReferenceMap() {
		if ref.Name == name {
			return true
		}
	}
	return false
}
