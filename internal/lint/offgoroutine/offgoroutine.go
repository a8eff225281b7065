// Package offgoroutine is a go/analysis pass that finds test assertions made
// off the test's goroutine.
//
// testing.T's FailNow (and so Fatal, Fatalf, SkipNow, Skip, Skipf and every
// require.* of testify) ends the calling goroutine with runtime.Goexit: it
// may only be called from the goroutine running the test. Called from a
// goroutine the test started, it ends that goroutine and the test runs on
// as if nothing failed. Called from the condition of testify's Eventually,
// EventuallyWithT or Never (which runs in testify's own goroutine), it is
// worse: when the condition is slower than the wait, Eventually returns, the
// test ends, and the orphaned condition later fails a finished test, which
// panics and takes the whole test binary down with every test still running
// in it. A report through the test's t (t.Error, assert.* with t) inside a
// condition is wrong even when fast: one failing tick fails the test that a
// later tick would have passed.
//
// The pass reports, naming file and line:
//
//   - in a function started with `go`: a call that can end the goroutine
//     through the test's T (FailNow, Fatal*, Skip*, require.*), directly or
//     through a helper that does (helpers are followed across packages with
//     facts);
//   - in a condition passed to Eventually, Eventuallyf, EventuallyWithT,
//     EventuallyWithTf, Never or Neverf: the same, and also any report
//     through a testing.T (Error, Errorf, Fail, assert.* with a T).
//
// Calls that take testify's *assert.CollectT are what EventuallyWithT is for
// and are allowed. The fix is EventuallyWithT with the CollectT, or a poll
// helper that runs in the test's goroutine and returns an error.
package offgoroutine

import (
	"fmt"
	"go/ast"
	"go/types"
	"strings"

	"golang.org/x/tools/go/analysis"
)

// Analyzer reports test assertions made off the test's goroutine.
var Analyzer = &analysis.Analyzer{
	Name:      "offgoroutine",
	Doc:       "report FailNow, Fatal, require.* and t.Error made off the test's goroutine (in go statements and Eventually conditions)",
	Run:       run,
	FactTypes: []analysis.Fact{new(HelperFact)},
}

const (
	testifyAssert  = "github.com/stretchr/testify/assert"
	testifyRequire = "github.com/stretchr/testify/require"
)

// HelperFact (exported for drivers other than go vet, such as the
// module-wide test) marks a function that, called with a test's T, can end the
// calling goroutine (FailsNow) or report a failure through it (Reports).
// Via names the first call that makes it so, for the message.
type HelperFact struct {
	FailsNow bool
	Reports  bool
	Via      string
}

func (*HelperFact) AFact() {}

func (f *HelperFact) String() string {
	return fmt.Sprintf("failsNow=%v reports=%v via %s", f.FailsNow, f.Reports, f.Via)
}

// effect is what one call can do to the test.
type effect struct {
	failsNow bool
	reports  bool
	via      string
}

func (e effect) any() bool { return e.failsNow || e.reports }

type checker struct {
	pass *analysis.Pass
	// local holds what the package's own functions do, as far as known.
	local map[*types.Func]*HelperFact
	// lits maps a local variable to the function literal assigned to it, so
	// that `check := func() {...}; go check()` is followed.
	lits map[*types.Var]*ast.FuncLit
}

func run(pass *analysis.Pass) (any, error) {
	c := &checker{pass: pass, local: map[*types.Func]*HelperFact{}, lits: map[*types.Var]*ast.FuncLit{}}

	var decls []*ast.FuncDecl
	for _, f := range pass.Files {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
				decls = append(decls, fd)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			c.recordLit(n)
			return true
		})
	}

	// What each function of the package does, to a fixed point: a helper
	// may call another declared after it.
	for changed := true; changed; {
		changed = false
		for _, fd := range decls {
			fn, ok := pass.TypesInfo.Defs[fd.Name].(*types.Func)
			if !ok {
				continue
			}
			e := c.scan(fd.Body)
			old := c.local[fn]
			if !e.any() || (old != nil && old.FailsNow == e.failsNow && old.Reports == e.reports) {
				continue
			}
			if old != nil {
				e.failsNow = e.failsNow || old.FailsNow
				e.reports = e.reports || old.Reports
			}
			c.local[fn] = &HelperFact{FailsNow: e.failsNow, Reports: e.reports, Via: e.via}
			changed = true
		}
	}
	for fn, f := range c.local {
		if isTestEntry(fn) {
			continue // never called as a helper
		}
		pass.ExportObjectFact(fn, f)
	}

	for _, f := range pass.Files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				c.checkGo(n)
			case *ast.CallExpr:
				c.checkWait(n)
			}
			return true
		})
	}
	return nil, nil
}

