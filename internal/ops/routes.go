package ops

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/webhook"
)

// RouteStore is what the routes listing and pausing need from Postgres
// (*store.DB).
type RouteStore interface {
	// RouteStatsList counts each route's deliveries pending, retrying
	// and dead, with the age of its oldest undelivered one.
	RouteStatsList(ctx context.Context) ([]store.RouteStats, error)
	// LaneHeads lists up to limit resources of a fifo route held back.
	LaneHeads(ctx context.Context, route string, limit int) ([]store.LaneHead, error)
	// LaneSkipAudited takes a dead event out of its resource's lane, so
	// the next one goes.
	LaneSkipAudited(ctx context.Context, route string, event uuid.UUID, e *store.AuditEntry) (*store.LaneHead, error)
	RouteStateList(ctx context.Context) ([]webhook.RouteState, error)
	RoutePauseAudited(ctx context.Context, route string, paused bool, by, reason string, e *store.AuditEntry) (bool, error)
	// ActivitySince returns the per-minute counts of the last since, with
	// Postgres' time now.
	ActivitySince(ctx context.Context, since time.Duration) ([]store.ActivityCount, time.Time, error)
}

// Broker answers questions about queues without changing them
// (internal/amqp's Inspector, adapted in the wiring).
type Broker interface {
	// QueueStats returns queue's ready messages and consumers.
	QueueStats(ctx context.Context, queue string) (ready, consumers int, err error)
}

// RouteList lists every configured route in the config's order with its
// counts and state from Postgres and the ready messages and consumers of
// its queue from the broker (a passive declare: it changes nothing), then
// the routes with deliveries in Postgres that are not in the config. A
// broker that cannot be asked leaves Ready and Consumers nil and says why
// in BrokerError; Postgres errors are returned.
func (s *Service) RouteList(ctx context.Context) (*RouteList, error) {
	stats, err := s.Store.RouteStatsList(ctx)
	if err != nil {
		return nil, err
	}
	counts := map[string]store.RouteStats{}
	for _, st := range stats {
		counts[st.Route] = st
	}
	states, err := s.Store.RouteStateList(ctx)
	if err != nil {
		return nil, err
	}
	byRoute := map[string]webhook.RouteState{}
	for _, st := range states {
		byRoute[st.Route] = st
	}
	out := &RouteList{Routes: []RouteSummary{}}
	var filtered *lastHourFiltered
	if s.Broker == nil {
		out.BrokerError = "no broker to ask"
	}
	configured := map[string]bool{}
	set := s.RoutesNow()
	visible, err := s.visibleRoutes(ctx, set.Names())
	if err != nil {
		return nil, err
	}
	for _, r := range set.All() {
		if !slices.Contains(visible, r.Name) {
			continue
		}
		configured[r.Name] = true
		st, n := byRoute[r.Name], counts[r.Name]
		rs := RouteSummary{
			Route: r.Name, Queue: s.QueueOf(r.Name), Bindings: r.Bindings, Team: cmp.Or(r.Team, store.PlatformTeam),
			Declared: r.Declared, Version: r.Version, SecretFingerprint: r.SecretFingerprint, Deleted: r.Retiring, Disposal: r.Disposal,
			Pending: n.Pending, Retrying: n.Retrying, Dead: n.Dead,
			Paused: st.Paused, PausedAt: st.PausedAt, PausedBy: st.PausedBy, PausedReason: st.PausedReason,
			Circuit: st.Circuit, ConsecutiveFailures: st.ConsecutiveFailures,
		}
		if rs.Bindings == nil {
			rs.Bindings = []string{}
		}
		if rs.Circuit == "" {
			rs.Circuit = webhook.CircuitClosed // no row yet: no dispatcher ran since the controls came
		}
		if st.Circuit != webhook.CircuitClosed && st.Circuit != "" {
			rs.CircuitOpenUntil = st.OpenedUntil
		}
		if n.Undelivered > 0 {
			age := n.OldestUndelivered.Seconds()
			rs.OldestUndeliveredSeconds = &age
		}
		if s.Broker != nil && out.BrokerError == "" {
			ready, consumers, err := s.Broker.QueueStats(ctx, rs.Queue)
			if err != nil {
				out.BrokerError = err.Error()
			} else {
				rs.Ready, rs.Consumers = &ready, &consumers
			}
		}
		routeState(&rs, st, r.RateLimit > 0)
		rs.Ordering = r.Ordering
		if r.Ordering == config.OrderingFIFO {
			if err := s.fillLanes(ctx, &rs, n); err != nil {
				return nil, err
			}
		}
		if r.Filtered() {
			rs.Filtered = true
			rejected, failed, err := s.filteredLastHour(ctx, &filtered)
			if err != nil {
				return nil, err
			}
			rej, fail := rejected[r.Name], failed[r.Name]
			rs.FilteredLastHour, rs.FilterErrorsLastHour = &rej, &fail
		}
		if r.Broken != nil {
			// This process's keys do not open it: the dispatchers, which
			// have the same keys (they refuse to start otherwise), do not
			// deliver it either.
			rs.State, rs.StateDetail = "unopened", r.Broken.Error()
		}
		out.Routes = append(out.Routes, rs)
	}
	var others []string
	for route := range counts {
		if !configured[route] {
			others = append(others, route)
		}
	}
	slices.Sort(others)
	for _, route := range others {
		n := counts[route]
		rs := RouteSummary{Route: route, Bindings: []string{}, Pending: n.Pending, Retrying: n.Retrying, Dead: n.Dead, Unserved: true}
		// A run-time route deleted and retired: its dead letters stay
		// (dead list, dead drop --all).
		switch row, err := s.Store.RouteGet(ctx, route); {
		case err == nil && row.Deleted():
			rs.Deleted, rs.Disposal, rs.Team, rs.Version = true, row.Disposal, row.Team, row.Version
		case err != nil && !errors.Is(err, store.ErrNotFound):
			return nil, err
		}
		if n.Undelivered > 0 {
			age := n.OldestUndelivered.Seconds()
			rs.OldestUndeliveredSeconds = &age
		}
		out.Routes = append(out.Routes, rs)
	}
	return out, nil
}

