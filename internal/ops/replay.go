package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/rule"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/webhook"
)

// Replay sizing and pacing. A replay shares the route queues with live
// events, and quorum queues have no priorities: whatever a replay enqueues
// is delivered before a live event that arrives after it. So a replay
// enqueues a batch, waits until the dispatchers have taken most of it, and
// only then enqueues the next: a live event never waits behind more than
// one batch. Batches are sized to what the dispatchers drained in about
// replayBatchTime, so that wait stays about a second whether they deliver
// 100 or 5,000 pairs a second.
const (
	// DefaultReplayBatch is the most pairs enqueued in one transaction.
	DefaultReplayBatch = 1000
	// DefaultReplayStall is how long a replay waits for a batch without
	// any of it leaving pending before it gives up.
	DefaultReplayStall = 2 * time.Minute
	// replayPage is how many events one selection query reads.
	replayPage = 1000
	// replayFirstBatch starts small: the drain rate is not known yet.
	replayFirstBatch = 100
	// replayBatchTime is the dispatcher time one batch should take.
	replayBatchTime = time.Second
	// replayPoll is how often a waiting replay looks at its batch.
	replayPoll = 100 * time.Millisecond
)

// ReplayRequest selects what to replay: one event (EventID) or a filter,
// to every route the event is bound to or to Filter.Route only.
type ReplayRequest struct {
	EventID uuid.UUID
	Filter  store.EventFilter
	// After continues a selection after the last event of an earlier one
	// that stopped at Filter.Limit: that result's NextAfter.
	After string
	// By is the replay this run is part of: its first job's id, which a
	// run again for the rest (ReplayResumeOf) shares. A pair it replayed
	// already is not replayed again, whatever its state is since. Zero:
	// the id of the job the replay runs in, if any.
	By uuid.UUID
	// IncludeDelivered replays pairs already delivered too.
	IncludeDelivered bool
	// IncludeStale replays stale pairs too (a route with ordering
	// drop_stale did not send them), delivered without the stale check.
	IncludeStale bool
	// IgnoreFilter replays an event to a filtered route whose filter does
	// not take it now. Without it, an event that has no pair on a route
	// with a filter (the filter did not take it, or the route is newer) is
	// replayed there only when the route's filter takes it now; a pair
	// that exists is replayed whatever the filter says (it took the event
	// once).
	IgnoreFilter bool
	// DryRun reports what would be replayed and changes nothing.
	DryRun bool
	// ListLimit is how many pairs the result lists of each kind (replayed,
	// skipped); the counts cover them all. Default 100.
	ListLimit int

	// MaxBatch is the most pairs per transaction; DefaultReplayBatch when 0.
	MaxBatch int
	// StallTimeout ends a replay whose last batch made no progress for
	// that long; DefaultReplayStall when 0.
	StallTimeout time.Duration
	// ProgressFunc, when set, is called after each batch and while waiting.
	ProgressFunc func(ReplayProgress)
}

// ReplayItem is one (event, route) pair and what replay did with it.
type ReplayItem struct {
	EventID    uuid.UUID `json:"event_id"`
	Source     string    `json:"source"`
	EventType  string    `json:"event_type"`
	ReceivedAt time.Time `json:"received_at"`
	Route      string    `json:"route"`
	// State is the pair's state before the replay ("" if never attempted).
	State string `json:"state"`
	// Skipped says why a pair was not replayed.
	Skipped string `json:"skipped,omitempty"`

	// before is the position just before its event, beforeDone how many
	// events that is (replayer.reached).
	before     store.ReplayCursor
	beforeDone int
}

