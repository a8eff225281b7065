package rule_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/rule"
	"github.com/stretchr/testify/require"
)

var stripe = []byte(`{"id":"evt_1","type":"invoice.paid","livemode":true,"data":{"object":{"id":"in_1","amount_paid":150000,"currency":"brl","customer":"cus_Q8x","lines":{"data":[{"amount":100000},{"amount":50000}]},"metadata":{"order":"o-7"}}}}`)

func input(body []byte) rule.Input {
	return rule.Input{
		Body: rule.ParseBody(body), Headers: rule.HeadersOf(map[string][]string{"Stripe-Signature": {"t=1,v1=x"}, "X-Shop": {"a", "b"}}),
		Source: "stripe", EventType: "invoice.paid", ReceivedAt: time.Date(2026, 12, 4, 10, 32, 0, 123456789, time.UTC),
	}
}

func TestFilter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		expr string
		want bool
		err  string // a part of the evaluation error, "" for none
	}{
		{`body.data.object.amount_paid > 100000 && body.data.object.currency == "brl"`, true, ""},
		{`body.data.object.amount_paid > 200000`, false, ""},
		{`body.livemode == false`, false, ""},
		{`body.data.object.amount_paid > 100000.5`, true, ""},
		{`source == "stripe" && event_type.startsWith("invoice.")`, true, ""},
		{`headers["x-shop"] == "a, b"`, true, ""},
		{`"stripe-signature" in headers`, true, ""},
		{`received_at > timestamp("2026-12-04T10:00:00Z")`, true, ""},
		{`body.data.object.metadata.order in ["o-7", "o-8"]`, true, ""},
		{`body.data.object.lines.data.exists(l, l.amount == 50000)`, true, ""},
		{`has(body.data.object.discount)`, false, ""},
		{`body.?data.?object.?discount.orValue(0) == 0`, true, ""},
		{`body.data.object.discount > 0`, false, "no such key"},
		{`body.data.object.amount_paid / 0 > 1`, false, "division by zero"},
	} {
		t.Run(c.expr, func(t *testing.T) {
			f, err := rule.CompileFilter(c.expr, rule.Limits{})
			require.NoError(t, err)
			got, err := f.Match(ctx, input(stripe))
			if c.err != "" {
				var ee *rule.EvalError
				require.ErrorAs(t, err, &ee)
				require.Equal(t, "error", ee.Reason)
				require.Contains(t, err.Error(), c.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want, got)
		})
	}
}

func TestFilterOnABodyThatIsNotJSON(t *testing.T) {
	t.Parallel()
	f, err := rule.CompileFilter(`body == null && headers["content-type"].startsWith("application/x-www-form")`, rule.Limits{})
	require.NoError(t, err)
	in := input([]byte("a=1&b=2"))
	in.Headers = map[string]string{"content-type": "application/x-www-form-urlencoded"}
	got, err := f.Match(context.Background(), in)
	require.NoError(t, err)
	require.True(t, got)
}

func TestCompileErrorsNameLineAndColumn(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		expr, want string
	}{
		{`bdy.amount > 1`, "1:1: undeclared reference to 'bdy'"},
		{"body.amount > 1 &&\n  source == ", "2:13: Syntax error"},
		{`source + 1`, "1:8: found no matching overload for '_+_'"},
		{`"a string"`, "1:1: the expression yields string; it must yield bool"},
		{`  `, "1:1: empty expression"},
	} {
		_, err := rule.CompileFilter(c.expr, rule.Limits{})
		var ce *rule.CompileError
		require.ErrorAs(t, err, &ce, c.expr)
		require.Contains(t, err.Error(), c.want, c.expr)
		require.NotEmpty(t, ce.Problems)
	}
	_, err := rule.CompileTransform("", `{"x": 1}`, rule.Limits{})
	require.ErrorContains(t, err, "it must yield map(string, string)")
}

// An expression that would loop or allocate without end is stopped by its
// cost, or its time, and says so: the event fails, the caller goes on.
func TestCostLimitStopsAnExpression(t *testing.T) {
	t.Parallel()
	items := make([]string, 3000)
	for i := range items {
		items[i] = fmt.Sprint(i)
	}
	body := []byte(`{"items":[` + strings.Join(items, ",") + `]}`)
	for _, expr := range []string{
		`body.items.all(x, body.items.all(y, x + y >= 0))`,
		`body.items.map(x, body.items.map(y, string(x) + string(y))).size() > 0`,
	} {
		f, err := rule.CompileFilter(expr, rule.Limits{Cost: 10_000})
		require.NoError(t, err)
		start := time.Now()
		_, err = f.Match(context.Background(), input(body))
		var ee *rule.EvalError
		require.ErrorAs(t, err, &ee, expr)
		require.Equal(t, "cost", ee.Reason, "%s: %v", expr, err)
		require.Contains(t, err.Error(), "past the cost limit of 10000", "the cost, not the time, stops it")
		t.Logf("%s: %v after %s", expr, err, time.Since(start).Round(time.Millisecond))
	}
	// The same with a small list is within the cost.
	f, err := rule.CompileFilter(`body.items.all(x, body.items.all(y, x + y >= 0))`, rule.Limits{})
	require.NoError(t, err)
	ok, err := f.Match(context.Background(), input([]byte(`{"items":[1,2,3]}`)))
	require.NoError(t, err)
	require.True(t, ok)
}

