package ops_test

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/routeset"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/storecontract/opscontract"
	"github.com/hookrelay/hookrelay/internal/webhook"
)

// fakeEvent is a stored event and the state of each of its pairs.
type fakeEvent struct {
	id         uuid.UUID
	source     string
	eventType  string
	receivedAt time.Time
	purged     bool
	states     map[string]string // route -> state
}

// fakeStore is ops.Store over events in memory, with Postgres' rules for
// what a replay may enqueue. A "dispatcher" drains enqueued pairs to
// delivered when drain is set.
type fakeStore struct {
	mu     sync.Mutex
	events []*fakeEvent
	// drain delivers every pending pair when the replay looks at them.
	drain bool
	// err fails every call when set.
	err error
	// changed are pairs that ReplayEnqueue finds changed meanwhile.
	changed map[store.ReplayPair]bool
	// replayedBy is the replay that last enqueued each pair.
	replayedBy map[store.ReplayPair]uuid.UUID

	enqueues  [][]store.ReplayPair
	counts    int
	purged    []store.PurgeConfig
	counted   []store.PurgeConfig
	listLimit int
	// versions are resource versions by "route source resource".
	versions map[string]string
	// audits are the audit rows written.
	audits []store.AuditEntry

	// The tokens, jobs and teams are not faked: a test that reaches them
	// panics.
	ops.AccessStore
	ops.TeamStore
	ops.RouteAdminStore
}

func (s *fakeStore) AuditInsert(_ context.Context, e *store.AuditEntry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.audits = append(s.audits, *e)
	return nil
}

func (s *fakeStore) RouteStatsList(context.Context) ([]store.RouteStats, error) { return nil, s.err }
func (s *fakeStore) LaneHeads(context.Context, string, int) ([]store.LaneHead, error) {
	return nil, s.err
}
func (s *fakeStore) LaneSkipAudited(context.Context, string, uuid.UUID, *store.AuditEntry) (*store.LaneHead, error) {
	return nil, errors.New("not in the fake")
}

func (s *fakeStore) RouteStateList(context.Context) ([]webhook.RouteState, error) { return nil, s.err }
func (s *fakeStore) ActivitySince(context.Context, time.Duration) ([]store.ActivityCount, time.Time, error) {
	return nil, time.Now(), s.err
}

func (s *fakeStore) RoutePauseAudited(_ context.Context, _ string, _ bool, _, _ string, e *store.AuditEntry) (bool, error) {
	return true, s.AuditInsert(actorCtx(), e)
}

func (s *fakeStore) ResourceVersionResetAudited(ctx context.Context, route, source, resource string, e *store.AuditEntry) (*store.ResourceVersion, error) {
	v, err := s.ResourceVersionReset(ctx, route, source, resource)
	if err != nil {
		return nil, err
	}
	return v, s.AuditInsert(ctx, e)
}

func (s *fakeStore) add(source, eventType string, states map[string]string) *fakeEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	if states == nil {
		states = map[string]string{}
	}
	ev := &fakeEvent{
		id: uuid.Must(uuid.NewV7()), source: source, eventType: eventType, states: states,
		receivedAt: time.Date(2026, 11, 27, 14, 0, 0, 0, time.UTC).Add(time.Duration(len(s.events)) * time.Second),
	}
	s.events = append(s.events, ev)
	return ev
}

func (s *fakeStore) state(id uuid.UUID, route string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ev := range s.events {
		if ev.id == id {
			return ev.states[route]
		}
	}
	return "no such event"
}

func (s *fakeStore) calls() (enqueues [][]store.ReplayPair) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.enqueues)
}

