package ops

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// Issue 38, security 7: the audit log's filter takes every change of the
// actions table, and the log cannot be written with another action, so
// every action written is one the filter takes. Reads are not changes.
func TestEveryChangeIsFilterableAndNothingElseIsWritten(t *testing.T) {
	ctx := WithActor(context.Background(), "test")
	changes := 0
	for _, a := range Actions() {
		require.Contains(t, Roles, RoleOf(a), "%s needs a role", a)
		_, err := entry(ctx, a, "x", nil)
		if a == ActionRead || a == ActionTokenList {
			require.ErrorContains(t, err, "not a change", "%s is a read: no audit row", a)
			continue
		}
		require.NoError(t, err, "%s", a)
		_, err = AuditFilterFlags{Action: string(a)}.Filter()
		require.NoError(t, err, "the log holds %s: its filter must take it", a)
		changes++
	}
	require.Len(t, AuditActions, changes)
	_, err := entry(ctx, Action("route.sneak"), "x", nil)
	require.ErrorContains(t, err, "not a change of the actions table")
	require.Empty(t, RoleOf("route.sneak"), "an unknown action needs no known role: callers fail closed")
	_, err = AuditFilterFlags{Action: "route.sneak"}.Filter()
	require.ErrorIs(t, err, ErrInvalidRequest)
}
