// Package ops is what an operator does to a running relay: find events and
// why they failed, replay them, read and requeue dead letters, purge old
// data. The hookrelay CLI and the admin HTTP API both call it, so they
// always agree. It reaches Postgres and RabbitMQ only through the Store and
// DeadLetters interfaces it declares.
package ops

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/netguard"
	"github.com/hookrelay/hookrelay/internal/routeset"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/webhook"
)

// Store is what the operations need from Postgres (*store.DB).
type Store interface {
	// EventShow returns one event with its deliveries and attempts, or
	// store.ErrNotFound.
	EventShow(ctx context.Context, id uuid.UUID) (*store.EventDetail, error)
	// EventList returns up to f.Limit events f selects, newest first.
	EventList(ctx context.Context, f store.EventFilter) ([]store.EventSummary, error)
	// EventsByKey returns up to limit events with the idempotency key.
	EventsByKey(ctx context.Context, key string, limit int) ([]store.EventSummary, error)
	// EventCountByFilter counts the events f selects, ignoring f.Limit,
	// up to upTo (0: all).
	EventCountByFilter(ctx context.Context, f store.EventFilter, upTo int64) (int64, error)
	// ReplayCandidateCount counts the events f selects after a cursor,
	// ignoring f.Limit.
	ReplayCandidateCount(ctx context.Context, f store.EventFilter, after store.ReplayCursor) (int64, error)
	// ReplayCandidatesPage returns up to limit events f selects after a
	// cursor, oldest first, with their delivery states.
	ReplayCandidatesPage(ctx context.Context, f store.EventFilter, after store.ReplayCursor, limit int) ([]store.ReplayCandidate, error)
	// ReplayEnqueue puts pairs back through the outbox in one transaction
	// and returns those it enqueued.
	ReplayEnqueueBy(ctx context.Context, by uuid.UUID, pairs []store.ReplayPair, includeDelivered, includeStale bool) ([]store.ReplayPair, error)
	// Purge removes what cfg says.
	Purge(ctx context.Context, cfg store.PurgeConfig) (store.PurgeResult, error)
	// PurgeCount counts what Purge would remove, changing nothing.
	PurgeCount(ctx context.Context, cfg store.PurgeConfig) (store.PurgeResult, error)
	// PairStates returns the state of each of pairs that has a delivery
	// row; the others are absent.
	PairStates(ctx context.Context, pairs []store.ReplayPair) (map[store.ReplayPair]webhook.DeliveryState, error)
	RetryStore
	VersionStore
	RouteStore
	AccessStore
	TeamStore
	RouteAdminStore
}

// DeadLetters reads and moves the messages of the routes' dead-letter
// queues (internal/amqp's, adapted in the wiring).
type DeadLetters interface {
	// Queue names route's dead-letter queue.
	Queue(route string) string
	// Scan reads route's dead-letter queue in batches of up to batch
	// messages, at most as many as it holds at the start, and gives each
	// to visit, which says which to remove (drop[i] for items[i]; nil
	// keeps all) and whether to stop. The rest go back to the queue. It
	// returns the queue's message count at the start. A queue that does
	// not exist (a route deleted before any dispatcher declared it) holds
	// no letters: every method reads and moves none.
	Scan(ctx context.Context, route string, batch int, visit func(items []webhook.DeadLetterInfo) (drop []bool, stop bool, err error)) (int, error)
	// Requeue moves up to limit messages (0: all there are now) back to
	// route's queue, each as a fresh attempt series, confirmed before the
	// dead letter is acked, and returns how many it moved. progress, when
	// set, is called after each message with the count moved and the
	// count it means to move.
	Requeue(ctx context.Context, route string, limit int, progress func(moved, total int)) (int, error)
	// RequeueEvents moves the messages of the given events back the same
	// way, reading the queue once; progress gets the count moved and read.
	RequeueEvents(ctx context.Context, route string, events map[string]bool, progress func(moved, read int)) (int, error)
}

// Service carries what the operations need.
type Service struct {
	Store       Store
	DeadLetters DeadLetters
	// RoutesNow returns the routes as they are now: the config's and
	// those made at run time.
	RoutesNow func() *routeset.Set
	// QueueOf names a route's queue.
	QueueOf func(route string) string
	// Config is the relay's config: run-time routes are checked by its
	// rules and get its defaults.
	Config *config.Config
	// Keyring seals the signing secrets of run-time routes.
	Keyring *routeset.Keyring
	// DedupeWindow is how long purge keeps dedupe keys.
	DedupeWindow time.Duration
	// NowFunc is the clock; time.Now when nil.
	NowFunc func() time.Time
	// Broker reads queue depths and consumers for the routes listing; nil
	// leaves them unknown.
	Broker Broker
	// Jobs runs long actions in the background (the API); nil in the CLI,
	// which runs them in the foreground.
	Jobs *JobRunner
	// Guard refuses a team's route to the relay's own side when it is
	// saved; nil means one that lets team_routes.allowed_networks through.
	Guard *netguard.Guard
	// Resolver looks up a team route's host name when the route is
	// saved; nil means net.DefaultResolver.
	Resolver *net.Resolver
}

