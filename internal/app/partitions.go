package app

import (
	"context"
	"time"

	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/rs/zerolog"
)

// partitionsEvery is how often a process makes the coming days' partitions
// (store.EnsurePartitions keeps two days ahead, so a missed hour or a day of
// failures costs nothing).
const partitionsEvery = time.Hour

// keepPartitions makes the day partitions of events, deliveries and
// attempts ahead of time: at start and every partitionsEvery, until ctx is
// done. Every receiver and dispatcher runs it; they take turns in Postgres.
// A failure (a lock not granted in time) is logged and tried again at the
// next tick; an insert that finds no partition for its day makes them
// itself.
func keepPartitions(ctx context.Context, db *store.DB, logger zerolog.Logger) error {
	t := time.NewTicker(partitionsEvery)
	defer t.Stop()
	for {
		if err := db.EnsurePartitions(ctx, time.Now()); err != nil && ctx.Err() == nil {
			logger.Warn().Err(err).Dur("retry_in", partitionsEvery).Msg("could not create the coming days' partitions")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
