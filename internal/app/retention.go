package app

import (
	"context"
	"fmt"
	"time"

	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/rs/zerolog"
)

// The relay's own purge (issue 38). Without it, a relay nobody ran
// `hookrelay purge` on kept every day: its day partitions grew without
// bound, and every statement that scans the deliveries (the reconciler,
// the route gauges) locks each of them.

// retentionActor is who the audit log says purged: the relay itself.
const retentionActor = "relay:retention"

// retentionFirstMax bounds the wait for a process's first purge: a relay
// restarted more often than retention.interval still purges.
const retentionFirstMax = 5 * time.Minute

// keepRetention runs the relay's own purge (purgeRetention) every
// retention.interval until ctx is done, the first one retention.interval
// (at most retentionFirstMax) after the start, and returns nil. Every
// receiver and dispatcher runs it; one process purges at a time. A failed
// purge is logged and tried again at the next tick. With retention.max_age
// 0s it says so once and returns.
func keepRetention(ctx context.Context, db *store.DB, cfg config.Retention, logger zerolog.Logger) error {
	logger = logger.With().Str("component", "retention").Logger()
	if cfg.MaxAge <= 0 {
		logger.Info().Msg("retention.max_age is 0s: the relay purges nothing by itself; run hookrelay purge")
		return nil
	}
	if cfg.Interval <= 0 {
		return fmt.Errorf("retention.interval: %s must be positive", config.FormatDuration(cfg.Interval))
	}
	t := time.NewTimer(min(cfg.Interval, retentionFirstMax))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if _, err := purgeRetention(ctx, db, cfg, time.Now(), logger); err != nil && ctx.Err() == nil {
			logger.Warn().Err(err).Dur("retry_in", cfg.Interval).Msg("retention purge failed")
		}
		t.Reset(cfg.Interval)
	}
}

// purgeRetention purges, as of now, what retention says has been kept long
// enough, unless another process purges at this moment, and says whether
// it ran. Its first pass deletes the events older than retention.max_age
// with nothing undelivered; a second, with retention.dead_max_age set,
// those older than it whose pairs are all delivered or dead. Neither takes
// a pair as abandoned: an event pending or retrying on any route is kept,
// whatever the route (a route gone from the config is an operator's call,
// through `hookrelay purge`). Each pass that changed something, or failed,
// is written to the audit log as a purge by relay:retention.
func purgeRetention(ctx context.Context, db *store.DB, cfg config.Retention, now time.Time, logger zerolog.Logger) (bool, error) {
	type pass struct {
		age         time.Duration
		includeDead bool
	}
	passes := []pass{{age: cfg.MaxAge}}
	if cfg.DeadMaxAge > 0 {
		passes = append(passes, pass{age: cfg.DeadMaxAge, includeDead: true})
	}
	return db.Alone(ctx, "retention", func(ctx context.Context) error {
		for _, p := range passes {
			res, err := db.Purge(ctx, store.PurgeConfig{
				OlderThan:    now.Add(-p.age),
				DedupeBefore: now.Add(-cfg.DedupeWindow),
				IncludeDead:  p.includeDead,
				ServedRoutes: nil, // every route: nothing is abandoned
			})
			changed := res.Events+res.Days+res.Keys+res.Deliveries+res.Versions > 0
			if changed || err != nil {
				e := &store.AuditEntry{Actor: retentionActor, Action: "purge",
					Args:    map[string]any{"older_than": config.FormatDuration(p.age), "include_dead": p.includeDead, "scheduled": true},
					Outcome: store.OutcomeOK,
					Result: map[string]any{"events": res.Events, "days": res.Days, "keys": res.Keys, "batches": res.Batches,
						"deliveries": res.Deliveries, "kept_undelivered": res.KeptUndelivered}}
				if err != nil {
					// The whole error goes to the log; the audit log, which
					// every viewer reads, says what kind it was.
					e.Outcome, e.Result["error"] = store.OutcomeFailed, "storage unavailable (the log of the process that ran it says why)"
				}
				lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				aerr := db.AuditInsert(lctx, e)
				cancel()
				if aerr != nil && err == nil {
					err = aerr
				}
			}
			if err != nil {
				return err
			}
			ev := logger.Debug()
			if changed {
				ev = logger.Info()
			}
			ev.Str("older_than", config.FormatDuration(p.age)).Bool("include_dead", p.includeDead).
				Int64("events", res.Events).Int64("days", res.Days).Int64("deliveries", res.Deliveries).Int64("keys", res.Keys).
				Int64("kept_undelivered", res.KeptUndelivered).Msg("retention purge")
		}
		return nil
	})
}
