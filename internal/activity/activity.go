// Package activity counts, per minute, what every receiver and dispatcher
// did (requests per source by outcome and reason, deliveries per route by
// outcome) and adds the counts to Postgres every few seconds, one
// statement a flush, so the console can show the last hour of all
// processes together. Counting is a map update under a mutex; nothing on
// the request or delivery path waits for Postgres.
package activity

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/rs/zerolog"
)

// Store keeps the counts (*store.DB).
type Store interface {
	ActivityAdd(ctx context.Context, counts []store.ActivityCount, keep time.Duration) error
}

// The kinds of count: a source's requests, a route's deliveries.
const (
	Ingest   = store.ActivityIngest
	Delivery = store.ActivityDelivery
)

// Keep is how long the minutes' rows are kept.
const Keep = 7 * 24 * time.Hour

// maxAge is how long counts that cannot be stored (Postgres down) are
// held before they are dropped: the overview shows the last hour.
const maxAge = time.Hour

type key struct {
	minute                      time.Time
	kind, name, outcome, reason string
}

// Counter counts in memory until Run flushes. A nil *Counter counts
// nothing.
type Counter struct {
	store  Store
	every  time.Duration
	logger zerolog.Logger
	now    func() time.Time

	mu     sync.Mutex
	counts map[key]int64
}

// New returns a counter that Run flushes to s every interval.
func New(s Store, every time.Duration, logger zerolog.Logger) *Counter {
	return &Counter{store: s, every: every, logger: logger, now: time.Now, counts: map[key]int64{}}
}

// Add counts one of kind (Ingest or Delivery) for
// name with outcome and reason, in the current minute.
func (c *Counter) Add(kind, name, outcome, reason string) {
	if c == nil {
		return
	}
	k := key{minute: c.now().UTC().Truncate(time.Minute), kind: kind, name: name, outcome: outcome, reason: reason}
	c.mu.Lock()
	c.counts[k]++
	c.mu.Unlock()
}

// Run flushes every interval until ctx ends, then once more.
func (c *Counter) Run(ctx context.Context) {
	t := time.NewTicker(c.every)
	defer t.Stop()
	lastTrim := time.Time{}
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := c.Flush(fctx, 0); err != nil {
				c.logger.Warn().Err(err).Msg("activity: the last counts were not stored")
			}
			return
		case <-t.C:
			keep := time.Duration(0)
			if c.now().Sub(lastTrim) > time.Hour {
				keep = Keep
			}
			if err := c.Flush(ctx, keep); err != nil {
				c.logger.Warn().Err(err).Msg("activity: counts kept for the next flush")
				continue
			}
			if keep > 0 {
				lastTrim = c.now()
			}
		}
	}
}

// Flush adds the counts to the store and forgets them; counts that could
// not be stored are kept for the next flush, up to an hour old. keep, when
// positive, also deletes rows older than that.
func (c *Counter) Flush(ctx context.Context, keep time.Duration) error {
	c.mu.Lock()
	taken := c.counts
	c.counts = map[key]int64{}
	c.mu.Unlock()
	rows := make([]store.ActivityCount, 0, len(taken))
	for k, n := range taken {
		rows = append(rows, store.ActivityCount{Minute: k.minute, Kind: k.kind, Name: k.name, Outcome: k.outcome, Reason: k.reason, N: n})
	}
	if len(rows) == 0 && keep == 0 {
		return nil
	}
	// One order for every process: two flushes of the same rows lock them
	// in the same order and never deadlock.
	slices.SortFunc(rows, func(a, b store.ActivityCount) int {
		return cmp.Or(a.Minute.Compare(b.Minute), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name),
			cmp.Compare(a.Outcome, b.Outcome), cmp.Compare(a.Reason, b.Reason))
	})
	err := c.store.ActivityAdd(ctx, rows, keep)
	if err == nil {
		return nil
	}
	oldest := c.now().Add(-maxAge)
	c.mu.Lock()
	for k, n := range taken {
		if k.minute.After(oldest) {
			c.counts[k] += n
		}
	}
	c.mu.Unlock()
	return err
}
