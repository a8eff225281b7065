package store

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
)

// Search selects events by what their bodies say. The operator service
// makes it of a --where expression (internal/rule): Contains is what the
// index can serve, Keep the whole expression, run on each candidate.
type Search struct {
	// Text is the expression as written.
	Text string
	// Contains is a JSON document that the body of every event the
	// expression takes contains (jsonb @>): the GIN index of migration 32
	// finds the candidates. Nil when the expression implies none: the
	// window is then read in order, every body judged.
	Contains []byte
	// Keep judges one candidate; nil takes every candidate.
	Keep func(ctx context.Context, c SearchCandidate) bool
	// DefaultWindow says the caller gave no window, so the filter's Since
	// is the default one (ops.DefaultSearchWindow): the answer says so.
	DefaultWindow bool
}

// SearchCandidate is an event as a search's Keep judges it.
type SearchCandidate struct {
	Source     string
	EventType  string
	ReceivedAt time.Time
	Headers    http.Header
	Body       []byte
}

// ErrSearchWindow refuses a search over the body without a window: the
// caller sets Since (ops defaults it to the last 24 hours).
var ErrSearchWindow = errors.New("a search over the body needs a window (since)")

// searchChunk is how many candidates one round reads: a page of
// results usually comes of one round, and a search that judges most
// candidates false moves through the window in steps this size.
const searchChunk = 500

// searchIDSlack widens a window's id range by a day each way: an event's
// id (UUIDv7, its day partition) is made when it is received, so a
// window's events are within it, and the days outside are not read.
const searchIDSlack = 24 * time.Hour

// searchKeys returns the keys of up to want events f selects, its Search
// included, after cursor (newest first, or oldest first), and whether the
// window is read to its end. f.Search must be set.
func (db *DB) searchKeys(ctx context.Context, f EventFilter, after ReplayCursor, newestFirst bool, want int) ([]ReplayCursor, bool, error) {
	s := f.Search
	if f.Since.IsZero() {
		return nil, false, ErrSearchWindow
	}
	if f.Key != "" {
		return nil, false, errors.New("a search over the body does not take a key filter")
	}
	hi := f.Until
	if hi.IsZero() {
		hi = time.Now().Add(time.Hour)
	}
	var keys []ReplayCursor
	for len(keys) < want {
		cands, err := db.searchCandidates(ctx, f, hi, after, newestFirst)
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, false, fmt.Errorf("the search read its window for longer than it may without finishing: "+
				"narrow the window (since, until), or compare a body field with a constant, which the index finds: %w", err)
		}
		if err != nil {
			return nil, false, err
		}
		for _, c := range cands {
			if c.selected && (s.Keep == nil || s.Keep(ctx, c.SearchCandidate)) {
				keys = append(keys, c.key)
				if len(keys) == want {
					return keys, false, nil
				}
			}
		}
		if len(cands) < searchChunk {
			return keys, true, nil
		}
		after = cands[len(cands)-1].key
		if err := ctx.Err(); err != nil {
			return nil, false, err
		}
	}
	return keys, false, nil
}

type searchCandidate struct {
	SearchCandidate
	key ReplayCursor
	// selected is false for an event the index found that the filter's
	// other fields do not select: it moves the cursor only.
	selected bool
}

// searchCandidates reads the next searchChunk events of f's window after
// cursor that its other fields select and whose bodies contain
// f.Search.Contains (when set), in order. A candidate that the caller's
// team does not see is not read, nor counted.
func (db *DB) searchCandidates(ctx context.Context, f EventFilter, hi time.Time, after ReplayCursor, newestFirst bool) ([]searchCandidate, error) {
	dir, cmp := "ASC", ">"
	if newestFirst {
		dir, cmp = "DESC", "<"
	}
	withBody := f.Search.Keep != nil
	cols := `e.id, e.received_at, e.source, e.event_type`
	if withBody {
		cols += `, e.headers, e.body`
	}
	args := append(filterArgs(f), cursorTime(after), pgUUID(after.ID))
	var q string
	if f.Search.Contains != nil {
		// The index finds the ids (hookrelay_event_ids_by_body); the
		// events are then read under the caller's policy, with the
		// filter's other fields.
		args = append(args, string(f.Search.Contains), f.Since, hi,
			pgUUID(uuid7Floor(f.Since.Add(-searchIDSlack))), pgUUID(uuid7Floor(hi.Add(searchIDSlack))), newestFirst, searchChunk)
		q = `
			WITH found AS MATERIALIZED (
				SELECT b.id, b.received_at, row_number() OVER () AS n
				FROM hookrelay_event_ids_by_body($9::jsonb, $10, $11, $12::uuid, $13::uuid, $7, $8::uuid, $14, $15) b
			)
			SELECT ` + cols + `, f.id, f.received_at
			FROM found f LEFT JOIN events e ON e.id = f.id AND ` + eventFilterSQL + `
			ORDER BY f.n`
	} else {
		args = append(args, searchChunk)
		q = `
			SELECT ` + cols + `, e.id, e.received_at FROM events e
			WHERE ` + eventFilterSQL + `
			  AND ($7::timestamptz IS NULL OR (e.received_at, e.id) ` + cmp + ` ($7, $8::uuid))
			ORDER BY e.received_at ` + dir + `, e.id ` + dir + `
			LIMIT $9`
	}
	rows, err := db.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("searching events: %w", err)
	}
	defer rows.Close()
	var out []searchCandidate
	for rows.Next() {
		var (
			id       *uuid.UUID
			at       *time.Time
			src, typ *string
			headers  http.Header
			body     []byte
			c        searchCandidate
		)
		dest := []any{&id, &at, &src, &typ}
		if withBody {
			dest = append(dest, &headers, &body)
		}
		dest = append(dest, &c.key.ID, &c.key.ReceivedAt)
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("searching events: %w", err)
		}
		if id != nil {
			c.selected = true
			c.Source, c.EventType, c.ReceivedAt, c.Headers, c.Body = *src, *typ, *at, headers, body
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("searching events: %w", err)
	}
	return out, nil
}

// eventsByKeys lists the events of keys as EventSummary rows, in the
// order of keys (newest first, as listed).
func (db *DB) eventsByKeys(ctx context.Context, keys []ReplayCursor) ([]EventSummary, error) {
	ids := make([]uuid.UUID, len(keys))
	for i, k := range keys {
		ids[i] = k.ID
	}
	rows, err := db.pool.Query(ctx, eventSummarySQL+`
		WHERE e.id = ANY($1)
		ORDER BY e.received_at DESC, e.id DESC`, ids)
	if err != nil {
		return nil, fmt.Errorf("listing events: %w", err)
	}
	return collectSummaries(rows)
}

// searchCount counts the events f selects, its Search included, up to
// upTo (0: all of them).
func (db *DB) searchCount(ctx context.Context, f EventFilter, after ReplayCursor, upTo int64) (int64, error) {
	var n int64
	for {
		want := searchChunk * 4
		if upTo > 0 {
			want = int(min(int64(want), upTo-n))
		}
		keys, done, err := db.searchKeys(ctx, f, after, false, want)
		if err != nil {
			return 0, err
		}
		n += int64(len(keys))
		if done || len(keys) == 0 || (upTo > 0 && n >= upTo) {
			return n, nil
		}
		after = keys[len(keys)-1]
	}
}
