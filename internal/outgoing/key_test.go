package outgoing_test

import (
	"strings"
	"testing"

	"github.com/hookrelay/hookrelay/internal/outgoing"
	"github.com/hookrelay/hookrelay/internal/rule"
	"github.com/stretchr/testify/require"
)

// An amqp route's routing key is made from the event: its source, type,
// id and fields of its body; a field the event lacks, one that is not a
// scalar, and a key past AMQP's 255 bytes are errors (outgoing.ErrKey).
func TestKeyTemplateRendersFromTheEvent(t *testing.T) {
	t.Parallel()
	body := rule.ParseBody([]byte(`{"customer":{"id":"cus_1","vip":true},"amount":1500,"rate":1.5,"tags":["a"],"none":null}`))
	ev := outgoing.KeyEvent{Source: "stripe", EventType: "invoice.paid", EventID: "0193", Body: body}
	for _, tt := range []struct{ tmpl, want string }{
		{"", "stripe.invoice.paid"},
		{"{source}.{event_type}", "stripe.invoice.paid"},
		{"billing.{body.customer.id}.{event_id}", "billing.cus_1.0193"},
		{"{body.amount}-{body.rate}-{body.customer.vip}", "1500-1.5-true"},
		{"fixed", "fixed"},
	} {
		k, err := outgoing.ParseKeyTemplate(tt.tmpl)
		require.NoError(t, err, tt.tmpl)
		got, err := k.Render(ev)
		require.NoError(t, err, tt.tmpl)
		require.Equal(t, tt.want, got, tt.tmpl)
	}
	for _, tmpl := range []string{"{body.missing}", "{body.customer}", "{body.tags}", "{body.none}", "{body.customer.id.x}", strings.Repeat("x", 250) + "{source}"} {
		k, err := outgoing.ParseKeyTemplate(tmpl)
		require.NoError(t, err, tmpl)
		_, err = k.Render(ev)
		require.ErrorIs(t, err, outgoing.ErrKey, tmpl)
	}
	_, err := (mustKey(t, "{body.id}")).Render(outgoing.KeyEvent{Source: "s", EventType: "t"})
	require.ErrorIs(t, err, outgoing.ErrKey, "a body that is not JSON has no fields")
	for _, bad := range []string{"{", "}", "{nope}", "{body}", "{body.a..b}", "a{source"} {
		_, err := outgoing.ParseKeyTemplate(bad)
		require.Error(t, err, bad)
	}
}

func mustKey(t *testing.T, s string) *outgoing.KeyTemplate {
	t.Helper()
	k, err := outgoing.ParseKeyTemplate(s)
	require.NoError(t, err)
	return k
}
