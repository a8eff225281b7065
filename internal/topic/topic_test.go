package topic

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMatch(t *testing.T) {
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
		require.Equal(t, tt.want, Match(tt.pattern, tt.key), "%s ~ %s", tt.pattern, tt.key)
	}
}
