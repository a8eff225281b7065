package amqp

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTopicMatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern, key string
		want         bool
	}{
		{"stripe.invoice.*", "stripe.invoice.paid", true},
		{"stripe.invoice.*", "stripe.invoice.paid.late", false},
		{"stripe.invoice.*", "stripe.invoice", false},
		{"stripe.#", "stripe", true},
		{"stripe.#", "stripe.a.b.c", true},
		{"#", "anything.at.all", true},
		{"*.invoice.paid", "acme.invoice.paid", true},
		{"*.invoice.paid", "invoice.paid", false},
		{"a.#.z", "a.z", true},
		{"a.#.z", "a.b.c.z", true},
		{"a.#.z", "a.b.c", false},
		{"a.#.#.z", "a.b.z", true},
		{"#.paid", "stripe.invoice.paid", true},
		{"shopify.orders/create", "shopify.orders/create", true},
		{"a.*.#", "a", false},
		{"a.*.#", "a.b", true},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, TopicMatch(tt.pattern, tt.key), "%s ~ %s", tt.pattern, tt.key)
	}
}

func TestTierDelayInvertsRetry(t *testing.T) {
	n := Names{Prefix: "hr"}
	for _, d := range []time.Duration{250 * time.Millisecond, 10 * time.Second, time.Minute, 5 * time.Minute, 2 * time.Hour} {
		got, ok := n.TierDelay(n.Retry(d))
		require.True(t, ok, d)
		require.Equal(t, d, got)
	}
	for _, name := range []string{"hr.route.billing", "hr.retry.", "hr.retry.soon", "other.retry.10s", "hr.retry.60s"} {
		_, ok := n.TierDelay(name)
		require.False(t, ok, name)
	}
}
