package extract

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestNormalizeVersion(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    string
		numeric bool
	}{
		{"100", "100", true},
		{"9", "9", true},
		{"-3", "-3", true},
		{"1.25", "1.25", true},
		{"1e3", "1e3", true},
		{"12345678901234567890123", "12345678901234567890123", true},
		{"1e1001", "", false}, // past what is sensible to store as a number: text
		{"2026-11-27T14:00:00Z", "1795788000.000000000", true},
		{"2026-11-27T15:00:00+01:00", "1795788000.000000000", true}, // the same instant
		{"2026-11-27T14:00:00.5Z", "1795788000.500000000", true},
		{"1969-12-31T23:59:59.5Z", "-0.500000000", true},
		{"v2", "", false},
		{"1.2.3", "", false},
		{"0x10", "", false},
		{"2026-11-27", "", false}, // a date is not an RFC 3339 time: text
	}
	for _, tt := range tests {
		got, ok := NormalizeVersion(tt.in)
		require.Equal(t, tt.numeric, ok, tt.in)
		require.Equal(t, tt.want, got, tt.in)
	}
}

func TestExtractOrdering(t *testing.T) {
	t.Parallel()
	base := Config{IdempotencyPaths: []string{"id"}, EventTypePaths: []string{"type"}}
	withOrdering := func(res, ver Field) Config {
		c := base
		c.OrderingResource, c.OrderingVersion = res, ver
		return c
	}
	bodyPaths := withOrdering(Field{Path: "data.object.id"}, Field{Path: "created"})
	tests := []struct {
		name   string
		cfg    Config
		header http.Header
		body   string
		want   Ordering
	}{
		{"json number version", bodyPaths, nil, `{"id":"e","type":"t","created":200,"data":{"object":{"id":"sub_A"}}}`,
			Ordering{Resource: "sub_A", Version: "200", VersionNum: "200"}},
		{"time version from a header", withOrdering(Field{Path: "id"}, Field{Header: "X-Triggered-At"}),
			http.Header{"X-Triggered-At": {" 2026-11-27T14:00:00Z "}}, `{"id":"e","type":"t"}`,
			Ordering{Resource: "e", Version: "2026-11-27T14:00:00Z", VersionNum: "1795788000.000000000"}},
		{"text version", bodyPaths, nil, `{"id":"e","type":"t","created":"v7","data":{"object":{"id":"sub_A"}}}`,
			Ordering{Resource: "sub_A", Version: "v7"}},
		{"numeric resource kept exact", withOrdering(Field{Path: "rid"}, Field{Path: "seq"}), nil, `{"id":"e","type":"t","rid":12345678901234567890,"seq":1}`,
			Ordering{Resource: "12345678901234567890", Version: "1", VersionNum: "1"}},
		{"version missing: the resource alone", bodyPaths, nil, `{"id":"e","type":"t","data":{"object":{"id":"sub_A"}}}`, Ordering{Resource: "sub_A"}},
		{"no version declared: the resource alone", withOrdering(Field{Path: "data.object.id"}, Field{}), nil, `{"id":"e","type":"t","created":1,"data":{"object":{"id":"sub_A"}}}`, Ordering{Resource: "sub_A"}},
		{"resource missing: none", bodyPaths, nil, `{"id":"e","type":"t","created":1}`, Ordering{}},
		{"resource null: none", bodyPaths, nil, `{"id":"e","type":"t","created":1,"data":{"object":{"id":null}}}`, Ordering{}},
		{"resource an object: none", bodyPaths, nil, `{"id":"e","type":"t","created":1,"data":{"object":{"id":{}}}}`, Ordering{}},
		{"empty version header: the resource alone", withOrdering(Field{Path: "id"}, Field{Header: "X-Seq"}), http.Header{"X-Seq": {"  "}}, `{"id":"e","type":"t"}`, Ordering{Resource: "e"}},
		{"resource with a NUL: none", bodyPaths, nil, `{"id":"e","type":"t","created":1,"data":{"object":{"id":"a\u0000b"}}}`, Ordering{}},
		{"resource too long: none", bodyPaths, nil, `{"id":"e","type":"t","created":1,"data":{"object":{"id":"` + strings.Repeat("x", 1001) + `"}}}`, Ordering{}},
		{"not declared", base, nil, `{"id":"e","type":"t","created":1,"data":{"object":{"id":"sub_A"}}}`, Ordering{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			x, err := New(tt.cfg)
			require.NoError(t, err)
			res, err := x.Extract(Input{Header: tt.header, Body: []byte(tt.body)})
			require.NoError(t, err, "ordering never refuses an event")
			require.Equal(t, tt.want, res.Ordering)
		})
	}

	// A body that is not JSON, for a source whose key and type come from
	// headers: accepted, without ordering.
	x, err := New(Config{IdempotencyHeaders: []string{"X-Id"}, EventTypeHeader: "X-Type", OrderingResource: Field{Path: "id"}, OrderingVersion: Field{Path: "seq"}})
	require.NoError(t, err)
	res, err := x.Extract(Input{Header: http.Header{"X-Id": {"1"}, "X-Type": {"t"}}, Body: []byte("not json")})
	require.NoError(t, err)
	require.Equal(t, Ordering{}, res.Ordering)

	_, err = New(withOrdering(Field{}, Field{Path: "v"}))
	require.ErrorContains(t, err, "needs an ordering resource")
	_, err = New(withOrdering(Field{Path: "id", Header: "X"}, Field{Path: "v"}))
	require.ErrorContains(t, err, "header or a JSON path")
}

// Issue 18, item 7: a version that is a time further past the request's
// arrival than the source's tolerance does not order the event (taken as
// the resource's newest, it would silence every later event of it): the
// event is kept without a version (its resource alone, for fifo routes),
// and Result says why. A number is not a
// time; a time within the limit orders as before.
func TestFutureVersionDoesNotOrder(t *testing.T) {
	t.Parallel()
	cfg := Config{IdempotencyPaths: []string{"id"}, EventTypePaths: []string{"type"},
		OrderingResource: Field{Path: "rid"}, OrderingVersion: Field{Path: "v"}, VersionFutureLimit: 5 * time.Minute}
	x, err := New(cfg)
	require.NoError(t, err)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name, version, ignored string
		ordered                bool
	}{
		{"far future", `"9999-12-31T23:59:59Z"`, "future_version", false},
		{"past the tolerance", `"2026-12-01T12:06:00Z"`, "future_version", false},
		{"within the tolerance", `"2026-12-01T12:04:00Z"`, "", true},
		{"in the past", `"2026-11-30T12:00:00Z"`, "", true},
		{"a huge number is not a time", `1e1000`, "", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res, err := x.Extract(Input{Body: []byte(`{"id":"e","type":"t","rid":"r","v":` + tt.version + `}`), ReceivedAt: now})
			require.NoError(t, err)
			require.Equal(t, tt.ignored, res.OrderingIgnored)
			require.Equal(t, tt.ordered, res.Ordering.Version != "")
			require.Equal(t, "r", res.Ordering.Resource)
		})
	}
}
