package deliver

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// A pair handed over at a generation makes its older copies stale, on its
// route only; the map keeps two generations of handedKeep pairs and
// forgets older ones (which are then asked about, as before).
func TestHandedGens(t *testing.T) {
	var c handedGens
	ev := uuid.New()
	require.False(t, c.stale("billing", ev, 0), "unknown: ask Postgres")
	c.add("billing", ev, 2)
	require.True(t, c.stale("billing", ev, 0))
	require.True(t, c.stale("billing", ev, 1))
	require.False(t, c.stale("billing", ev, 2), "the copy of its generation is the one to deliver")
	require.False(t, c.stale("billing", ev, 3))
	require.False(t, c.stale("crm", ev, 0), "another route's pair")

	for range handedKeep {
		c.add("billing", uuid.New(), 1)
	}
	require.True(t, c.stale("billing", ev, 1), "kept in the older generation")
	for range handedKeep {
		c.add("billing", uuid.New(), 1)
	}
	require.False(t, c.stale("billing", ev, 1), "forgotten")
	require.LessOrEqual(t, len(c.cur)+len(c.prev), 2*handedKeep)
}
