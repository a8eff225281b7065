package webhook

import "time"

// Circuit states of a route's breaker, as stored in route_state.circuit.
const (
	CircuitClosed   = "closed"
	CircuitOpen     = "open"
	CircuitHalfOpen = "half_open"
)

// RouteState is a route's row of route_state (its pause, its circuit
// breaker, its holds), read together with the database's clock (Now), so
// callers compare its times without trusting their own clock. A nil time
// is one never set: not open, nobody holding the probe, never slowed or
// held.
type RouteState struct {
	Route               string
	Paused              bool
	PausedAt            *time.Time
	PausedBy            string
	PausedReason        string
	Circuit             string
	ConsecutiveFailures int
	OpenedUntil         *time.Time
	Cooldown            time.Duration
	ProbeOwner          string
	ProbeAt             *time.Time
	SlowUntil           *time.Time
	// HeldUntil is the end of the holds dispatchers announced (RouteHold):
	// deliveries in hand for the rate limit or a Retry-After.
	HeldUntil *time.Time
	UpdatedAt time.Time
	Now       time.Time
}