// ReplayResult counts the replayed and skipped pairs and lists the first
// ListLimit of each.
type ReplayResult struct {
	DryRun bool `json:"dry_run"`
	// Events is how many events the selection matches (within its limit).
	Events int64 `json:"events"`
	// Scanned is how many of them were looked at.
	Scanned       int          `json:"scanned"`
	ReplayedCount int          `json:"replayed_count"`
	SkippedCount  int          `json:"skipped_count"`
	Replayed      []ReplayItem `json:"replayed"`
	Skipped       []ReplayItem `json:"skipped"`
	// Delivered counts replayed pairs seen delivered before Replay
	// returned; the rest are on their way.
	Delivered int `json:"delivered"`
	// NextAfter is set when Filter.Limit stopped the selection and more
	// events match: pass it as After to go on.
	NextAfter string `json:"next_after,omitempty"`
	// Reached is the position the replay reached, as in its progress.
	Reached string `json:"reached,omitempty"`
}

// ReplayProgress is where a running replay stands.
type ReplayProgress struct {
	// Events is how many events the selection matches; Scanned how many
	// were looked at so far.
	Events  int64 `json:"events"`
	Scanned int   `json:"scanned"`
	// Enqueued and Skipped count pairs so far; Delivered those of the
	// enqueued seen delivered.
	Enqueued  int `json:"enqueued"`
	Skipped   int `json:"skipped"`
	Delivered int `json:"delivered"`
	// Batch is the current batch size.
	Batch int `json:"batch"`
	// After is the position reached: every selected event up to it
	// (Done of them) is done, its pairs enqueued or skipped. A run
	// again for the rest starts after it.
	After string `json:"after,omitempty"`
	Done  int    `json:"done"`
	// Resume is what a run again for the rest needs (ReplayResumeOf).
	Resume *ReplayResume `json:"resume,omitempty"`
}

// ReplayResume is a replay by filter as its progress keeps it, for a run
// again for the rest: the selection, its window pinned to the times it
// started with, and the replay's id.
type ReplayResume struct {
	By               uuid.UUID    `json:"by"`
	Filter           FilterFields `json:"filter"`
	Limit            int          `json:"limit,omitempty"`
	IncludeDelivered bool         `json:"include_delivered,omitempty"`
	IncludeStale     bool         `json:"include_stale,omitempty"`
	IgnoreFilter     bool         `json:"ignore_filter,omitempty"`
}

// Replay puts the selected pairs back through the outbox (so a crash half
// way loses nothing) addressed to their route's queue, each as a new
// attempt series with the same webhook-id. Delivered pairs are skipped
// unless IncludeDelivered, stale pairs unless IncludeStale; pairs pending or retrying are in flight already
// and always skipped; purged events have no body left to send.
//
// A selection by filter is read a page at a time (never all in memory) and
// enqueued a batch per transaction, each batch paced as the constants
// above explain, so a replay of any size leaves room for live events. A
// replay of one event is not paced. On error (a stall, ctx done) the
// result counts what was done before it, and what was enqueued stays
// enqueued.
//
// A replay that is not a dry run is audited as "replay" when it starts
// and when it ends.
func (s *Service) Replay(ctx context.Context, req ReplayRequest) (*ReplayResult, error) {
	if req.Filter.Key != "" {
		return nil, Invalid(store.ErrKeyFilter.Error())
	}
	if req.DryRun {
		return s.replay(ctx, req)
	}
	target := req.Filter.Route
	args := filterArgs(req.Filter)
	if req.EventID != uuid.Nil {
		target = req.EventID.String() // the route, if any, is in args
	}
	if req.After != "" {
		args["after"] = req.After
	}
	args["include_delivered"], args["include_stale"] = req.IncludeDelivered, req.IncludeStale
	// What is refused at once is refused before the audit row that starts
	// the replay: an unknown route or event changes nothing to log.
	if err := s.checkRoute(ctx, req.Filter.Route); err != nil {
		return nil, err
	}
	if req.EventID != uuid.Nil {
		if _, err := s.Store.EventShow(ctx, req.EventID); err != nil {
			return nil, err
		}
	}
	if req.IgnoreFilter {
		args["ignore_filter"] = true
	}
	return audited(ctx, s, ActionReplay, target, args, func() (*ReplayResult, error) { return s.replay(ctx, req) },
		func(r *ReplayResult) map[string]any {
			return map[string]any{"events": r.Events, "replayed": r.ReplayedCount, "skipped": r.SkippedCount, "delivered": r.Delivered, "next_after": r.NextAfter}
		})
}

