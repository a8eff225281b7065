package store

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// idAt is a UUIDv7-like id of millisecond ms whose other bytes are rest.
func idAt(ms int64, rest byte) uuid.UUID {
	var u uuid.UUID
	for i := range u {
		u[i] = rest
	}
	for i := range 6 {
		u[i] = byte(ms >> (40 - 8*i))
	}
	return u
}

// The days of a call's ids, as a statement's text names them: each id
// lies in the range of its day (a tautology for the rows it finds), days
// next to each other are one range, and an id of another version that
// sorts below its day's first UUIDv7 is still inside.
func TestDayRanges(t *testing.T) {
	t.Parallel()
	d0 := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	ms := func(t time.Time) int64 { return t.UnixMilli() }
	noon := idAt(ms(d0.Add(12*time.Hour)), 0x77)
	nextDay := idAt(ms(d0.Add(30*time.Hour)), 0x77)
	farDay := idAt(ms(d0.AddDate(0, 0, -300)), 0x77)
	v4AtMidnight := idAt(ms(d0), 0x40) // sorts below uuid7Floor(d0)

	in := func(id uuid.UUID, rs []idRange) bool {
		for _, r := range rs {
			if strings.Compare(id.String(), r.lo.String()) >= 0 && (r.hi == nil || strings.Compare(id.String(), r.hi.String()) < 0) {
				return true
			}
		}
		return false
	}
	for name, ids := range map[string][]uuid.UUID{
		"one":             {noon},
		"adjacent":        {nextDay, noon},
		"apart":           {noon, farDay},
		"v4 at midnight":  {v4AtMidnight},
		"all, duplicated": {noon, farDay, nextDay, noon, v4AtMidnight},
	} {
		rs := dayRanges(ids)
		for _, id := range ids {
			require.True(t, in(id, rs), "%s: %s not in %v", name, id, rs)
		}
	}
	rs := dayRanges([]uuid.UUID{nextDay, noon})
	require.Len(t, rs, 1, "two days next to each other: one range")
	require.Equal(t, uuid7Floor(d0), rs[0].lo)
	require.Equal(t, uuid7Floor(d0.AddDate(0, 0, 2)), *rs[0].hi)
	require.Len(t, dayRanges([]uuid.UUID{noon, farDay}), 2)
	require.Nil(t, dayRanges([]uuid.UUID{idAt(maxMs-1, 0xff)})[0].hi, "the last day a UUIDv7 holds has no end")

	sql := newDaySQL(`SELECT 1 FROM deliveries d WHERE d.event_id = $1 AND @day(d.event_id) AND @day(x)`).of(noon)
	require.Equal(t, `SELECT 1 FROM deliveries d WHERE d.event_id = $1 AND ((d.event_id >= '`+uuid7Floor(d0).String()+
		`'::uuid AND d.event_id < '`+uuid7Floor(d0.AddDate(0, 0, 1)).String()+`'::uuid)) AND ((x >= '`+uuid7Floor(d0).String()+
		`'::uuid AND x < '`+uuid7Floor(d0.AddDate(0, 0, 1)).String()+`'::uuid))`, sql)
	require.Contains(t, newDaySQL(`a @day(c) b`).of(), "a false b", "no event: no row")
	require.Panics(t, func() { newDaySQL(`@day(c`) })
}
