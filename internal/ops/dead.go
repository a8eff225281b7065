package ops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/webhook"
)

// StateMissing is the pair state of a dead letter with no delivery in
// Postgres: its event was purged (or the letter names no event of ours).
const StateMissing = "missing"

// DeadLetterStates are the pair states a dead letter can show.
var DeadLetterStates = []string{
	string(webhook.StatePending), string(webhook.StateRetrying), string(webhook.StateDelivered),
	string(webhook.StateDead), string(webhook.StateStale), StateMissing,
}

// deadScanBatch is how many dead letters a scan reads before it looks up
// their pairs in Postgres.
const deadScanBatch = 100

// deadLetterRoute checks route for an operation on its dead letters: a
// route there is (checkRoute), or a deleted one the caller sees, whose
// dead-letter queue stays for the operator once its queue went. deleted
// reports a deleted route, retiring or retired: its letters are read and
// dropped, never put back in a queue that is going or gone.
func (s *Service) deadLetterRoute(ctx context.Context, route string) (deleted bool, err error) {
	err = s.requireRoute(ctx, route)
	if err != nil && !errors.Is(err, ErrUnknownRoute) {
		return false, err
	}
	row, gerr := s.Store.RouteGet(ctx, route)
	switch {
	case errors.Is(gerr, store.ErrNotFound):
		return false, err
	case gerr != nil:
		return false, gerr
	case row.Deleted():
		return true, nil
	}
	return false, err
}

// CheckDeadLetterRoute is the check of a requeue before it starts (the
// API and the console start it as a job): the route's dead letters can
// go back to its queue. A deleted route has none to go back to: refused
// as ErrConflict, saying what to do instead.
func (s *Service) CheckDeadLetterRoute(ctx context.Context, route string) error {
	deleted, err := s.deadLetterRoute(ctx, route)
	if err == nil && deleted {
		return deletedRequeue(route)
	}
	return err
}

// deletedRequeue is the refusal of a requeue of a deleted route's letters.
func deletedRequeue(route string) error {
	return fmt.Errorf("%w: route %s was deleted: its dead letters have no queue to go back to; "+
		"replay their events to the routes that want them now (replay --event ID), then drop the letters (dead drop --route %s --all)",
		ErrConflict, route, route)
}

// DeadListRequest says which dead letters to list.
type DeadListRequest struct {
	Route string
	// Limit is the most letters to show; DefaultListLimit when 0.
	Limit int
	// State shows only letters whose pair is in that state (one of
	// DeadLetterStates); "" shows all.
	State string
}

// DeadList reads route's dead-letter queue without consuming it (every
// message goes back) and lists up to req.Limit letters, each with the
// state Postgres holds for its pair: a letter whose pair is delivered (by
// a replay, say) is stale and can be dropped. With req.State it reads on
// past letters of other states, up to the queue's count at the start.
func (s *Service) DeadList(ctx context.Context, req DeadListRequest) (*DeadLetterList, error) {
	deleted, err := s.deadLetterRoute(ctx, req.Route)
	if err != nil {
		return nil, err
	}
	if req.State != "" && !slices.Contains(DeadLetterStates, req.State) {
		return nil, fmt.Errorf("%w: --state must be one of %s", ErrInvalidRequest, strings.Join(DeadLetterStates, ", "))
	}
	if req.Limit <= 0 {
		req.Limit = DefaultListLimit
	}
	batch := deadScanBatch
	if req.State == "" {
		batch = req.Limit // read no more than are shown
	}
	out := &DeadLetterList{Queue: s.DeadLetters.Queue(req.Route), State: req.State, RouteDeleted: deleted, Items: []DeadLetter{}}
	total, err := s.DeadLetters.Scan(ctx, req.Route, batch, func(items []webhook.DeadLetterInfo) ([]bool, bool, error) {
		out.Read += len(items)
		if err := s.fillStates(ctx, req.Route, items); err != nil {
			return nil, false, err
		}
		for _, it := range items {
			if len(out.Items) < req.Limit && (req.State == "" || it.State == req.State) {
				out.Items = append(out.Items, DeadLetter(it))
			}
		}
		return nil, len(out.Items) >= req.Limit, nil
	})
	if err != nil {
		return nil, err
	}
	out.Total, out.Shown = total, len(out.Items)
	return out, nil
}