// recordLit remembers `v := func(...) {...}` and `var v = func...`.
func (c *checker) recordLit(n ast.Node) {
	switch n := n.(type) {
	case *ast.AssignStmt:
		if len(n.Lhs) != len(n.Rhs) {
			return
		}
		for i, l := range n.Lhs {
			id, ok := l.(*ast.Ident)
			lit, isLit := n.Rhs[i].(*ast.FuncLit)
			if !ok || !isLit {
				continue
			}
			if v, ok := c.pass.TypesInfo.ObjectOf(id).(*types.Var); ok {
				c.lits[v] = lit
			}
		}
	case *ast.ValueSpec:
		if len(n.Names) != len(n.Values) {
			return
		}
		for i, id := range n.Names {
			if lit, ok := n.Values[i].(*ast.FuncLit); ok {
				if v, ok := c.pass.TypesInfo.ObjectOf(id).(*types.Var); ok {
					c.lits[v] = lit
				}
			}
		}
	}
}

// scan reports the strongest effect of any call under n that runs on the
// caller's goroutine (see walkCalls).
func (c *checker) scan(n ast.Node) effect { return c.scanWith(n, nil) }

// walkCalls calls f for each call under n that runs on the goroutine that
// runs n: it does not enter a `go` statement (checked on its own), nor the
// body of a subtest or a cleanup (t.Run and t.Cleanup run those on a
// goroutine of the test's own). Other function literals are entered: a
// helper that builds and runs a closure is judged by it.
func (c *checker) walkCalls(n ast.Node, f func(*ast.CallExpr)) {
	ast.Inspect(n, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			return false
		case *ast.CallExpr:
			f(n)
			if fn := calledFunc(c.pass.TypesInfo, n); fn != nil && fn.Pkg() != nil && fn.Pkg().Path() == "testing" &&
				(fn.Name() == "Run" || fn.Name() == "Cleanup") {
				for _, a := range n.Args {
					if _, ok := ast.Unparen(a).(*ast.FuncLit); !ok {
						ast.Inspect(a, func(m ast.Node) bool {
							if call, ok := m.(*ast.CallExpr); ok {
								f(call)
							}
							return true
						})
					}
				}
				ast.Inspect(n.Fun, func(m ast.Node) bool {
					if call, ok := m.(*ast.CallExpr); ok {
						f(call)
					}
					return true
				})
				return false
			}
		}
		return true
	})
}

// callEffect says what one call can do to the test. seen guards against a
// closure variable that calls itself.
func (c *checker) callEffect(call *ast.CallExpr, seen map[*types.Var]bool) effect {
	info := c.pass.TypesInfo
	name := render(call.Fun)
	if passesCollectT(info, call) {
		// A call handed EventuallyWithT's collector reports to it: what
		// it can do to a T is what it does to its caller's T, not to
		// this one.
		return effect{}
	}

	switch fun := ast.Unparen(call.Fun).(type) {
	case *ast.Ident:
		if v, ok := info.ObjectOf(fun).(*types.Var); ok {
			lit := c.lits[v]
			if lit == nil || seen[v] {
				return effect{}
			}
			if seen == nil {
				seen = map[*types.Var]bool{}
			}
			seen[v] = true
			e := c.scanWith(lit.Body, seen)
			if e.any() {
				e.via = name + " → " + e.via
			}
			return e
		}
	case *ast.FuncLit:
		return effect{} // called on the spot: the walkers enter its body
	}

	fn := calledFunc(info, call)
	if fn == nil || fn.Pkg() == nil {
		return effect{}
	}
	path := fn.Pkg().Path()
	switch {
	case path == "testing":
		switch fn.Name() {
		case "FailNow", "Fatal", "Fatalf", "SkipNow", "Skip", "Skipf":
			return effect{failsNow: true, via: name}
		case "Error", "Errorf", "Fail":
			return effect{reports: true, via: name}
		}
		return effect{}
	case path == testifyRequire || strings.HasPrefix(path, testifyRequire+"/"):
		if !takesTestingT(fn) {
			return effect{}
		}
		return effect{failsNow: true, via: name}
	case path == testifyAssert || strings.HasPrefix(path, testifyAssert+"/"):
		if !takesTestingT(fn) {
			return effect{}
		}
		return effect{reports: true, via: name}
	}

	e := c.funcEffect(fn)
	if e.any() {
		e.via = name + " → " + e.via
	}
	return e
}

