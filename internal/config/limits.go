package config

import (
	"fmt"
	"time"
)

// dispatcherSpareConns are the dispatcher's connections beyond one per
// in-flight delivery: the readiness check, the metrics collector, and the
// route controls' LISTEN connection (held for good; internal/control).
const dispatcherSpareConns = 3

// dispatcherNeed is the smallest pool the dispatcher works with: every
// in-flight delivery holds a connection (its row lock) from lock to ack.
func (c *Config) dispatcherNeed() int {
	need := dispatcherSpareConns
	for _, r := range c.Routes {
		need += r.Concurrency
	}
	return need
}

// DispatcherMaxConns is the dispatcher's Postgres pool size:
// dispatcher.max_conns when set, else the sum of routes[].concurrency + 3.
// The receiver and the CLI use database.max_conns instead.
func (c *Config) DispatcherMaxConns() int32 {
	if c.Dispatcher.MaxConns > 0 {
		return c.Dispatcher.MaxConns
	}
	return int32(c.dispatcherNeed())
}

func checkPools(cfg *Config) []string {
	need := cfg.dispatcherNeed()
	if cfg.Dispatcher.MaxConns > 0 && int(cfg.Dispatcher.MaxConns) < need {
		return []string{fmt.Sprintf("dispatcher.max_conns: %d is too small: the dispatcher holds a connection per in-flight delivery; set at least %d (sum of routes[].concurrency + %d), or 0 to derive it",
			cfg.Dispatcher.MaxConns, need, dispatcherSpareConns)}
	}
	return nil
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
