package ops_test

import (
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/stretchr/testify/require"
)

// Issue 42: a search over the body without a window searches the last
// 24 hours and says so; with one, it searches that window; a broken
// expression is refused naming where.
func TestSearchWithoutAWindowSearchesTheLastDayAndSaysSo(t *testing.T) {
	before := time.Now()
	f, err := ops.FilterFields{Where: `body.data.object.customer == "cus_Q8x"`}.Parse()
	require.NoError(t, err)
	require.NotNil(t, f.Search)
	require.True(t, f.Search.DefaultWindow)
	require.WithinRange(t, f.Since, before.Add(-ops.DefaultSearchWindow-time.Second), time.Now().Add(-ops.DefaultSearchWindow))
	info := ops.SearchInfoOf(f)
	require.True(t, info.DefaultWindow)
	require.True(t, info.Indexed)
	require.Contains(t, info.Note, "no since given: searched the last 24h")

	f, err = ops.FilterFields{Where: `body.amount > 100`, Since: "3d"}.Parse()
	require.NoError(t, err)
	require.False(t, f.Search.DefaultWindow)
	require.WithinDuration(t, time.Now().Add(-72*time.Hour), f.Since, time.Minute)
	info = ops.SearchInfoOf(f)
	require.Empty(t, info.Note)
	require.False(t, info.Indexed, "no body field compared with a constant: every body of the window is read")

	_, err = ops.FilterFields{Where: `body.amount >`}.Parse()
	require.ErrorIs(t, err, ops.ErrInvalidRequest)
	require.Contains(t, err.Error(), "where: 1:")
	_, err = ops.ListFilter(ops.FilterFields{Where: `body.a == "b"`}, 10, "", "evt_1")
	require.ErrorIs(t, err, ops.ErrInvalidRequest, "a key and a search together are refused")
	f, err = ops.FilterFields{Source: "acme"}.Parse()
	require.NoError(t, err)
	require.Nil(t, ops.SearchInfoOf(f), "no search, nothing said")
}
