package store

import (
	"bytes"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Statements that know their events' days: pruned when planned.
//
// The processes reuse one generic plan per statement (Config.GenericPlans:
// replanning each execution cost more than the statements). A generic plan
// cannot prune a partitioned table by a parameter when it is made, only
// when it runs, and Postgres (15, and every release to date) locks every
// partition the plan holds, with its indexes, before it runs: each
// execution of a claim took two locks per day partition, a record about
// twenty-five, and with a year of days a handful of concurrent claims
// filled the lock table (max_locks_per_transaction × max_connections
// slots, shared by every session) and failed with "out of shared memory".
//
// So the hot statements (a delivery's claim, create, record, release,
// restart and stale check, alone or grouped, and the outbox claim's read of
// its events) carry the range of event ids of their events' days in their
// text, as literals, next to the parameters that find the rows: the
// planner prunes every other day when it makes the plan, which then holds,
// and locks, only those days' partitions (or the legacy default one, for
// ids it holds). The range is a tautology for the ids (each id lies in its
// own day's range), so it changes no result. A statement's text, and
// therefore its prepared statement and plan, is one per day (or set of
// days) it meets: a new day prepares it again, once per connection; pgx
// keeps the most recent 512 per connection.

// dayMs is a UTC day in milliseconds.
const dayMs = 24 * 60 * 60 * 1000

// maxMs is one past the last millisecond a UUIDv7 can hold (48 bits).
const maxMs = 1 << 48

// idMs is the millisecond a UUIDv7 id begins with (for any other uuid,
// such as a legacy v4 one, its first 48 bits: a range that holds it all
// the same).
func idMs(id uuid.UUID) int64 {
	var ms int64
	for i := range 6 {
		ms = ms<<8 | int64(id[i])
	}
	return ms
}

// idRange is a range of event ids [lo, hi); hi is nil when it has no upper
// bound (a day past the last a UUIDv7 can hold).
type idRange struct {
	lo uuid.UUID
	hi *uuid.UUID
}

// dayRanges returns the ranges of event ids of the UTC days of ids, in
// order, days next to each other merged into one range.
func dayRanges(ids []uuid.UUID) []idRange {
	type day struct {
		start int64
		lo    uuid.UUID // the lowest id the day's range must hold
	}
	days := make([]day, 0, 2)
	for _, id := range ids {
		start := idMs(id) / dayMs * dayMs
		i := slices.IndexFunc(days, func(d day) bool { return d.start == start })
		if i < 0 {
			days = append(days, day{start: start, lo: uuid7Floor(time.UnixMilli(start))})
			i = len(days) - 1
		}
		// The partitions' bounds are UUIDv7 floors; an id of another
		// version may sort below its millisecond's floor.
		if bytes.Compare(id[:], days[i].lo[:]) < 0 {
			days[i].lo = id
		}
	}
	slices.SortFunc(days, func(a, b day) int { return int(a.start/dayMs - b.start/dayMs) })
	var out []idRange
	for i, d := range days {
		if i > 0 && days[i-1].start+dayMs == d.start {
			continue // merged into the range before
		}
		end := d.start + dayMs
		for j := i + 1; j < len(days) && days[j].start == end; j++ {
			end += dayMs
		}
		r := idRange{lo: d.lo}
		if end < maxMs {
			hi := uuid7Floor(time.UnixMilli(end))
			r.hi = &hi
		}
		out = append(out, r)
	}
	return out
}

// daySQL is a statement's text with markers "@day(col)": each becomes, at
// a call, the condition that col lies in the days of the call's event ids,
// written as literals (see above).
type daySQL struct {
	parts []string // text around the markers: len(cols)+1
	cols  []string
}

const dayMarker = "@day("

// newDaySQL parses text's markers; it panics on a marker without its
// closing parenthesis (a statement's text is a constant).
func newDaySQL(text string) daySQL {
	var s daySQL
	for {
		i := strings.Index(text, dayMarker)
		if i < 0 {
			s.parts = append(s.parts, text)
			return s
		}
		j := strings.IndexByte(text[i:], ')')
		if j < 0 {
			panic("store: " + dayMarker + " without its ')'")
		}
		s.parts = append(s.parts, text[:i])
		s.cols = append(s.cols, text[i+len(dayMarker):i+j])
		text = text[i+j+1:]
	}
}

// of returns the statement's text for a call about the events ids.
func (s daySQL) of(ids ...uuid.UUID) string {
	ranges := dayRanges(ids)
	var b strings.Builder
	b.Grow(len(s.parts[0]) * 2)
	for i, col := range s.cols {
		b.WriteString(s.parts[i])
		writeDayCondition(&b, col, ranges)
	}
	b.WriteString(s.parts[len(s.parts)-1])
	return b.String()
}

// writeDayCondition writes the condition that col lies in one of ranges
// (false for none: a call about no event).
func writeDayCondition(b *strings.Builder, col string, ranges []idRange) {
	if len(ranges) == 0 {
		b.WriteString("false")
		return
	}
	b.WriteByte('(')
	for i, r := range ranges {
		if i > 0 {
			b.WriteString(" OR ")
		}
		b.WriteByte('(')
		b.WriteString(col)
		b.WriteString(" >= '")
		b.WriteString(r.lo.String())
		b.WriteString("'::uuid")
		if r.hi != nil {
			b.WriteString(" AND ")
			b.WriteString(col)
			b.WriteString(" < '")
			b.WriteString(r.hi.String())
			b.WriteString("'::uuid")
		}
		b.WriteByte(')')
	}
	b.WriteByte(')')
}

// withDays is text (a statement with "@day(col)" markers) for a call
// about the events ids: newDaySQL(text).of(ids...).
func withDays(text string, ids ...uuid.UUID) string { return newDaySQL(text).of(ids...) }