func (s *Service) now() time.Time {
	if s.NowFunc != nil {
		return s.NowFunc()
	}
	return time.Now()
}

// ErrUnknownRoute is returned for a route that is not configured.
var ErrUnknownRoute = errors.New("unknown route")

// CheckRoute returns ErrUnknownRoute for a route that is not configured
// or that ctx's team does not see (the same answer: a team learns nothing
// of another's routes); "" (no route) passes.
func (s *Service) CheckRoute(ctx context.Context, route string) error {
	return s.checkRoute(ctx, route)
}

func (s *Service) checkRoute(ctx context.Context, route string) error {
	if route == "" {
		return nil
	}
	if s.served(route) || s.madeJustNow(ctx, route) {
		visible, err := s.visibleRoutes(ctx, []string{route})
		if err != nil || len(visible) == 1 {
			return err
		}
	}
	return fmt.Errorf("%w: route %q is neither in the config nor made at run time, so no dispatcher delivers it", ErrUnknownRoute, route)
}

// requireRoute is checkRoute for operations that need one route.
func (s *Service) requireRoute(ctx context.Context, route string) error {
	if route == "" {
		return errors.New("a route is required (--route)")
	}
	return s.checkRoute(ctx, route)
}

// madeJustNow reports whether route was made at run time and is not
// deleted, though this process's routes do not have it yet (they follow
// within a second or two).
func (s *Service) madeJustNow(ctx context.Context, route string) bool {
	row, err := s.Store.RouteGet(ctx, route)
	return err == nil && !row.Declared && !row.Deleted()
}

// served reports whether route is in the config.
func (s *Service) served(route string) bool {
	return s.RoutesNow().Get(route) != nil
}

// UnservedReason is what an operator is told about a pair on a route that
// is not in the config.
func UnservedReason(route string) string {
	return "route " + route + " is not configured: no dispatcher delivers it"
}

// EventShow returns one event with its deliveries and attempts, each
// delivery marked Unserved when its route is not in the config; or
// store.ErrNotFound.
func (s *Service) EventShow(ctx context.Context, id uuid.UUID) (*EventDetail, error) {
	ev, err := s.Store.EventShow(ctx, id)
	if err != nil {
		return nil, err
	}
	var link string
	if s.Config != nil {
		link = s.Config.Tracing.LinkTemplate
	}
	return eventDetail(ev, s.served, link), nil
}

// EventFind returns the event ref names: our id, else the sender's own id
// (its idempotency key) in any source, or in source when set. A sender's
// id two sources used asks for the source (ErrInvalidRequest, naming
// them); one nothing has is ErrNotFound, saying so.
func (s *Service) EventFind(ctx context.Context, ref, source string) (*EventDetail, error) {
	if id, err := uuid.Parse(ref); err == nil {
		ev, err := s.EventShow(ctx, id)
		if !errors.Is(err, store.ErrNotFound) {
			return ev, err
		}
		// A sender's ids may be UUIDs too: look for it as theirs.
	}
	list, err := s.Store.EventList(ctx, store.EventFilter{Key: ref, Source: source, Limit: maxFound})
	if err != nil {
		return nil, err
	}
	switch len(list) {
	case 0:
		where := ""
		if source != "" {
			where = " in source " + source
		}
		return nil, fmt.Errorf("%w: no event has our id or the sender's id %q%s", ErrNotFound, ref, where)
	case 1:
		return s.EventShow(ctx, list[0].ID)
	}
	var sources []string
	for _, e := range list {
		if !slices.Contains(sources, e.Source) {
			sources = append(sources, e.Source)
		}
	}
	slices.Sort(sources)
	return nil, Invalid(fmt.Sprintf("%q is the id of %d events, of sources %s: give --source (or show one by our id: events list --key %s)",
		ref, len(list), strings.Join(sources, ", "), ref))
}

// maxFound bounds the events a sender's id is looked up in.
const maxFound = 100

// DefaultListLimit is how many events or dead letters a listing shows
// unless told otherwise.
const DefaultListLimit = 100

// MaxCount is where an event listing stops counting the events its
// filter selects: past it, the total is MaxCount with TotalAtLeast set.
// Counting a million events to print the number would make every page
// of an unfiltered listing read the whole table.
const MaxCount = 1000

