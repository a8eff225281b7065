package config

import (
	"fmt"
	"time"
)

// rateTurnMax is the longest one consumer's message may wait for its turn
// under a route's rate limit. The dispatcher gives a message back after
// holding it 11 minutes in all (internal/control: Retry-After's 10m cap
// plus a minute), far from RabbitMQ's 30-minute consumer timeout; 10
// minutes leaves that minute for the rest.
const rateTurnMax = 10 * time.Minute

// checkRateLimits refuses a rate so slow for the route's concurrency that
// a consumer's message cannot get its turn within rateTurnMax: with every
// consumer waiting, the last waits concurrency/rate_limit. Such a message
// would be given back at the bound, taken again, and so on toward
// dispatcher.delivery_limit, never delivered. Consumers of other
// dispatchers share the rate too (docs/route-controls.md: keep rate_limit × 600 well above
// the consumers across all dispatchers); one dispatcher's are the least.
func checkRateLimits(cfg *Config) []string {
	var problems []string
	for i, r := range cfg.Routes {
		if p := rateProblem(r); p != "" {
			problems = append(problems, fmt.Sprintf("routes[%d].rate_limit: %s", i, p))
		}
	}
	return problems
}

// rateProblem is checkRateLimits for one route: "" when its rate is fine.
func rateProblem(r Route) string {
	if r.RateLimit <= 0 || r.Concurrency < 1 {
		return ""
	}
	turn := time.Duration(float64(r.Concurrency) / r.RateLimit * float64(time.Second))
	if turn <= rateTurnMax {
		return ""
	}
	least := float64(r.Concurrency) / rateTurnMax.Seconds()
	return fmt.Sprintf("%g/s with concurrency %d leaves a consumer's message waiting up to %s for its turn, past the %s a held message may wait: set at least %.3g, or lower concurrency",
		r.RateLimit, r.Concurrency, turn.Round(time.Second), rateTurnMax, least)
}
