package bench

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheckCountsLostDuplicatesAndStrays(t *testing.T) {
	t.Parallel()
	r := &runner{}
	dump := map[pairKey]destRecord{
		{route: "bench", id: "a"}: {count: 1},
		{route: "bench", id: "b"}: {count: 3, bad: 1},
		{route: "bench", id: "x"}: {count: 1}, // not sent in this phase
		{route: "bare", id: "a"}:  {count: 1}, // another route
	}
	var p Phase
	r.check(&p, dump, "bench", []string{"a", "b", "c"})
	require.True(t, p.Checked)
	require.Equal(t, 1, p.Lost, "c never arrived")
	require.Equal(t, 2, p.Duplicates, "b arrived three times")
	require.Equal(t, 1, p.BadSignatures)
	require.Equal(t, 2, p.Unexpected)
}