func (c *checker) scanWith(body ast.Node, seen map[*types.Var]bool) effect {
	var out effect
	c.walkCalls(body, func(call *ast.CallExpr) {
		e := c.callEffect(call, seen)
		if e.failsNow && !out.failsNow {
			out.failsNow, out.via = true, e.via
		}
		if e.reports && !out.reports {
			out.reports = true
			if out.via == "" {
				out.via = e.via
			}
		}
	})
	return out
}

// checkGo reports a `go` statement whose function can end its goroutine
// through a test's T.
func (c *checker) checkGo(g *ast.GoStmt) {
	var e effect
	if lit, ok := ast.Unparen(g.Call.Fun).(*ast.FuncLit); ok {
		c.eachCall(lit.Body, func(call *ast.CallExpr, ce effect) {
			if ce.failsNow {
				c.pass.Reportf(call.Pos(), "%s in a goroutine the test started: it can call FailNow, which must run on the test's goroutine (%s); send the error back to the test instead", render(call.Fun), ce.via)
			}
		})
		return
	}
	e = c.callEffect(g.Call, nil)
	if e.failsNow {
		c.pass.Reportf(g.Pos(), "go %s: it can call FailNow, which must run on the test's goroutine (%s); send the error back to the test instead", render(g.Call.Fun), e.via)
	}
}

// eachCall calls f for every call under body that can fail or report
// through a test, with what it can do. A function literal called on the
// spot is entered, so its calls are reported where they are.
func (c *checker) eachCall(body ast.Node, f func(*ast.CallExpr, effect)) {
	c.walkCalls(body, func(call *ast.CallExpr) {
		if _, ok := ast.Unparen(call.Fun).(*ast.FuncLit); ok {
			return // its calls are visited on their own
		}
		if e := c.callEffect(call, nil); e.any() {
			f(call, e)
		}
	})
}

// waitFuncs are testify's polling assertions, whose condition runs in a
// goroutine of testify's: the index of the condition among the arguments of
// the package function (the methods of Assertions take one fewer).
var waitFuncs = map[string]bool{
	"Eventually": true, "Eventuallyf": true,
	"EventuallyWithT": true, "EventuallyWithTf": true,
	"Never": true, "Neverf": true,
}

// checkWait reports a condition of Eventually/EventuallyWithT/Never that
// can fail or report through a test's T.
func (c *checker) checkWait(call *ast.CallExpr) {
	fn := calledFunc(c.pass.TypesInfo, call)
	if fn == nil || fn.Pkg() == nil || !waitFuncs[fn.Name()] {
		return
	}
	path := fn.Pkg().Path()
	if path != testifyAssert && path != testifyRequire {
		return
	}
	idx := 1
	if sig, ok := fn.Type().(*types.Signature); ok && sig.Recv() != nil {
		idx = 0
	}
	if len(call.Args) <= idx {
		return
	}
	cond := ast.Unparen(call.Args[idx])
	where := render(call.Fun)
	report := func(at ast.Node, what string, e effect) {
		kind := "report a failure through the test's T"
		if e.failsNow {
			kind = "call FailNow"
		}
		c.pass.Reportf(at.Pos(), "%s inside the condition of %s: it can %s from testify's goroutine (%s); use EventuallyWithT with *assert.CollectT, or poll in the test's goroutine", what, where, kind, e.via)
	}
	switch cond := cond.(type) {
	case *ast.FuncLit:
		c.eachCall(cond.Body, func(inner *ast.CallExpr, e effect) { report(inner, render(inner.Fun), e) })
	case *ast.Ident:
		if v, ok := c.pass.TypesInfo.ObjectOf(cond).(*types.Var); ok && c.lits[v] != nil {
			c.eachCall(c.lits[v].Body, func(inner *ast.CallExpr, e effect) { report(inner, render(inner.Fun), e) })
			return
		}
		if fn, ok := c.pass.TypesInfo.ObjectOf(cond).(*types.Func); ok {
			if e := c.funcEffect(fn); e.any() {
				report(cond, cond.Name, e)
			}
		}
	case *ast.SelectorExpr:
		if sel := c.pass.TypesInfo.Selections[cond]; sel != nil {
			if fn, ok := sel.Obj().(*types.Func); ok {
				if e := c.funcEffect(fn); e.any() {
					report(cond, render(cond), e)
				}
			}
		} else if fn, ok := c.pass.TypesInfo.ObjectOf(cond.Sel).(*types.Func); ok {
			if e := c.funcEffect(fn); e.any() {
				report(cond, render(cond), e)
			}
		}
	}
}