func TestTransform(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		name, body, headers string
		want, contentType   string
		wantHeaders         map[string]string
	}{
		{"a map is JSON, keys sorted", `{"id": body.data.object.id, "amount": body.data.object.amount_paid, "customer": body.data.object.customer}`, "",
			`{"amount":150000,"customer":"cus_Q8x","id":"in_1"}`, "application/json", nil},
		{"a list", `body.data.object.lines.data.map(l, l.amount)`, "", `[100000,50000]`, "application/json", nil},
		{"slack", `{"text": "Invoice " + body.data.object.id + " paid: " + string(body.data.object.amount_paid / 100) + " " + body.data.object.currency.upperAscii()}`, "",
			`{"text":"Invoice in_1 paid: 1500 BRL"}`, "application/json", nil},
		{"a string as is", `"paid " + body.data.object.id`, "", `paid in_1`, "text/plain; charset=utf-8", nil},
		{"headers only", "", `{"x-ledger-kind": event_type, "content-type": "application/vnd.ledger+json"}`, "", "",
			map[string]string{"X-Ledger-Kind": "invoice.paid", "Content-Type": "application/vnd.ledger+json"}},
		{"received_at", `{"at": received_at}`, "", `{"at":"2026-12-04T10:32:00.123Z"}`, "application/json", nil},
		{"null for a missing optional", `{"discount": body.data.object.?discount}`, "", `{"discount":null}`, "application/json", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr, err := rule.CompileTransform(c.body, c.headers, rule.Limits{})
			require.NoError(t, err)
			s, err := tr.Apply(ctx, input(stripe))
			require.NoError(t, err)
			if c.body == "" {
				require.Nil(t, s.Body, "the event's body is kept")
			} else {
				require.Equal(t, c.want, string(s.Body))
			}
			require.Equal(t, c.contentType, s.ContentType)
			if c.wantHeaders != nil {
				require.Equal(t, c.wantHeaders, s.Headers)
			}
		})
	}
}

func TestTransformFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		name, body, headers, reason, msg string
		limits                           rule.Limits
	}{
		{"a missing field", `{"x": body.nope.deeper}`, "", "error", "no such key", rule.Limits{}},
		{"a reserved header", "", `{"webhook-signature": "v1,forged"}`, "output", "set by the relay itself", rule.Limits{}},
		{"a relay header", "", `{"X-Hookrelay-Attempt": "9"}`, "output", "set by the relay itself", rule.Limits{}},
		{"a bad header value", "", `{"x-a": "1\r\nx-b: 2"}`, "output", "control character", rule.Limits{}},
		{"a bad header name", "", `{"x a": "1"}`, "output", "not a valid header name", rule.Limits{}},
		{"too large", `{"id": body.data.object.id, "customer": body.data.object.customer, "currency": body.data.object.currency}`, "", "output", "over the output limit of 50", rule.Limits{OutputBytes: 50}},
		{"NaN", `{"x": 0.0 / 0.0}`, "", "output", "NaN", rule.Limits{}},
		{"a map with other keys", `{1: "a"}`, "", "output", "JSON keys are strings", rule.Limits{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr, err := rule.CompileTransform(c.body, c.headers, c.limits)
			require.NoError(t, err)
			_, err = tr.Apply(ctx, input(stripe))
			var ee *rule.EvalError
			require.True(t, errors.As(err, &ee), "%v", err)
			require.Equal(t, c.reason, ee.Reason, "%v", err)
			require.Contains(t, err.Error(), c.msg)
		})
	}
}

func TestTransformReadsHeaders(t *testing.T) {
	t.Parallel()
	tr, err := rule.CompileTransform(`{"id": body.id}`, "", rule.Limits{})
	require.NoError(t, err)
	require.False(t, tr.ReadsHeaders())
	tr, err = rule.CompileTransform(`{"sig": headers["stripe-signature"]}`, "", rule.Limits{})
	require.NoError(t, err)
	require.True(t, tr.ReadsHeaders())
	tr, err = rule.CompileTransform("", `{"x-from": headers[?"x-shop"].orValue("")}`, rule.Limits{})
	require.NoError(t, err)
	require.True(t, tr.ReadsHeaders())
}

func TestParseBodyNumbers(t *testing.T) {
	t.Parallel()
	v := rule.ParseBody([]byte(`{"big": 9007199254740993, "f": 1.5, "e": 1e400}`))
	m := v.(map[string]any)
	require.Equal(t, int64(9007199254740993), m["big"], "an integer keeps every digit")
	require.Equal(t, 1.5, m["f"])
	require.Equal(t, "1e400", m["e"], "a number no double holds stays as its text")
	require.Nil(t, rule.ParseBody([]byte("not json")))
	require.Nil(t, rule.ParseBody(nil))
}