// lastHourFiltered is the last hour's filtered counts per route: events
// the filter rejected, events it could not judge.
type lastHourFiltered struct{ rejected, failed map[string]int64 }

// filteredLastHour reads the last hour's filtered counts once a listing
// (into *cache), for the routes that have a filter.
func (s *Service) filteredLastHour(ctx context.Context, cache **lastHourFiltered) (rejected, failed map[string]int64, err error) {
	if *cache == nil {
		counts, _, err := s.Store.ActivitySince(ctx, ActivityWindow)
		if err != nil {
			return nil, nil, err
		}
		c := &lastHourFiltered{rejected: map[string]int64{}, failed: map[string]int64{}}
		for _, n := range counts {
			if n.Kind != store.ActivityDelivery || n.Outcome != "filtered" {
				continue
			}
			if n.Reason == "error" {
				c.failed[n.Name] += n.N
			} else {
				c.rejected[n.Name] += n.N
			}
		}
		*cache = c
	}
	return (*cache).rejected, (*cache).failed, nil
}

// routeState sets rs's State, StateDetail and HeldUntil from the stored
// controls st and the queue's consumers (see RouteSummary.State);
// rateLimited says whether the route has a rate limit. Times are read
// against Postgres' clock, which wrote them.
func routeState(rs *RouteSummary, st webhook.RouteState, rateLimited bool) {
	left := func(t time.Time) string { return t.Sub(st.Now).Round(time.Second).String() }
	after := func(t *time.Time) bool { return t != nil && t.After(st.Now) }
	switch {
	case st.Paused:
		rs.State = "paused"
	case st.Circuit == webhook.CircuitOpen:
		rs.State, rs.StateDetail = "circuit-open", "probe due"
		if after(st.OpenedUntil) {
			rs.StateDetail = "probe in " + left(*st.OpenedUntil)
		}
	case st.Circuit == webhook.CircuitHalfOpen:
		rs.State = "circuit-half-open"
		if st.ProbeOwner != "" {
			rs.StateDetail = "probe by " + st.ProbeOwner
		}
	case after(st.SlowUntil):
		rs.State, rs.StateDetail, rs.HeldUntil = "held(retry-after)", left(*st.SlowUntil), st.SlowUntil
	case after(st.HeldUntil):
		// Only rate-limit holds are marked (a Retry-After is slow_until);
		// a route without a limit now had one when it was marked.
		rs.State, rs.StateDetail, rs.HeldUntil = "held", left(*st.HeldUntil), st.HeldUntil
		if rateLimited {
			rs.State = "held(rate-limit)"
		}
	case rs.Consumers != nil && *rs.Consumers == 0:
		rs.State = "no-consumers"
	default:
		rs.State = "active"
	}
}