// funcEffect is what calling fn (a method value or function passed as the
// condition) can do.
func (c *checker) funcEffect(fn *types.Func) effect {
	var f *HelperFact
	if fn.Pkg() == c.pass.Pkg {
		f = c.local[fn.Origin()]
	} else {
		var imported HelperFact
		if c.pass.ImportObjectFact(fn.Origin(), &imported) {
			f = &imported
		}
	}
	if f == nil {
		return effect{}
	}
	return effect{failsNow: f.FailsNow, reports: f.Reports, via: f.Via}
}

// isTestEntry is true for the functions go test calls itself.
func isTestEntry(fn *types.Func) bool {
	if fn.Type().(*types.Signature).Recv() != nil {
		return false
	}
	for _, p := range []string{"Test", "Benchmark", "Fuzz", "Example"} {
		if strings.HasPrefix(fn.Name(), p) {
			return true
		}
	}
	return false
}

// calledFunc is the function or method a call calls, if static.
func calledFunc(info *types.Info, call *ast.CallExpr) *types.Func {
	switch fun := ast.Unparen(call.Fun).(type) {
	case *ast.Ident:
		fn, _ := info.Uses[fun].(*types.Func)
		return fn
	case *ast.SelectorExpr:
		if sel := info.Selections[fun]; sel != nil {
			fn, _ := sel.Obj().(*types.Func)
			return fn
		}
		fn, _ := info.Uses[fun.Sel].(*types.Func)
		return fn
	case *ast.IndexExpr: // a generic function with explicit type arguments
		if id, ok := fun.X.(*ast.Ident); ok {
			fn, _ := info.Uses[id].(*types.Func)
			return fn
		}
	}
	return nil
}

// takesTestingT is true for testify functions whose first parameter is the
// test (assert.TestingT / require.TestingT), and for methods of Assertions,
// which hold one. Pure helpers like assert.ObjectsAreEqual take none.
func takesTestingT(fn *types.Func) bool {
	sig, ok := fn.Type().(*types.Signature)
	if !ok {
		return false
	}
	if sig.Recv() != nil {
		return true
	}
	if sig.Params().Len() == 0 {
		return false
	}
	named, ok := types.Unalias(sig.Params().At(0).Type()).(*types.Named)
	return ok && named.Obj().Name() == "TestingT"
}

// passesCollectT is true when one of the call's arguments is testify's
// *assert.CollectT: a helper written as `func scrape(t require.TestingT, …)`
// and called with EventuallyWithT's collector fails that collector, which
// is what it is for. (A helper that takes the collector and also fails a T
// it holds elsewhere would pass unseen: keep helpers to one T.)
func passesCollectT(info *types.Info, call *ast.CallExpr) bool {
	for _, a := range call.Args {
		if isCollectT(info.TypeOf(a)) {
			return true
		}
	}
	return false
}

func isCollectT(t types.Type) bool {
	if t == nil {
		return false
	}
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	named, ok := types.Unalias(t).(*types.Named)
	return ok && named.Obj().Name() == "CollectT" && named.Obj().Pkg() != nil && named.Obj().Pkg().Path() == testifyAssert
}

// render prints a call's function as written, shortly.
func render(e ast.Expr) string {
	switch e := ast.Unparen(e).(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return render(e.X) + "." + e.Sel.Name
	case *ast.CallExpr:
		return render(e.Fun) + "(…)"
	case *ast.IndexExpr:
		return render(e.X)
	case *ast.FuncLit:
		return "func literal"
	case *ast.StarExpr:
		return render(e.X)
	}
	return "call"
}