// EventList lists the events f selects, newest first, up to f.Limit
// (default 100), with how many match in all.
func (s *Service) EventList(ctx context.Context, f store.EventFilter) (*EventList, error) {
	if f.Limit <= 0 {
		f.Limit = DefaultListLimit
	}
	// One more than the page says whether a next page exists.
	f.Limit++
	rows, err := s.Store.EventList(ctx, f)
	f.Limit--
	if err != nil {
		return nil, err
	}
	more := len(rows) > f.Limit
	if more {
		rows = rows[:f.Limit]
	}
	items := convert(rows, func(e store.EventSummary) EventSummary { return eventSummary(e, s.served) })
	out := &EventList{Total: int64(len(items)), Shown: len(items), Items: items, Search: SearchInfoOf(f)}
	if more || !f.Before.ReceivedAt.IsZero() {
		// Only a page with more after it, or a later one, needs the count,
		// and only up to MaxCount: past that it says "at least".
		if out.Total, err = s.Store.EventCountByFilter(ctx, f, MaxCount+1); err != nil {
			return nil, err
		}
		if out.Total > MaxCount {
			out.Total, out.TotalAtLeast = MaxCount, true
		}
		out.Total = max(out.Total, int64(out.Shown))
	}
	if more {
		last := rows[len(rows)-1]
		out.NextCursor = store.ReplayCursor{ReceivedAt: last.ReceivedAt, ID: last.ID}.String()
	}
	return out, nil
}

// EventsByKey finds the events whose idempotency key (the sender's own
// event id) is key, in any source, newest first: the question "did the
// Stripe event evt_1Q… arrive?".
func (s *Service) EventsByKey(ctx context.Context, key string) (*EventList, error) {
	rows, err := s.Store.EventsByKey(ctx, key, DefaultListLimit)
	if err != nil {
		return nil, err
	}
	items := convert(rows, func(e store.EventSummary) EventSummary { return eventSummary(e, s.served) })
	if items == nil {
		items = []EventSummary{}
	}
	return &EventList{Total: int64(len(items)), Shown: len(items), Items: items}, nil
}

// PurgeAllowed refuses a purge to anyone but the platform team: it drops
// every team's days.
func PurgeAllowed(ctx context.Context) error { return requirePlatform(ctx, "purge") }

// PurgeRequest says what to purge.
type PurgeRequest struct {
	// OlderThan is the age past which events are purged.
	OlderThan time.Duration
	// Batch is how many events one transaction handles; default 1000.
	Batch int
	// IncludeDead purges events with dead pairs too (their dead letters
	// then park as event_missing on requeue).
	IncludeDead bool
	// DryRun counts what the purge would remove and changes nothing.
	DryRun bool
	// ProgressFunc, when set, is called after each batch with the counts
	// so far.
	ProgressFunc func(store.PurgeResult)
}

// Purge deletes what is older than req.OlderThan (see store.Purge),
// keeping dedupe keys for the retention window and every event with
// something undelivered. Pairs pending or retrying on a route that is
// neither in the config nor made at run time (and not retired) are
// abandoned: no dispatcher will ever deliver them. The run-time routes
// are read when each day or batch is decided, not here: one made while
// the purge runs is served. A dry run counts the same selection and
// changes nothing.
func (s *Service) Purge(ctx context.Context, req PurgeRequest) (store.PurgeResult, error) {
	if err := PurgeAllowed(ctx); err != nil {
		return store.PurgeResult{}, err
	}
	if req.OlderThan <= 0 {
		return store.PurgeResult{}, errors.New("--older-than must be positive")
	}
	now := s.now()
	cfg := store.PurgeConfig{
		OlderThan:    now.Add(-req.OlderThan),
		DedupeBefore: now.Add(-s.DedupeWindow),
		Batch:        req.Batch,
		IncludeDead:  req.IncludeDead,
		ServedRoutes: declaredRoutes(s.RoutesNow()), // never nil: nil would mean every route is served
		ProgressFunc: req.ProgressFunc,
	}
	if req.DryRun {
		return s.Store.PurgeCount(ctx, cfg)
	}
	args := map[string]any{"older_than": req.OlderThan.String(), "include_dead": req.IncludeDead}
	return audited(ctx, s, ActionPurge, "", args, func() (store.PurgeResult, error) { return s.Store.Purge(ctx, cfg) },
		func(r store.PurgeResult) map[string]any {
			return map[string]any{"events": r.Events, "days": r.Days, "keys": r.Keys, "batches": r.Batches}
		})
}

// declaredRoutes names the routes of the config in set, never nil (none
// is no route, where nil would be every route).
func declaredRoutes(set *routeset.Set) []string {
	out := []string{}
	for _, r := range set.All() {
		if r.Declared {
			out = append(out, r.Name)
		}
	}
	return out
}
