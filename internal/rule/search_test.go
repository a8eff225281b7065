package rule

import (
	"context"
	"testing"
)

func TestCompileSearchReadsTheDocumentTheExpressionRequires(t *testing.T) {
	cases := []struct{ src, want string }{
		{`body.data.object.customer == "cus_Q8x"`, `{"data":{"object":{"customer":"cus_Q8x"}}}`},
		{`"acme" == body["shop"] && body.live == true && body.n == 3`, `{"live":true,"n":3,"shop":"acme"}`},
		{`body.a.b == "x" && (body.c == "y" || body.c == "z")`, `{"a":{"b":"x"}}`},
		{`body.a == "x" && body.a.b == "y"`, `{"a":"x"}`},
		{`body.amount > 100`, ``},
		{`has(body.a) && event_type == "x"`, ``},
		{`!(body.a == "x")`, ``},
		{`body.a == 1.5`, ``},
	}
	for _, c := range cases {
		s, err := CompileSearch(c.src, Limits{})
		if err != nil {
			t.Fatalf("%s: %v", c.src, err)
		}
		if got := string(s.Contains()); got != c.want {
			t.Errorf("%s: contains %s, want %s", c.src, got, c.want)
		}
	}
}

func TestSearchJudgesWhatItsDocumentOnlyNarrows(t *testing.T) {
	s, err := CompileSearch(`body.data.object.customer == "cus_1" && body.amount > 100`, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for body, want := range map[string]bool{
		`{"data":{"object":{"customer":"cus_1"}},"amount":150}`: true,
		`{"data":{"object":{"customer":"cus_1"}},"amount":50}`:  false,
		`{"data":{"object":{"customer":"cus_2"}},"amount":150}`: false,
		`not json`: false,
	} {
		got, _ := s.Match(context.Background(), Input{Body: ParseBody([]byte(body))})
		if got != want {
			t.Errorf("%s: %v, want %v", body, got, want)
		}
	}
	if _, err := CompileSearch(`body.a ==`, Limits{}); err == nil {
		t.Fatal("a broken expression compiled")
	}
	if _, err := CompileSearch(`body.a`, Limits{}); err != nil {
		t.Fatalf("a dyn expression is judged when run: %v", err)
	}
}