// fillStates sets the State of each of route's items from Postgres.
func (s *Service) fillStates(ctx context.Context, route string, items []webhook.DeadLetterInfo) error {
	pairs := make([]store.ReplayPair, 0, len(items))
	for _, it := range items {
		if id, err := uuid.Parse(it.EventID); err == nil {
			pairs = append(pairs, store.ReplayPair{EventID: id, Route: route})
		}
	}
	states, err := s.Store.PairStates(ctx, pairs)
	if err != nil {
		return err
	}
	for i := range items {
		items[i].State = StateMissing
		if id, err := uuid.Parse(items[i].EventID); err == nil {
			if st, ok := states[store.ReplayPair{EventID: id, Route: route}]; ok {
				items[i].State = string(st)
			}
		}
	}
	return nil
}

// DeadDropResult is what a drop did, or would do (DryRun).
type DeadDropResult struct {
	Queue string `json:"queue"`
	// Total is the queue's message count when the drop started; Read is
	// how many of them it read.
	Total   int  `json:"total"`
	Read    int  `json:"read"`
	Dropped int  `json:"dropped"`
	DryRun  bool `json:"dry_run"`
}

// DeadDropDelivered removes from route's dead-letter queue the letters
// whose pair Postgres holds as delivered: a replay or a requeue delivered
// them since, so the letter only misleads. Every other letter goes back.
// A dry run counts them and removes nothing. Delivered is final for a
// pair's series (a replay that sends it again starts from the outbox, not
// from the letter), so a letter dropped here is never needed.
func (s *Service) DeadDropDelivered(ctx context.Context, route string, dryRun bool) (*DeadDropResult, error) {
	if _, err := s.deadLetterRoute(ctx, route); err != nil {
		return nil, err
	}
	return s.deadDropAudited(ctx, route, false, dryRun)
}

// DeadDropAll removes every letter of a deleted route's dead-letter
// queue: the route has no queue they could go back to, and their pairs
// stay dead in Postgres (events show, events list --state dead), their
// events replayable. A route there is keeps its letters (requeue them,
// or drop the delivered ones): refused as ErrConflict. A dry run counts
// them and removes nothing.
func (s *Service) DeadDropAll(ctx context.Context, route string, dryRun bool) (*DeadDropResult, error) {
	deleted, err := s.deadLetterRoute(ctx, route)
	if err != nil {
		return nil, err
	}
	if !deleted {
		return nil, fmt.Errorf("%w: route %s is not deleted: requeue its dead letters, or drop the delivered ones; "+
			"dropping all is for a deleted route's", ErrConflict, route)
	}
	return s.deadDropAudited(ctx, route, true, dryRun)
}

func (s *Service) deadDropAudited(ctx context.Context, route string, all, dryRun bool) (*DeadDropResult, error) {
	if dryRun {
		return s.deadDrop(ctx, route, all, true)
	}
	var args map[string]any
	if all {
		args = map[string]any{"all": true}
	}
	return audited(ctx, s, ActionDeadDrop, route, args, func() (*DeadDropResult, error) { return s.deadDrop(ctx, route, all, false) },
		func(r *DeadDropResult) map[string]any {
			return map[string]any{"total": r.Total, "read": r.Read, "dropped": r.Dropped}
		})
}