// matches is the SQL filter of internal/store.
func matches(ev *fakeEvent, f store.EventFilter) bool {
	if f.Key != "" { // the fake's events carry no key
		return false
	}
	if (f.Source != "" && ev.source != f.Source) || (f.EventType != "" && ev.eventType != f.EventType) {
		return false
	}
	if (!f.Since.IsZero() && ev.receivedAt.Before(f.Since)) || (!f.Until.IsZero() && !ev.receivedAt.Before(f.Until)) {
		return false
	}
	if f.State == "" && f.Route == "" {
		return true
	}
	for route, state := range ev.states {
		if (f.State == "" || state == f.State) && (f.Route == "" || route == f.Route) {
			return true
		}
	}
	return false
}

func after(ev *fakeEvent, c store.ReplayCursor) bool {
	return c.ReceivedAt.IsZero() || byCursor(ev, c) > 0
}

// before says whether ev comes before the cursor c.
func before(ev *fakeEvent, c store.ReplayCursor) bool { return byCursor(ev, c) < 0 }

// byCursor orders ev against the cursor c as Postgres orders
// (received_at, id).
func byCursor(ev *fakeEvent, c store.ReplayCursor) int {
	return cmp.Or(ev.receivedAt.Compare(c.ReceivedAt), strings.Compare(ev.id.String(), c.ID.String()))
}

func (s *fakeStore) EventShow(_ context.Context, id uuid.UUID) (*store.EventDetail, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	for _, ev := range s.events {
		if ev.id != id {
			continue
		}
		d := &store.EventDetail{ID: ev.id, Source: ev.source, EventType: ev.eventType, ReceivedAt: ev.receivedAt, Purged: ev.purged, Deliveries: []store.DeliveryDetail{}}
		for _, route := range slices.Sorted(maps.Keys(ev.states)) {
			d.Deliveries = append(d.Deliveries, store.DeliveryDetail{
				DeliverySummary: store.DeliverySummary{Route: route, State: ev.states[route]}, Series: 1, AttemptRows: []store.AttemptRow{},
			})
		}
		return d, nil
	}
	return nil, store.ErrNotFound
}

func (s *fakeStore) EventList(_ context.Context, f store.EventFilter) ([]store.EventSummary, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	s.listLimit = f.Limit
	if f.Limit <= 0 {
		f.Limit = 100 // the store's default
	}
	out := []store.EventSummary{}
	// Newest first, as candidates' order reversed; a page ends before
	// the cursor.
	all := s.candidates(f, store.ReplayCursor{})
	slices.Reverse(all)
	for _, ev := range all {
		if len(out) == f.Limit {
			break
		}
		if !f.Before.ReceivedAt.IsZero() && !before(ev, f.Before) {
			continue
		}
		sum := store.EventSummary{ID: ev.id, Source: ev.source, EventType: ev.eventType, ReceivedAt: ev.receivedAt, Purged: ev.purged, Deliveries: []store.DeliverySummary{}}
		for _, route := range slices.Sorted(maps.Keys(ev.states)) {
			sum.Deliveries = append(sum.Deliveries, store.DeliverySummary{Route: route, State: ev.states[route]})
		}
		out = append(out, sum)
	}
	return out, nil
}

func (s *fakeStore) EventCountByFilter(_ context.Context, f store.EventFilter, upTo int64) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counts++
	var n int64
	for _, ev := range s.events {
		if matches(ev, f) && (upTo == 0 || n < upTo) {
			n++
		}
	}
	return n, nil
}

func (s *fakeStore) candidates(f store.EventFilter, c store.ReplayCursor) []*fakeEvent {
	var out []*fakeEvent
	for _, ev := range s.events {
		if matches(ev, f) && after(ev, c) {
			out = append(out, ev)
		}
	}
	slices.SortFunc(out, func(a, b *fakeEvent) int {
		return byCursor(a, store.ReplayCursor{ReceivedAt: b.receivedAt, ID: b.id})
	})
	return out
}

func (s *fakeStore) ReplayCandidateCount(_ context.Context, f store.EventFilter, c store.ReplayCursor) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return 0, s.err
	}
	return int64(len(s.candidates(f, c))), nil
}

