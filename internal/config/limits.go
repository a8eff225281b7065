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