// filterArgs is f as audit arguments: its set fields.
func filterArgs(f store.EventFilter) map[string]any {
	args := map[string]any{}
	for k, v := range map[string]string{"source": f.Source, "event_type": f.EventType, "state": f.State, "route": f.Route} {
		if v != "" {
			args[k] = v
		}
	}
	if !f.Since.IsZero() {
		args["since"] = f.Since.UTC().Format(time.RFC3339)
	}
	if !f.Until.IsZero() {
		args["until"] = f.Until.UTC().Format(time.RFC3339)
	}
	if f.Limit > 0 {
		args["limit"] = f.Limit
	}
	if f.Search != nil {
		args["where"] = f.Search.Text
	}
	return args
}

func (s *Service) replay(ctx context.Context, req ReplayRequest) (*ReplayResult, error) {
	if err := s.checkRoute(ctx, req.Filter.Route); err != nil {
		return nil, err
	}
	if req.By == uuid.Nil && !req.DryRun {
		req.By = JobIDOf(ctx)
	}
	after, err := store.ParseReplayCursor(req.After)
	if err != nil {
		return nil, fmt.Errorf("%w: after: %w", ErrInvalidRequest, err)
	}
	r := &replayer{s: s, req: req, res: &ReplayResult{DryRun: req.DryRun, Replayed: []ReplayItem{}, Skipped: []ReplayItem{}},
		lastScanned: after, pageEnd: after}
	if r.routes, err = s.visibleRoutes(ctx, s.RoutesNow().Names()); err != nil {
		return nil, err
	}
	r.maxBatch = cmpOr(req.MaxBatch, DefaultReplayBatch)
	r.batch = min(replayFirstBatch, r.maxBatch)
	r.listLimit = cmpOr(req.ListLimit, DefaultListLimit)
	r.stall = cmpOr(req.StallTimeout, DefaultReplayStall)

	if req.EventID != uuid.Nil {
		ev, err := s.Store.EventShow(ctx, req.EventID)
		if err != nil {
			return nil, err
		}
		return r.res, r.one(ctx, ev)
	}
	if r.res.Events, err = s.Store.ReplayCandidateCount(ctx, req.Filter, after); err != nil {
		return nil, err
	}
	return r.res, r.filtered(ctx, after)
}

// one replays one event: a handful of pairs, enqueued at once, not waited
// for.
func (r *replayer) one(ctx context.Context, ev *store.EventDetail) error {
	c := store.ReplayCandidate{EventID: ev.ID, Source: ev.Source, EventType: ev.EventType, ReceivedAt: ev.ReceivedAt, Purged: ev.Purged, States: map[string]string{}}
	for _, d := range ev.Deliveries {
		c.States[d.Route] = d.State
	}
	r.res.Events, r.res.Scanned = 1, 1
	if err := r.add(ctx, []store.ReplayCandidate{c}); err != nil {
		return err
	}
	return r.flush(ctx, len(r.queue), false)
}

// filtered replays what the request's filter selects after the cursor
// (r.res.Events of them), a page at a time, in paced batches.
func (r *replayer) filtered(ctx context.Context, after store.ReplayCursor) error {
	f := r.req.Filter
	if f.Limit > 0 {
		r.res.Events = min(r.res.Events, int64(f.Limit))
	}
	for {
		size := replayPage
		if f.Limit > 0 {
			size = min(size, f.Limit-r.res.Scanned)
		}
		if size == 0 {
			// The limit stopped it: say where to go on, if anything is left.
			more, err := r.s.Store.ReplayCandidatesPage(ctx, f, after, 1)
			if err != nil {
				return err
			}
			if len(more) > 0 {
				r.res.NextAfter = after.String()
			}
			break
		}
		page, err := r.s.Store.ReplayCandidatesPage(ctx, f, after, size)
		if err != nil {
			return err
		}
		r.res.Scanned += len(page)
		if err := r.add(ctx, page); err != nil {
			return err
		}
		r.pageEnd, r.pageDone = r.lastScanned, r.scanned
		for len(r.queue) >= r.batch {
			if err := r.flush(ctx, r.batch, true); err != nil {
				return err
			}
		}
		r.progress()
		if len(page) < size {
			break
		}
		last := page[len(page)-1]
		after = store.ReplayCursor{ReceivedAt: last.ReceivedAt, ID: last.EventID}
	}
	for len(r.queue) > 0 {
		if err := r.flush(ctx, min(r.batch, len(r.queue)), true); err != nil {
			return err
		}
	}
	return nil
}

