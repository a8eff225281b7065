package config

import (
	"fmt"
	"time"
)

// DispatcherMaxConns is the dispatcher's Postgres pool size:
// dispatcher.max_conns when set, else database.max_conns. A delivery holds
// no connection during its POST (it holds a lease in the row instead), only
// for its claim and its record, so the pool does not grow with route
// concurrency.
func (c *Config) DispatcherMaxConns() int32 {
	if c.Dispatcher.MaxConns > 0 {
		return c.Dispatcher.MaxConns
	}
	return c.Database.MaxConns
}

// ingestStoreTimeout is how long the receiver's store transaction may take
// (ingest.Config.StoreTimeout's default); the receiver's write timeout must
// leave room for it after the body is read.
const ingestStoreTimeout = 5 * time.Second

func checkTimeouts(cfg *Config) []string {
	var problems []string
	r := cfg.Receiver
	if r.ReadTimeout > 0 && r.WriteTimeout > 0 && r.WriteTimeout < r.ReadTimeout+ingestStoreTimeout {
		problems = append(problems, fmt.Sprintf("receiver.write_timeout: %s leaves no time to store and answer: set at least %s (receiver.read_timeout + %s for the store transaction)",
			r.WriteTimeout, r.ReadTimeout+ingestStoreTimeout, ingestStoreTimeout))
	}
	for _, l := range []struct {
		key         string
		read, write time.Duration
	}{
		{"dispatcher", cfg.Dispatcher.ReadTimeout, cfg.Dispatcher.WriteTimeout},
		{"admin", cfg.Admin.ReadTimeout, cfg.Admin.WriteTimeout},
	} {
		if l.read > 0 && l.write > 0 && l.write <= l.read {
			problems = append(problems, fmt.Sprintf("%s.write_timeout: %s must be longer than %s.read_timeout (%s), which it includes",
				l.key, l.write, l.key, l.read))
		}
	}
	return problems
}

// checkRetention: the relay's own purge refuses an age under an hour as
// `hookrelay purge` does without --force (a unit slip, 30m for 30d, would
// delete nearly everything every hour).
func checkRetention(cfg *Config) []string {
	var problems []string
	r := cfg.Retention
	if r.MaxAge > 0 && r.MaxAge < time.Hour {
		problems = append(problems, fmt.Sprintf("retention.max_age: %s is under an hour: set at least 1h (30d is thirty days), or 0s to turn the relay's purge off",
			FormatDuration(r.MaxAge)))
	}
	switch {
	case r.DeadMaxAge > 0 && r.MaxAge == 0:
		problems = append(problems, "retention.dead_max_age: is set, but retention.max_age is 0s (the relay's purge is off)")
	case r.DeadMaxAge > 0 && r.DeadMaxAge < r.MaxAge:
		problems = append(problems, fmt.Sprintf("retention.dead_max_age: %s must be at least retention.max_age (%s)",
			FormatDuration(r.DeadMaxAge), FormatDuration(r.MaxAge)))
	}
	if r.Interval > 0 && (r.Interval < time.Minute || r.Interval > 24*time.Hour) {
		problems = append(problems, fmt.Sprintf("retention.interval: %s must be from 1m to 24h", FormatDuration(r.Interval)))
	}
	return problems
}

// minReconcileMargin is the least reconcile.margin: the reconciler judges
// whether a retry tier could still hold a pair's copy by RabbitMQ's queue
// statistics, which are up to about 10 s old by default (a quorum queue
// reports every 5 s, the management plugin collects every 5 s).
const minReconcileMargin = 15 * time.Second

func checkReconcile(cfg *Config) []string {
	var problems []string
	r := cfg.Reconcile
	if r.Margin > 0 && r.Margin < minReconcileMargin {
		problems = append(problems, fmt.Sprintf("reconcile.margin: %s is shorter than %s, the age RabbitMQ's queue statistics can have plus a few seconds: a late copy could be taken for a lost one",
			r.Margin, minReconcileMargin))
	}
	if r.StrandAfter > 0 && r.Margin > 0 && r.StrandAfter < r.Margin {
		problems = append(problems, fmt.Sprintf("reconcile.strand_after: %s must be at least reconcile.margin (%s)", r.StrandAfter, r.Margin))
	}
	return problems
}
