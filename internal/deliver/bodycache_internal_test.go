package deliver

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// A body is parsed once for every route of its event, and the cache keeps
// the latest bodyCacheSize events.
func TestBodyCacheParsesAnEventOnce(t *testing.T) {
	t.Parallel()
	var c bodyCache
	first := uuid.New()
	a := c.parsed(first, []byte(`{"a":1}`))
	b := c.parsed(first, []byte(`{"a":1}`))
	require.Equal(t, reflect.ValueOf(a).Pointer(), reflect.ValueOf(b).Pointer(), "the same parsed map, not a second parse")
	require.Equal(t, map[string]any{"a": int64(1)}, a)
	for i := range bodyCacheSize {
		c.parsed(uuid.New(), []byte(fmt.Sprintf(`{"n":%d}`, i)))
	}
	require.Len(t, c.byID, bodyCacheSize)
	_, kept := c.byID[first]
	require.False(t, kept, "the oldest is dropped")
	require.Nil(t, c.parsed(uuid.New(), []byte("not json")))
}