// RoutePauseResult is what pausing or resuming a route did.
type RoutePauseResult struct {
	Route  string `json:"route"`
	Paused bool   `json:"paused"`
	// Changed is false when the route already was in that state.
	Changed bool `json:"changed"`
}

// MaxPauseReason bounds a pause's reason, in characters.
const MaxPauseReason = 500

// RoutePause pauses (or resumes) route: every dispatcher follows within
// 2s. The change and its audit row are one transaction. A route that is
// not in the config is ErrUnknownRoute.
// reason, for a pause, says why (shown with the route; at most
// MaxPauseReason characters).
func (s *Service) RoutePause(ctx context.Context, route string, paused bool, reason string) (*RoutePauseResult, error) {
	if err := s.requireRoute(ctx, route); err != nil {
		return nil, err
	}
	action := ActionRouteResume
	if paused {
		action = ActionRoutePause
	}
	reason = strings.TrimSpace(reason)
	if n := utf8.RuneCountInString(reason); n > MaxPauseReason || !utf8.ValidString(reason) {
		return nil, Invalid(fmt.Sprintf("the reason must be UTF-8 text of at most %d characters (%d given)", MaxPauseReason, n))
	}
	var args map[string]any
	if paused && reason != "" {
		args = map[string]any{"reason": reason}
	}
	e, err := entry(ctx, action, route, args)
	if err != nil {
		return nil, err
	}
	changed, err := s.Store.RoutePauseAudited(ctx, route, paused, e.Actor, reason, e)
	if err != nil {
		return nil, err
	}
	return &RoutePauseResult{Route: route, Paused: paused, Changed: changed}, nil
}

// fillLanes sets the waiting counts of a fifo route and the resources it
// holds back.
func (s *Service) fillLanes(ctx context.Context, rs *RouteSummary, n store.RouteStats) error {
	rs.Waiting, rs.WaitingResources = n.Waiting, n.WaitingResources
	if n.Waiting > 0 {
		w := n.LongestWait.Seconds()
		rs.LongestWaitSeconds = &w
	}
	if n.Waiting == 0 && n.Dead == 0 {
		return nil
	}
	heads, err := s.Store.LaneHeads(ctx, rs.Route, 10)
	if err != nil {
		return err
	}
	for _, h := range heads {
		rs.Held = append(rs.Held, laneHeadOf(h))
	}
	return nil
}

// LaneSkip takes the dead event out of its resource's lane on a fifo
// route (on_dead block), so that the resource's next event goes; its dead
// letter stays, for a requeue (delivered then out of order) or a drop.
// Audited. store.ErrNotFound when the event is not dead on a lane there.
func (s *Service) LaneSkip(ctx context.Context, route string, event uuid.UUID) (*LaneHead, error) {
	if err := s.requireRoute(ctx, route); err != nil {
		return nil, err
	}
	e, err := entry(ctx, ActionLaneSkip, route, map[string]any{"event_id": event.String()})
	if err != nil {
		return nil, err
	}
	h, err := s.Store.LaneSkipAudited(ctx, route, event, e)
	if err != nil {
		return nil, err
	}
	out := laneHeadOf(*h)
	return &out, nil
}
