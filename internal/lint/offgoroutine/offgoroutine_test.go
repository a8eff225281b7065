package offgoroutine_test

import (
	"go/types"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/analysistest"
	"golang.org/x/tools/go/packages"

	"github.com/hookrelay/hookrelay/internal/lint/offgoroutine"
)

// TestFixture: every forbidden shape in testdata/src/fixture is reported
// where its `want` comment says, and none of the allowed ones is.
func TestFixture(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), offgoroutine.Analyzer, "fixture")
}

// TestTree: no test of the module asserts off the test's goroutine. It
// loads every package of the module with its tests (dependencies from the
// build cache's export data, not from source), runs the analyzer over them
// in import order with the helpers' facts carried between packages, and
// fails naming every file:line found.
func TestTree(t *testing.T) {
	if testing.Short() {
		t.Skip("loads the whole module")
	}
	_, here, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(here), "..", "..", "..")
	cfg := &packages.Config{
		Mode: packages.NeedName | packages.NeedFiles | packages.NeedImports | packages.NeedTypes |
			packages.NeedSyntax | packages.NeedTypesInfo | packages.NeedTypesSizes | packages.NeedModule,
		Dir:   root,
		Tests: true,
		// The same build as this test's, so the export data of the
		// dependencies is what the test run already compiled.
		BuildFlags: buildFlags,
	}
	pkgs, err := packages.Load(cfg, "./...")
	if err != nil {
		t.Fatalf("loading the module: %v", err)
	}
	var loadErrs []string
	packages.Visit(pkgs, nil, func(p *packages.Package) {
		for _, e := range p.Errors {
			loadErrs = append(loadErrs, e.Error())
		}
	})
	if len(loadErrs) > 0 {
		t.Fatalf("loading the module:\n%s", strings.Join(loadErrs, "\n"))
	}

	// One variant of each package: the one compiled with its tests where
	// there is one ("p [p.test]" holds p's files and its _test.go files).
	byPath := map[string]*packages.Package{}
	for _, p := range pkgs {
		if strings.HasSuffix(p.PkgPath, ".test") { // the generated main
			continue
		}
		if old, ok := byPath[p.PkgPath]; ok && len(old.Syntax) >= len(p.Syntax) {
			continue
		}
		byPath[p.PkgPath] = p
	}

	facts := map[string]analysis.Fact{} // by the function's full name
	done := map[string]bool{}
	var found []string
	var visit func(p *packages.Package)
	visit = func(p *packages.Package) {
		if done[p.PkgPath] {
			return
		}
		done[p.PkgPath] = true
		imports := make([]string, 0, len(p.Imports))
		for path := range p.Imports {
			imports = append(imports, path)
		}
		sort.Strings(imports)
		for _, path := range imports {
			if dep := byPath[path]; dep != nil {
				visit(dep)
			}
		}
		pass := &analysis.Pass{
			Analyzer:   offgoroutine.Analyzer,
			Fset:       p.Fset,
			Files:      p.Syntax,
			Pkg:        p.Types,
			TypesInfo:  p.TypesInfo,
			TypesSizes: p.TypesSizes,
			ResultOf:   map[*analysis.Analyzer]any{},
			Report: func(d analysis.Diagnostic) {
				pos := p.Fset.Position(d.Pos)
				rel, err := filepath.Rel(root, pos.Filename)
				if err != nil {
					rel = pos.Filename
				}
				found = append(found, rel+":"+itoa(pos.Line)+": "+d.Message)
			},
			ImportObjectFact: func(obj types.Object, fact analysis.Fact) bool {
				f, ok := facts[factKey(obj)]
				if !ok {
					return false
				}
				*(fact.(*offgoroutine.HelperFact)) = *(f.(*offgoroutine.HelperFact))
				return true
			},
			ExportObjectFact:  func(obj types.Object, fact analysis.Fact) { facts[factKey(obj)] = fact },
			ImportPackageFact: func(*types.Package, analysis.Fact) bool { return false },
			ExportPackageFact: func(analysis.Fact) {},
		}
		if _, err := offgoroutine.Analyzer.Run(pass); err != nil {
			t.Errorf("%s: %v", p.PkgPath, err)
		}
	}
	paths := make([]string, 0, len(byPath))
	for path := range byPath {
		paths = append(paths, path)
	}
	sort.Strings(paths)
	for _, path := range paths {
		visit(byPath[path])
	}
	if len(done) < 20 {
		t.Fatalf("analysed only %d packages: the load found less than the module", len(done))
	}
	sort.Strings(found)
	if len(found) > 0 {
		t.Fatalf("%d assertions off the test's goroutine (see the package doc of offgoroutine for the fix):\n%s", len(found), strings.Join(found, "\n"))
	}
	t.Logf("%d packages analysed, %d helpers that can fail a test", len(done), len(facts))
}

func factKey(obj types.Object) string {
	if fn, ok := obj.(*types.Func); ok {
		return fn.FullName()
	}
	return obj.Pkg().Path() + "." + obj.Name()
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}