// deadDrop drops route's letters whose pair is delivered, or all of them.
func (s *Service) deadDrop(ctx context.Context, route string, all, dryRun bool) (*DeadDropResult, error) {
	out := &DeadDropResult{Queue: s.DeadLetters.Queue(route), DryRun: dryRun}
	total, err := s.DeadLetters.Scan(ctx, route, deadScanBatch, func(items []webhook.DeadLetterInfo) ([]bool, bool, error) {
		out.Read += len(items)
		if err := s.fillStates(ctx, route, items); err != nil {
			return nil, false, err
		}
		drop := make([]bool, len(items))
		for i, it := range items {
			if all || it.State == string(webhook.StateDelivered) {
				out.Dropped++
				drop[i] = !dryRun
			}
		}
		return drop, false, nil
	})
	if err != nil {
		return nil, err
	}
	out.Total = total
	return out, nil
}

// DeadRequeue moves up to limit messages (0: all there are now) from
// route's dead-letter queue back to its route queue, one at a time: each
// copy is published with a fresh attempt count and confirmed before the
// original is acked, so a crash can duplicate a message, never lose one.
// progress, when set, is called after each message (moved, of total).
func (s *Service) DeadRequeue(ctx context.Context, route string, limit int, progress func(moved, total int)) (int, error) {
	if err := s.CheckDeadLetterRoute(ctx, route); err != nil {
		return 0, err
	}
	return audited(ctx, s, ActionDeadRequeue, route, map[string]any{"limit": limit},
		func() (int, error) { return s.DeadLetters.Requeue(ctx, route, limit, progress) },
		func(n int) map[string]any { return map[string]any{"moved": n} })
}

// DeadRequeueWhere moves back the dead letters of route whose events a
// search finds (f: a window and a --where expression; its route and state
// are set here: the route's dead pairs), as DeadRequeueEvents does for
// chosen ones. A search that finds more than MaxRequeueEvents is refused
// (narrow it, or replay by the same query, which pages): a requeue reads
// the dead-letter queue once for all of them. It answers how many letters
// moved and how many events the search found.
func (s *Service) DeadRequeueWhere(ctx context.Context, route string, f store.EventFilter, progress func(moved, read int)) (moved, found int, err error) {
	if err := s.CheckDeadLetterRoute(ctx, route); err != nil {
		return 0, 0, err
	}
	if f.Search == nil {
		return 0, 0, Invalid("where: a requeue by query needs an expression")
	}
	f.Route, f.State, f.Limit, f.Key = route, string(webhook.StateDead), MaxRequeueEvents+1, ""
	rows, err := s.Store.EventList(ctx, f)
	if err != nil {
		return 0, 0, err
	}
	if len(rows) > MaxRequeueEvents {
		return 0, len(rows), Invalid(fmt.Sprintf("the search finds more than %d dead events on %s: narrow it (since, until, where), "+
			"or replay by the same query (a job that pages through any number)", MaxRequeueEvents, route))
	}
	if len(rows) == 0 {
		return 0, 0, nil
	}
	ids := make([]uuid.UUID, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	moved, err = s.DeadRequeueEvents(ctx, route, ids, progress)
	return moved, len(rows), err
}

// MaxRequeueEvents bounds one requeue of chosen dead letters.
const MaxRequeueEvents = 1000

// DeadRequeueEvents moves the dead letters of the given events from
// route's dead-letter queue back to its route queue (see DeadRequeue),
// reading the queue once; the rest stay. progress gets the count moved and
// the count read.
func (s *Service) DeadRequeueEvents(ctx context.Context, route string, events []uuid.UUID, progress func(moved, read int)) (int, error) {
	if err := s.CheckDeadLetterRoute(ctx, route); err != nil {
		return 0, err
	}
	if len(events) == 0 || len(events) > MaxRequeueEvents {
		return 0, Invalid(fmt.Sprintf("choose from 1 to %d dead letters (%d chosen)", MaxRequeueEvents, len(events)))
	}
	want := make(map[string]bool, len(events))
	ids := make([]string, 0, len(events))
	for _, id := range events {
		want[id.String()] = true
		ids = append(ids, id.String())
	}
	return audited(ctx, s, ActionDeadRequeue, route, map[string]any{"events": ids},
		func() (int, error) { return s.DeadLetters.RequeueEvents(ctx, route, want, progress) },
		func(n int) map[string]any { return map[string]any{"moved": n} })
}
