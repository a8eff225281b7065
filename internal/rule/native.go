package rule

import (
	"encoding/base64"
	"fmt"
	"math"
	"time"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
)

// maxDepth bounds how deep a value native converts (a transformation's
// output nests as JSON).
const maxDepth = 64

// native converts a CEL value to the Go value encoding/json writes: maps
// with string keys, slices, strings, booleans, nil, int64, uint64 and
// float64; bytes as base64 text, timestamps as RFC 3339 text, durations as
// Go's text.
func native(v ref.Val) (any, error) { return nativeAt(v, 0) }

func nativeAt(v ref.Val, depth int) (any, error) {
	if depth > maxDepth {
		return nil, &EvalError{Reason: "output", Msg: fmt.Sprintf("the value nests deeper than %d levels", maxDepth)}
	}
	switch x := v.(type) {
	case types.Null:
		return nil, nil
	case types.Bool:
		return bool(x), nil
	case types.Int:
		return int64(x), nil
	case types.Uint:
		return uint64(x), nil
	case types.Double:
		f := float64(x)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, &EvalError{Reason: "output", Msg: "the value holds NaN or an infinity, which JSON cannot carry"}
		}
		return f, nil
	case types.String:
		return string(x), nil
	case types.Bytes:
		return base64.StdEncoding.EncodeToString(x), nil
	case types.Timestamp:
		return x.Time.UTC().Format(time.RFC3339Nano), nil
	case types.Duration:
		return x.Duration.String(), nil
	}
	if o, ok := v.(*types.Optional); ok {
		if !o.HasValue() {
			return nil, nil
		}
		return nativeAt(o.GetValue(), depth+1)
	}
	if m, ok := v.(traits.Mapper); ok {
		out := map[string]any{}
		it := m.Iterator()
		for it.HasNext() == types.True {
			k := it.Next()
			ks, ok := k.(types.String)
			if !ok {
				return nil, &EvalError{Reason: "output", Msg: fmt.Sprintf("a map key is %s; JSON keys are strings", k.Type())}
			}
			e, err := nativeAt(m.Get(k), depth+1)
			if err != nil {
				return nil, err
			}
			out[string(ks)] = e
		}
		return out, nil
	}
	if l, ok := v.(traits.Lister); ok {
		out := []any{}
		it := l.Iterator()
		for it.HasNext() == types.True {
			e, err := nativeAt(it.Next(), depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		return out, nil
	}
	return nil, &EvalError{Reason: "output", Msg: fmt.Sprintf("a value of type %s cannot be delivered", v.Type())}
}
