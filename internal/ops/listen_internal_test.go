package ops

import (
	"testing"

	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/stretchr/testify/require"
)

// A tap on a pattern takes an event its pattern matches; a team's tap
// only one delivered to a route of the team (visible), the platform's
// (visible nil) any.
func TestListenTakesByPatternAndTeam(t *testing.T) {
	t.Parallel()
	ev := func(source, typ string, routes ...string) store.ReplayCandidate {
		states := map[string]string{}
		for _, r := range routes {
			states[r] = "delivered"
		}
		return store.ReplayCandidate{Source: source, EventType: typ, States: states}
	}
	tap := ListenRequest{Pattern: "stripe.invoice.*"}
	team := map[string]bool{"payments:ledger": true}
	for _, c := range []struct {
		name    string
		req     ListenRequest
		visible map[string]bool
		ev      store.ReplayCandidate
		want    bool
	}{
		{"platform, matching", tap, nil, ev("stripe", "invoice.paid", "billing"), true},
		{"platform, not matching", tap, nil, ev("stripe", "customer.created", "billing"), false},
		{"platform, a type of two words past the pattern", tap, nil, ev("stripe", "invoice.payment.failed"), false},
		{"team, matching, delivered to its route", tap, team, ev("stripe", "invoice.paid", "billing", "payments:ledger"), true},
		{"team, matching, another team's route only", tap, team, ev("stripe", "invoice.paid", "billing"), false},
		{"team, matching, no route at all", tap, team, ev("stripe", "invoice.paid"), false},
		{"a route: the store chose it", ListenRequest{Route: "billing"}, nil, ev("stripe", "anything"), true},
	} {
		require.Equal(t, c.want, listenTakes(c.req, c.visible, c.ev), c.name)
	}
}
