package rule

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
)

// Filter is a compiled filter: true means the route takes the event.
type Filter struct {
	src    string
	prg    cel.Program
	limits Limits
}

// CompileFilter compiles src, which must yield a bool. A *CompileError
// names the line and column of each problem.
func CompileFilter(src string, l Limits) (*Filter, error) {
	prg, _, err := compile(src, cel.BoolType, l)
	if err != nil {
		return nil, err
	}
	return &Filter{src: src, prg: prg, limits: l.withDefaults()}, nil
}

// Source is the expression as written.
func (f *Filter) Source() string { return f.src }

// Match runs the filter on one event. An *EvalError says why it could not
// judge the event.
func (f *Filter) Match(ctx context.Context, in Input) (bool, error) {
	out, err := eval(ctx, f.prg, in, f.limits)
	if err != nil {
		return false, err
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, &EvalError{Reason: "error", Msg: fmt.Sprintf("the filter yielded %s, not a bool", out.Type())}
	}
	return bool(b), nil
}

// Transform is a compiled transformation: the body to deliver and,
// optionally, headers to add.
type Transform struct {
	bodySrc, headersSrc string
	body, headers       cel.Program
	readsHeaders        bool
	limits              Limits
}

// CompileTransform compiles a transformation: body, the expression that
// yields the body to deliver (empty: the event's body as received), and
// headers, one that yields a map of header names to values to add (empty:
// none). Both empty is a mistake of the caller's: there is nothing to
// compile.
func CompileTransform(body, headers string, l Limits) (*Transform, error) {
	t := &Transform{bodySrc: body, headersSrc: headers, limits: l.withDefaults()}
	if body == "" && headers == "" {
		return nil, &CompileError{Problems: []Problem{{Line: 1, Column: 1, Message: "empty transformation"}}}
	}
	if body != "" {
		prg, ast, err := compile(body, nil, l)
		if err != nil {
			return nil, err
		}
		t.body, t.readsHeaders = prg, references(ast, VarHeaders)
	}
	if headers != "" {
		prg, ast, err := compile(headers, cel.MapType(cel.StringType, cel.StringType), l)
		if err != nil {
			return nil, err
		}
		t.headers = prg
		t.readsHeaders = t.readsHeaders || references(ast, VarHeaders)
	}
	return t, nil
}

// BodySource and HeadersSource are the expressions as written.
func (t *Transform) BodySource() string    { return t.bodySrc }
func (t *Transform) HeadersSource() string { return t.headersSrc }

// ReadsHeaders says whether the transformation reads the sender's headers:
// a caller that does not have them at hand fetches them only then.
func (t *Transform) ReadsHeaders() bool { return t.readsHeaders }

// Shaped is what a transformation makes of an event.
type Shaped struct {
	// Body is the body to deliver; nil when the transformation keeps the
	// event's.
	Body []byte
	// ContentType is the body's media type: application/json for JSON
	// (a map, a list, a number, a bool, null), text/plain for a string
	// (sent as is), application/octet-stream for bytes; "" when the body
	// is the event's. A Content-Type among Headers wins.
	ContentType string
	// Headers are the headers to add, by canonical name.
	Headers map[string]string
}

// Apply runs the transformation on one event. An *EvalError says why it
// could not.
func (t *Transform) Apply(ctx context.Context, in Input) (Shaped, error) {
	var s Shaped
	size := 0
	if t.body != nil {
		out, err := eval(ctx, t.body, in, t.limits)
		if err != nil {
			return s, err
		}
		switch v := out.(type) {
		case types.String:
			s.Body, s.ContentType = []byte(v), "text/plain; charset=utf-8"
		case types.Bytes:
			s.Body, s.ContentType = []byte(v), "application/octet-stream"
		default:
			n, err := native(out)
			if err != nil {
				return s, err
			}
			if s.Body, err = json.Marshal(n); err != nil {
				return s, &EvalError{Reason: "output", Msg: "encoding the body as JSON: " + err.Error()}
			}
			s.ContentType = "application/json"
		}
		if s.Body == nil {
			s.Body = []byte{}
		}
		size += len(s.Body)
		if size > t.limits.OutputBytes {
			return s, &EvalError{Reason: "output", Msg: fmt.Sprintf("the body is %d bytes, over the output limit of %d", size, t.limits.OutputBytes)}
		}
	}
	if t.headers != nil {
		out, err := eval(ctx, t.headers, in, t.limits)
		if err != nil {
			return s, err
		}
		n, err := native(out)
		if err != nil {
			return s, err
		}
		m, ok := n.(map[string]any)
		if !ok {
			return s, &EvalError{Reason: "output", Msg: fmt.Sprintf("the headers expression yielded %s, not a map", out.Type())}
		}
		s.Headers = make(map[string]string, len(m))
		for k, v := range m {
			sv, ok := v.(string)
			if !ok {
				return s, &EvalError{Reason: "output", Msg: fmt.Sprintf("header %s: its value is not a string", k)}
			}
			if err := HeaderProblem(k, sv); err != "" {
				return s, &EvalError{Reason: "output", Msg: err}
			}
			size += len(k) + len(sv)
			s.Headers[http.CanonicalHeaderKey(k)] = sv
		}
		if size > t.limits.OutputBytes {
			return s, &EvalError{Reason: "output", Msg: fmt.Sprintf("the body and headers are %d bytes, over the output limit of %d", size, t.limits.OutputBytes)}
		}
	}
	return s, nil
}

// reserved are the headers a delivery sets itself: a transformation may not
// replace them.
var reserved = map[string]bool{
	"host": true, "content-length": true, "transfer-encoding": true, "connection": true, "te": true, "trailer": true,
	"upgrade": true, "user-agent": true, "webhook-id": true, "webhook-timestamp": true, "webhook-signature": true, "traceparent": true, "tracestate": true,
}

// HeaderProblem says why a header a transformation adds cannot be sent, ""
// when it can.
func HeaderProblem(name, value string) string {
	if name == "" {
		return "a header name is empty"
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return fmt.Sprintf("header %q: not a valid header name", name)
		}
	}
	low := strings.ToLower(name)
	if reserved[low] || strings.HasPrefix(low, "x-hookrelay-") {
		return fmt.Sprintf("header %s: set by the relay itself, a transformation cannot replace it", name)
	}
	for i := 0; i < len(value); i++ {
		if c := value[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return fmt.Sprintf("header %s: its value holds a control character", name)
		}
	}
	return ""
}