// ErrInvalidRequest marks a request that can never succeed as given.
var ErrInvalidRequest = errors.New("invalid request")

func cmpOr[T int | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// replayer is one running replay.
type replayer struct {
	s   *Service
	req ReplayRequest
	// routes are the configured routes the caller's team sees: a shared
	// event is replayed to the team's routes only, and another team's
	// routes are not named even as skipped.
	routes    []string
	res       *ReplayResult
	maxBatch  int
	batch     int
	listLimit int
	stall     time.Duration
	// queue holds selected pairs not yet enqueued: at most a page's worth
	// plus a batch.
	queue []ReplayItem
	// delivered counts pairs of finished batches seen delivered.
	delivered int
	// lastScanned is the last event add read, scanned how many it read;
	// pageEnd and pageDone the same once a page was added whole: the
	// position reached when the queue is empty.
	lastScanned, pageEnd store.ReplayCursor
	scanned, pageDone    int
}

// reached is the position every event up to which is done: just before
// the event of the first pair still queued, else the end of the pages
// added; and how many events that is.
func (r *replayer) reached() (store.ReplayCursor, int) {
	if len(r.queue) > 0 {
		return r.queue[0].before, r.queue[0].beforeDone
	}
	return r.pageEnd, r.pageDone
}

// add sorts a page's pairs into skipped ones (counted and listed) and ones
// to enqueue (queued).
func (r *replayer) add(ctx context.Context, page []store.ReplayCandidate) error {
	f := r.req.Filter
	for _, c := range page {
		before, beforeDone := r.lastScanned, r.scanned
		r.lastScanned, r.scanned = store.ReplayCursor{ReceivedAt: c.ReceivedAt, ID: c.EventID}, r.scanned+1
		// Pairs on routes no longer configured: nothing would deliver
		// them, so they are refused, with the reason (not "in flight").
		// With a route filter there are none: it must be configured.
		if f.Route == "" {
			for _, route := range slices.Sorted(maps.Keys(c.States)) {
				state := c.States[route]
				if r.s.served(route) || (f.State != "" && state != f.State) {
					continue
				}
				r.skip(ReplayItem{EventID: c.EventID, Source: c.Source, EventType: c.EventType, ReceivedAt: c.ReceivedAt,
					Route: route, State: state, Skipped: UnservedReason(route)})
			}
		}
		for _, route := range r.s.RoutesNow().Match(webhook.RoutingKey(c.Source, c.EventType)) {
			if (f.Route != "" && route != f.Route) || !slices.Contains(r.routes, route) {
				continue
			}
			state := c.States[route]
			if f.State != "" && state != f.State {
				continue
			}
			item := ReplayItem{EventID: c.EventID, Source: c.Source, EventType: c.EventType, ReceivedAt: c.ReceivedAt, Route: route, State: state,
				before: before, beforeDone: beforeDone}
			switch {
			case c.Purged:
				item.Skipped = "purged: the body is no longer stored"
			case state == string(webhook.StateDelivered) && !r.req.IncludeDelivered:
				item.Skipped = "delivered (use --include-delivered)"
			case state == string(webhook.StateStale) && !r.req.IncludeStale:
				item.Skipped = "stale: a newer version was delivered (use --include-stale)"
			case state == string(webhook.StatePending) || state == string(webhook.StateRetrying):
				item.Skipped = "in flight (" + state + ")"
			case state == "" && !r.req.IgnoreFilter:
				why, err := r.filterSkips(ctx, c, route)
				if err != nil {
					return err
				}
				item.Skipped = why
			}
			if item.Skipped != "" {
				r.skip(item)
				continue
			}
			if r.req.DryRun {
				r.replayed(item)
				continue
			}
			r.queue = append(r.queue, item)
		}
	}
	return nil
}

// filterSkips says why an event without a pair on route is not replayed
// there: the route's filter does not take it, or cannot judge it; "" when
// the route has no filter or its filter takes it.
func (r *replayer) filterSkips(ctx context.Context, c store.ReplayCandidate, route string) (string, error) {
	rt := r.s.RoutesNow().Get(route)
	if rt == nil || rt.FilterProgram == nil {
		return "", nil
	}
	ev, err := r.s.Store.EventShow(ctx, c.EventID)
	if err != nil {
		return "", fmt.Errorf("reading event %s for route %s's filter: %w", c.EventID, route, err)
	}
	body := []byte(ev.Body)
	ok, err := rt.FilterProgram.Match(ctx, rule.Input{Body: rule.ParseBody(body), Headers: rule.HeadersOf(ev.Headers),
		Source: ev.Source, EventType: ev.EventType, ReceivedAt: ev.ReceivedAt})
	switch {
	case err != nil:
		return "the route's filter cannot judge it: " + err.Error() + " (use --ignore-filter)", nil
	case !ok:
		return "filtered: the route's filter does not take it (use --ignore-filter)", nil
	}
	return "", nil
}

func (r *replayer) skip(it ReplayItem) {
	r.res.SkippedCount++
	if len(r.res.Skipped) < r.listLimit {
		r.res.Skipped = append(r.res.Skipped, it)
	}
}

func (r *replayer) replayed(it ReplayItem) {
	r.res.ReplayedCount++
	if len(r.res.Replayed) < r.listLimit {
		r.res.Replayed = append(r.res.Replayed, it)
	}
}

// flush enqueues the first n queued pairs in one transaction and, when
// pace is set, waits for them to drain.
func (r *replayer) flush(ctx context.Context, n int, pace bool) error {
	if n == 0 {
		return nil
	}
	items := r.queue[:n]
	pairs := make([]store.ReplayPair, n)
	for i, it := range items {
		pairs[i] = store.ReplayPair{EventID: it.EventID, Route: it.Route}
	}
	done, err := r.s.Store.ReplayEnqueueBy(ctx, r.req.By, pairs, r.req.IncludeDelivered, r.req.IncludeStale)
	if err != nil {
		return err
	}
	enqueued := make(map[store.ReplayPair]bool, len(done))
	for _, p := range done {
		enqueued[p] = true
	}
	for i, it := range items {
		if enqueued[pairs[i]] {
			r.replayed(it)
			continue
		}
		// Its state changed since it was selected (delivered, in flight
		// again) or its event was purged: it was left alone.
		it.Skipped = "changed meanwhile (delivered, in flight or purged); left alone"
		r.skip(it)
	}
	r.queue = append(r.queue[:0], r.queue[n:]...)
	r.progress()
	if !pace || len(done) == 0 {
		return nil
	}
	return r.pace(ctx, done)
}

// pace waits for the batch just enqueued to drain (see pacer), then
// sizes the next batch to what drained in about replayBatchTime: at most
// double this one, within [replayFirstBatch/2, maxBatch].
func (r *replayer) pace(ctx context.Context, batch []store.ReplayPair) error {
	var pending, delivered int
	p := pacer{action: "replay", stall: r.stall, enqueued: func() int { return r.res.ReplayedCount }}
	took, err := p.wait(ctx, len(batch), func(ctx context.Context) (int, error) {
		states, err := r.s.Store.PairStates(ctx, batch)
		if err != nil {
			return 0, err
		}
		pending, delivered = 0, 0
		for _, st := range states {
			switch st {
			case webhook.StatePending:
				pending++
			case webhook.StateDelivered:
				delivered++
			}
		}
		return pending, nil
	}, func(int) {
		r.res.Delivered = r.delivered + delivered
		r.progress()
	})
	r.delivered += delivered
	if err != nil {
		return err
	}
	rate := float64(len(batch)-pending) / took.Seconds()
	r.batch = min(max(int(rate*replayBatchTime.Seconds()), replayFirstBatch/2), 2*r.batch, r.maxBatch)
	return nil
}

func (r *replayer) progress() {
	at, done := r.reached()
	r.res.Reached = at.String()
	if r.req.ProgressFunc == nil {
		return
	}
	p := ReplayProgress{
		Events: r.res.Events, Scanned: r.res.Scanned, Enqueued: r.res.ReplayedCount, Skipped: r.res.SkippedCount,
		Delivered: r.res.Delivered, Batch: r.batch, After: at.String(), Done: done,
	}
	if r.req.EventID == uuid.Nil && !r.req.DryRun && r.req.By != uuid.Nil {
		p.Resume = &ReplayResume{By: r.req.By, Filter: pinned(r.req.Filter), Limit: r.req.Filter.Limit,
			IncludeDelivered: r.req.IncludeDelivered, IncludeStale: r.req.IncludeStale, IgnoreFilter: r.req.IgnoreFilter}
	}
	r.req.ProgressFunc(p)
}

// pinned is f as FilterFields, its window as times (not ages), so that
// read again later it selects the same events.
func pinned(f store.EventFilter) FilterFields {
	ff := FilterFields{Source: f.Source, EventType: f.EventType, State: f.State, Route: f.Route}
	if !f.Since.IsZero() {
		ff.Since = f.Since.UTC().Format(time.RFC3339Nano)
	}
	if !f.Until.IsZero() {
		ff.Until = f.Until.UTC().Format(time.RFC3339Nano)
	}
	if f.Search != nil {
		ff.Where = f.Search.Text
	}
	return ff
}

// ReplayResumeOf is the request that runs the replay job id again for
// the rest: its selection, after the position its progress reached, as
// the same replay (By), so that no pair it sent is sent again. A job
// that is running answers ErrConflict (cancel it first), one that
// succeeded too (nothing is left), one that is no replay by filter or
// kept no position ErrInvalidRequest.
func (s *Service) ReplayResumeOf(ctx context.Context, id uuid.UUID) (ReplayRequest, error) {
	j, err := s.Store.JobGet(ctx, id)
	if err != nil {
		return ReplayRequest{}, err
	}
	switch {
	case j.Kind != "replay":
		return ReplayRequest{}, Invalid(fmt.Sprintf("job %s is a %s, not a replay", id, j.Kind))
	case j.State == store.JobRunning:
		return ReplayRequest{}, fmt.Errorf("%w: job %s is still running: cancel it first", ErrConflict, id)
	case j.State == store.JobSucceeded:
		return ReplayRequest{}, fmt.Errorf("%w: job %s succeeded: nothing of it is left", ErrConflict, id)
	}
	var p ReplayProgress
	if err := json.Unmarshal(j.Progress, &p); err != nil || p.Resume == nil {
		return ReplayRequest{}, Invalid(fmt.Sprintf("job %s kept no position to go on from (a replay of one event, or one that stopped before its first page): replay its selection again", id))
	}
	f, err := p.Resume.Filter.Parse()
	if err != nil {
		return ReplayRequest{}, err
	}
	if p.Resume.Limit > 0 {
		if f.Limit = p.Resume.Limit - p.Done; f.Limit <= 0 {
			return ReplayRequest{}, fmt.Errorf("%w: job %s reached its limit: nothing of it is left", ErrConflict, id)
		}
	}
	return ReplayRequest{Filter: f, After: p.After, By: p.Resume.By, IncludeDelivered: p.Resume.IncludeDelivered,
		IncludeStale: p.Resume.IncludeStale, IgnoreFilter: p.Resume.IgnoreFilter}, nil
}
