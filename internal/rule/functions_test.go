package rule_test

import (
	"context"
	"testing"

	"github.com/hookrelay/hookrelay/internal/rule"
)

// TestTheFunctionsTheDocsName: every function docs/rules.md lists compiles
// and does what its example says.
func TestTheFunctionsTheDocsName(t *testing.T) {
	t.Parallel()
	for _, e := range []string{
		`"abc".charAt(1) == "b"`, `"abc".indexOf("b") == 1`, `"abca".lastIndexOf("a") == 3`, `"AB".lowerAscii() == "ab"`,
		`"ab".upperAscii() == "AB"`, `"ab".replace("a","c") == "cb"`, `"a,b".split(",").size() == 2`, `"abc".substring(1) == "bc"`,
		`" a ".trim() == "a"`, `["a","b"].join("-") == "a-b"`, `strings.quote("a") != ""`, `"%s".format(["a"]) == "a"`,
		`base64.encode(b"a") == "YQ=="`, `base64.decode("YQ==") == b"a"`, `math.greatest(1,2) == 2`, `math.least(1,2) == 1`,
		`math.abs(-1) == 1`, `math.ceil(1.2) == 2.0`, `math.floor(1.2) == 1.0`, `math.round(1.5) == 2.0`, `math.bitOr(1,2) == 3`,
		`[[1],[2]].flatten().size() == 2`, `[1,2,3].slice(0,1) == [1]`, `[2,1].sort() == [1,2]`, `[2,1].sortBy(x, x) == [1,2]`,
		`[1,1].distinct() == [1]`, `[1,2].reverse() == [2,1]`, `lists.range(3) == [0,1,2]`, `[1,2].first().orValue(0) == 1`, `[1,2].last().orValue(0) == 2`,
		`sets.contains([1,2],[1])`, `sets.equivalent([1,2],[2,1])`, `sets.intersects([1],[1,2])`, `"a".matches("^a$")`,
	} {
		f, err := rule.CompileFilter(e, rule.Limits{})
		if err != nil {
			t.Errorf("%s: %v", e, err)
			continue
		}
		ok, err := f.Match(context.Background(), rule.Input{})
		if err != nil || !ok {
			t.Errorf("%s: %v, %v", e, ok, err)
		}
	}
}