func (s *fakeStore) ReplayCandidatesPage(_ context.Context, f store.EventFilter, c store.ReplayCursor, limit int) ([]store.ReplayCandidate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.ReplayCandidate
	for _, ev := range s.candidates(f, c) {
		if len(out) == limit {
			break
		}
		out = append(out, store.ReplayCandidate{
			EventID: ev.id, Source: ev.source, EventType: ev.eventType, ReceivedAt: ev.receivedAt, Purged: ev.purged,
			States: maps.Clone(ev.states),
		})
	}
	return out, nil
}

// ReplayEnqueueBy applies store.ReplayEnqueueBy's rules: a purged event is
// left alone, and only a dead pair, one never attempted, or (asked for) a
// delivered or stale one goes back to pending.
func (s *fakeStore) ReplayEnqueueBy(_ context.Context, by uuid.UUID, pairs []store.ReplayPair, includeDelivered, includeStale bool) ([]store.ReplayPair, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.enqueues = append(s.enqueues, slices.Clone(pairs))
	if s.replayedBy == nil {
		s.replayedBy = map[store.ReplayPair]uuid.UUID{}
	}
	var done []store.ReplayPair
	for _, p := range pairs {
		for _, ev := range s.events {
			if ev.id != p.EventID || ev.purged || s.changed[p] || (by != uuid.Nil && s.replayedBy[p] == by) {
				continue
			}
			switch st := ev.states[p.Route]; {
			case st == "", st == "dead", st == "delivered" && includeDelivered, st == "stale" && includeStale:
				ev.states[p.Route] = "pending"
				s.replayedBy[p] = by
				done = append(done, p)
			}
		}
	}
	return done, nil
}

func (s *fakeStore) Purge(_ context.Context, cfg store.PurgeConfig) (store.PurgeResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.purged = append(s.purged, cfg)
	return store.PurgeResult{Events: 1}, nil
}

func (s *fakeStore) DeliveryRetryNow(context.Context, store.RetrySelection, int64, int) ([]store.RetriedPair, error) {
	return nil, s.err
}

func (s *fakeStore) DeliveryRetryCount(context.Context, store.RetrySelection) (int64, error) {
	return 0, s.err
}

func (s *fakeStore) DeliveryRetryWaiting(context.Context, []store.RetriedPair) (int, error) {
	return 0, s.err
}

func (s *fakeStore) PurgeCount(_ context.Context, cfg store.PurgeConfig) (store.PurgeResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counted = append(s.counted, cfg)
	return store.PurgeResult{Events: 2}, nil
}

// fakeDeadLetters is ops.DeadLetters over queues in memory that
// remembers what it was asked.
type fakeDeadLetters struct {
	mu     sync.Mutex
	asked  []string
	queues map[string][]webhook.DeadLetterInfo // route -> letters
	// batches are the sizes of the batches Scan gave its visitor.
	batches []int
}

func (d *fakeDeadLetters) Queue(route string) string { return "q." + route }

func (d *fakeDeadLetters) Scan(_ context.Context, route string, batch int, visit func([]webhook.DeadLetterInfo) ([]bool, bool, error)) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.asked = append(d.asked, "scan "+route)
	queue := d.queues[route]
	var kept []webhook.DeadLetterInfo
	i := 0
	for i < len(queue) {
		items := slices.Clone(queue[i:min(i+batch, len(queue))])
		d.batches = append(d.batches, len(items))
		drop, stop, err := visit(slices.Clone(items))
		if err != nil {
			return len(queue), err
		}
		for j, it := range items {
			if drop == nil || !drop[j] {
				kept = append(kept, it)
			}
		}
		i += len(items)
		if stop {
			break
		}
	}
	d.queues[route] = append(kept, queue[i:]...)
	return len(queue), nil
}

func (d *fakeDeadLetters) Requeue(_ context.Context, route string, limit int, progress func(moved, total int)) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.asked = append(d.asked, "requeue "+route)
	if progress != nil {
		progress(3, 3)
	}
	return 3, nil
}

