package rule

import (
	"encoding/json"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"
)

// Search is a compiled search: a filter run on each event a search reads,
// and the JSON document that the body of every event it takes contains,
// when the expression implies one (an index serves that part).
type Search struct {
	*Filter
	contains []byte
}

// CompileSearch compiles src as a filter (a bool expression over the
// variables the package names) for searching stored events.
//
// Contains is read off the expression: each comparison of a path into
// the body with a constant string, integer or bool (body.data.object.
// customer == "cus_1", body["shop"] == "acme", true == body.live) that
// the whole expression requires (it stands alone, or is one side of
// a top-level &&) becomes that path and value in one JSON document. Any
// event the expression takes has a body that contains it; the filter
// still judges each candidate, so the document only narrows what is read.
func CompileSearch(src string, l Limits) (*Search, error) {
	prg, ast, err := compile(src, cel.BoolType, l)
	if err != nil {
		return nil, err
	}
	s := &Search{Filter: &Filter{src: src, prg: prg, limits: l.withDefaults()}}
	doc := map[string]any{}
	for _, c := range conjuncts(ast.NativeRep().Expr(), nil) {
		path, value, ok := bodyEquality(c)
		if ok {
			put(doc, path, value)
		}
	}
	if len(doc) > 0 {
		if s.contains, err = json.Marshal(doc); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Contains is the JSON document every match's body contains; nil when
// the expression implies none (every body of the window is judged).
func (s *Search) Contains() []byte { return s.contains }

// conjuncts appends to out the operands of e's top-level &&s (e itself
// when it is not one).
func conjuncts(e celast.Expr, out []celast.Expr) []celast.Expr {
	if e.Kind() == celast.CallKind && e.AsCall().FunctionName() == operators.LogicalAnd {
		for _, a := range e.AsCall().Args() {
			out = conjuncts(a, out)
		}
		return out
	}
	return append(out, e)
}

// bodyEquality reads `path == constant` (either way round), path a chain
// of fields and string indexes from body.
func bodyEquality(e celast.Expr) ([]string, any, bool) {
	if e.Kind() != celast.CallKind || e.AsCall().FunctionName() != operators.Equals || len(e.AsCall().Args()) != 2 {
		return nil, nil, false
	}
	a, b := e.AsCall().Args()[0], e.AsCall().Args()[1]
	if a.Kind() == celast.LiteralKind {
		a, b = b, a
	}
	path, ok := bodyPath(a)
	if !ok || len(path) == 0 || b.Kind() != celast.LiteralKind {
		return nil, nil, false
	}
	switch v := b.AsLiteral().(type) {
	case types.String:
		return path, string(v), true
	case types.Bool:
		return path, bool(v), true
	case types.Int:
		return path, int64(v), true
	}
	return nil, nil, false
}

// bodyPath reads body.a.b["c"] as [a b c].
func bodyPath(e celast.Expr) ([]string, bool) {
	switch e.Kind() {
	case celast.IdentKind:
		return nil, e.AsIdent() == VarBody
	case celast.SelectKind:
		sel := e.AsSelect()
		if sel.IsTestOnly() {
			return nil, false
		}
		p, ok := bodyPath(sel.Operand())
		return append(p, sel.FieldName()), ok
	case celast.CallKind:
		c := e.AsCall()
		if c.FunctionName() != operators.Index || len(c.Args()) != 2 || c.Args()[1].Kind() != celast.LiteralKind {
			return nil, false
		}
		key, isString := c.Args()[1].AsLiteral().(types.String)
		if !isString {
			return nil, false
		}
		p, ok := bodyPath(c.Args()[0])
		return append(p, string(key)), ok
	}
	return nil, false
}

// put sets path to v in doc, unless the path is taken: two different
// values for one path take no event, which the filter finds out itself.
func put(doc map[string]any, path []string, v any) {
	for _, k := range path[:len(path)-1] {
		next, ok := doc[k].(map[string]any)
		if !ok {
			if _, taken := doc[k]; taken {
				return
			}
			next = map[string]any{}
			doc[k] = next
		}
		doc = next
	}
	if _, taken := doc[path[len(path)-1]]; !taken {
		doc[path[len(path)-1]] = v
	}
}
