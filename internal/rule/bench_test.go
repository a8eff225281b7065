package rule_test

import (
	"context"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/rule"
)

// benchBody is the body `hookrelay bench` sends: a Stripe-like invoice
// event of about 1.5 KB.
var benchBody = []byte(`{"id":"evt_run_1","object":"event","type":"invoice.paid","created":1764844320,"livemode":false,"data":{"object":{"id":"in_1","object":"invoice","amount_due":4200,"currency":"brl","customer":"cus_1","status":"paid","lines":[{"description":"Plan","amount":4200}],"description":"` + string(make([]byte, 0)) + `xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}}}`)

const (
	benchFilter    = `body.type == "invoice.paid" && body.data.object.currency == "brl" && body.data.object.amount_due > 0`
	benchTransform = `{"id": body.data.object.id, "customer": body.data.object.customer, "amount": body.data.object.amount_due, "currency": body.data.object.currency.upperAscii(), "lines": size(body.data.object.lines)}`
)

func BenchmarkParseBody(b *testing.B) {
	for b.Loop() {
		rule.ParseBody(benchBody)
	}
}

func BenchmarkFilter(b *testing.B) {
	f, err := rule.CompileFilter(benchFilter, rule.Limits{})
	if err != nil {
		b.Fatal(err)
	}
	in := rule.Input{Body: rule.ParseBody(benchBody), Source: "bench", EventType: "invoice.paid", ReceivedAt: time.Now()}
	ctx := context.Background()
	for b.Loop() {
		if ok, err := f.Match(ctx, in); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}

func BenchmarkTransform(b *testing.B) {
	tr, err := rule.CompileTransform(benchTransform, `{"x-bench-kind": event_type}`, rule.Limits{})
	if err != nil {
		b.Fatal(err)
	}
	in := rule.Input{Body: rule.ParseBody(benchBody), Source: "bench", EventType: "invoice.paid", ReceivedAt: time.Now()}
	ctx := context.Background()
	for b.Loop() {
		if _, err := tr.Apply(ctx, in); err != nil {
			b.Fatal(err)
		}
	}
}