func (d *fakeDeadLetters) RequeueEvents(_ context.Context, route string, events map[string]bool, progress func(moved, read int)) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.asked = append(d.asked, "requeue-events "+route)
	var kept []webhook.DeadLetterInfo
	moved := 0
	for _, it := range d.queues[route] {
		if events[it.EventID] {
			moved++
			continue
		}
		kept = append(kept, it)
	}
	d.queues[route] = kept
	if progress != nil {
		progress(moved, moved+len(kept))
	}
	return moved, nil
}

// newService serves routes billing (acme.invoice.*) and crm
// (acme.customer.*) over a fake store and fake dead letters.
func newService(t *testing.T) (*ops.Service, *fakeStore, *fakeDeadLetters) {
	t.Helper()
	st, dl := &fakeStore{}, &fakeDeadLetters{queues: map[string][]webhook.DeadLetterInfo{}}
	return &ops.Service{
		Store:       st,
		DeadLetters: dl,
		RoutesNow: func() *routeset.Set {
			return routeset.Of(config.Route{Name: "billing", Bindings: []string{"acme.invoice.*"}}, config.Route{Name: "crm", Bindings: []string{"acme.customer.*"}})
		},
		QueueOf:      func(route string) string { return "hookrelay.route." + route },
		DedupeWindow: 30 * 24 * time.Hour,
		NowFunc:      func() time.Time { return time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC) },
	}, st, dl
}

func (s *fakeStore) ResourceVersionGet(_ context.Context, route, source, resource string) (*store.ResourceVersion, error) {
	return s.version(route, source, resource, false)
}

func (s *fakeStore) ResourceVersionReset(_ context.Context, route, source, resource string) (*store.ResourceVersion, error) {
	return s.version(route, source, resource, true)
}

func (s *fakeStore) version(route, source, resource string, reset bool) (*store.ResourceVersion, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	k := route + " " + source + " " + resource
	v, ok := s.versions[k]
	if !ok {
		return nil, store.ErrNotFound
	}
	if reset {
		delete(s.versions, k)
	}
	return &store.ResourceVersion{Route: route, Source: source, Resource: resource, Version: v}, nil
}

func (s *fakeStore) PairStates(_ context.Context, pairs []store.ReplayPair) (map[store.ReplayPair]webhook.DeliveryState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	out := map[store.ReplayPair]webhook.DeliveryState{}
	for _, p := range pairs {
		for _, ev := range s.events {
			if s.drain && ev.id == p.EventID && ev.states[p.Route] == "pending" {
				ev.states[p.Route] = "delivered"
			}
			if st, ok := ev.states[p.Route]; ok && ev.id == p.EventID && !ev.purged {
				out[p] = webhook.DeliveryState(st)
			}
		}
	}
	return out, nil
}

// actorCtx names the actor every change needs.
func actorCtx() context.Context {
	return ops.WithTeam(ops.WithActor(context.Background(), "test"), ops.PlatformTeam)
}

func (s *fakeStore) EventsByKey(_ context.Context, key string, limit int) ([]store.EventSummary, error) {
	return nil, s.err
}

// RouteGet: the fake relay has no route made at run time.
func (s *fakeStore) RouteGet(context.Context, string) (store.RouteRow, error) {
	return store.RouteRow{}, store.ErrNotFound
}

// The fake keeps the events part of ops.Store's contract, as the Postgres
// store does (internal/store's TestStoreKeepsTheEventsContract).
func TestFakeStoreKeepsTheEventsContract(t *testing.T) {
	t.Parallel()
	opscontract.Events(t, func(*testing.T) (opscontract.EventsStore, opscontract.Add) {
		s := &fakeStore{}
		return s, func(at time.Time, source, eventType string, states map[string]webhook.DeliveryState) uuid.UUID {
			ev := s.add(source, eventType, nil)
			s.mu.Lock()
			defer s.mu.Unlock()
			ev.receivedAt = at
			for route, st := range states {
				ev.states[route] = string(st)
			}
			return ev.id
		}
	})
}
