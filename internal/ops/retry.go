package ops

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/webhook"
)

// RetryStore is what retry-now needs from Postgres (*store.DB); part of
// Store.
type RetryStore interface {
	// DeliveryRetryNow brings forward the next attempt of up to limit
	// retrying pairs sel selects, after delivery id after.
	DeliveryRetryNow(ctx context.Context, sel store.RetrySelection, after int64, limit int) ([]store.RetriedPair, error)
	// DeliveryRetryCount counts the retrying pairs sel selects.
	DeliveryRetryCount(ctx context.Context, sel store.RetrySelection) (int64, error)
	// DeliveryRetryWaiting counts how many of pairs still wait for the
	// attempt brought forward.
	DeliveryRetryWaiting(ctx context.Context, pairs []store.RetriedPair) (int, error)
}

// DefaultRetryBatch is the most pairs a retry of a route brings forward
// in one transaction.
const DefaultRetryBatch = 500

// RetryRequest selects retrying pairs whose next attempt to bring
// forward: one event's (EventID, to Route or to all its routes), or one
// route's (Route, with State "retrying": the only state that has a next
// attempt waiting).
type RetryRequest struct {
	EventID uuid.UUID
	Route   string
	State   string
	// Query, when it holds a search (Where), retries only the route's
	// retrying pairs of the events it finds (at most MaxRequeueEvents).
	Query store.EventFilter
	// DryRun counts and lists what would be retried; changes nothing.
	DryRun bool
	// ListLimit is how many pairs the result lists of each kind; the
	// counts cover them all. Default 100.
	ListLimit int
	// MaxBatch is the most pairs per transaction; DefaultRetryBatch when 0.
	MaxBatch int
	// StallTimeout ends a retry whose last batch no dispatcher took for
	// that long; DefaultReplayStall when 0.
	StallTimeout time.Duration
	// ProgressFunc, when set, is called after each batch and while
	// waiting.
	ProgressFunc func(RetryProgress)
}

// RetryItem is one (event, route) pair and what retry did with it.
type RetryItem struct {
	EventID uuid.UUID `json:"event_id"`
	Route   string    `json:"route"`
	// State is the pair's state when it was looked at.
	State string `json:"state"`
	// Series and Attempt are the attempt brought forward.
	Series  int `json:"series,omitempty"`
	Attempt int `json:"attempt,omitempty"`
	// WasDue is when its retry tier would have given it back.
	WasDue *time.Time `json:"was_due,omitempty"`
	// Skipped says why a pair was not retried.
	Skipped string `json:"skipped,omitempty"`
}

// RetryResult counts the pairs retried and skipped and lists the first
// ListLimit of each.
type RetryResult struct {
	DryRun       bool        `json:"dry_run"`
	RetriedCount int         `json:"retried_count"`
	SkippedCount int         `json:"skipped_count"`
	Retried      []RetryItem `json:"retried"`
	Skipped      []RetryItem `json:"skipped"`
}

// RetryProgress is where a running retry of a route stands.
type RetryProgress struct {
	// Retried of Total pairs so far; Waiting of the last batch not
	// attempted yet.
	Retried int `json:"retried"`
	Total   int `json:"total"`
	Waiting int `json:"waiting"`
}

// Retry brings forward the next attempt of the retrying pairs req
// selects: each gets a copy due now, through the outbox to its route's
// queue, as the attempt it was waiting for (same series, next number), so
// max_attempts counts as before; the copy still waiting in a retry tier
// is dropped by the dispatcher when it comes back (counted as
// superseded). A pair that is not retrying is skipped, saying why. A
// route's pairs go in batches, each waited for (most of it attempted)
// before the next, as a replay does, so live events keep flowing.
//
// A retry that is not a dry run is audited as "retry" when it starts
// and when it ends.
func (s *Service) Retry(ctx context.Context, req RetryRequest) (*RetryResult, error) {
	if req.DryRun {
		return s.retry(ctx, req)
	}
	args, target := map[string]any{}, req.Route
	if req.EventID != uuid.Nil {
		target = req.EventID.String()
		if req.Route != "" {
			args["route"] = req.Route
		}
	}
	if req.State != "" {
		args["state"] = req.State
	}
	if req.Query.Search != nil {
		args["where"] = req.Query.Search.Text
		args["since"] = req.Query.Since.UTC().Format(time.RFC3339)
	}
	return audited(ctx, s, ActionRetry, target, args, func() (*RetryResult, error) { return s.retry(ctx, req) },
		func(r *RetryResult) map[string]any {
			return map[string]any{"retried": r.RetriedCount, "skipped": r.SkippedCount}
		})
}

func (s *Service) retry(ctx context.Context, req RetryRequest) (*RetryResult, error) {
	if req.EventID == uuid.Nil {
		if req.Route == "" || req.State != string(webhook.StateRetrying) {
			return nil, fmt.Errorf("%w: give --event ID, or --route R --state retrying", ErrInvalidRequest)
		}
	} else if req.State != "" && req.State != string(webhook.StateRetrying) {
		return nil, fmt.Errorf("%w: only retrying pairs have a next attempt to bring forward", ErrInvalidRequest)
	}
	if err := s.checkRoute(ctx, req.Route); err != nil {
		return nil, err
	}
	r := &retrier{s: s, st: s.Store, req: req, res: &RetryResult{DryRun: req.DryRun, Retried: []RetryItem{}, Skipped: []RetryItem{}}}
	r.listLimit = cmpOr(req.ListLimit, DefaultListLimit)
	if req.EventID != uuid.Nil {
		return r.res, r.event(ctx)
	}
	return r.res, r.route(ctx)
}

type retrier struct {
	s         *Service
	st        RetryStore
	req       RetryRequest
	res       *RetryResult
	listLimit int
}

func (r *retrier) retried(it RetryItem) {
	r.res.RetriedCount++
	if len(r.res.Retried) < r.listLimit {
		r.res.Retried = append(r.res.Retried, it)
	}
}

func (r *retrier) skip(it RetryItem) {
	r.res.SkippedCount++
	if len(r.res.Skipped) < r.listLimit {
		r.res.Skipped = append(r.res.Skipped, it)
	}
}

// event retries one event's retrying pairs and says why each other pair
// is skipped.
func (r *retrier) event(ctx context.Context) error {
	ev, err := r.s.Store.EventShow(ctx, r.req.EventID)
	if err != nil {
		return err
	}
	detail := eventDetail(ev, r.s.served, "")
	waiting := map[string]RetryItem{}
	for _, d := range detail.Deliveries {
		if r.req.Route != "" && d.Route != r.req.Route {
			continue
		}
		it := RetryItem{EventID: ev.ID, Route: d.Route, State: d.State}
		switch {
		case d.Unserved:
			it.Skipped = UnservedReason(d.Route)
		case d.State == string(webhook.StateDelivered):
			it.Skipped = "delivered"
		case d.State == string(webhook.StateDead):
			it.Skipped = "dead: replay it (hookrelay replay --event) or requeue its dead letter"
		case d.State == string(webhook.StatePending):
			it.Skipped = "pending: its attempt is queued already"
		case d.State == string(webhook.StateStale):
			it.Skipped = "stale: a newer version was delivered, so it was not sent (hookrelay replay --event --include-stale sends it)"
		default:
			it.Series, it.Attempt, it.WasDue = d.Series, d.NextAttempt, d.NextAttemptAt
			waiting[d.Route] = it
			continue
		}
		r.skip(it)
	}
	if r.req.Route != "" && len(waiting) == 0 && r.res.SkippedCount == 0 {
		return fmt.Errorf("%w: event %s has no delivery to route %s", ErrInvalidRequest, ev.ID, r.req.Route)
	}
	if r.req.DryRun || len(waiting) == 0 {
		for _, it := range waiting {
			r.retried(it)
		}
		return nil
	}
	done, err := r.st.DeliveryRetryNow(ctx, store.RetrySelection{EventID: ev.ID, Route: r.req.Route}, 0, len(waiting))
	if err != nil {
		return err
	}
	for _, p := range done {
		it := waiting[p.Route]
		it.Series, it.Attempt = p.Series, p.Attempt
		was := p.WasDue
		it.WasDue = &was
		r.retried(it)
		delete(waiting, p.Route)
	}
	for _, it := range waiting {
		it.Skipped = "in flight now, or a copy is queued already"
		r.skip(it)
	}
	return nil
}

// route retries a route's retrying pairs in paced batches: every one,
// or those of the events a query finds.
func (r *retrier) route(ctx context.Context) error {
	sel := store.RetrySelection{Route: r.req.Route}
	if q := r.req.Query; q.Search != nil {
		q.Route, q.State, q.Limit, q.Key = r.req.Route, string(webhook.StateRetrying), MaxRequeueEvents+1, ""
		rows, err := r.s.Store.EventList(ctx, q)
		if err != nil {
			return err
		}
		if len(rows) > MaxRequeueEvents {
			return Invalid(fmt.Sprintf("the search finds more than %d retrying events on %s: narrow it (since, until, where)", MaxRequeueEvents, r.req.Route))
		}
		sel.Events = make([]uuid.UUID, len(rows))
		for i, row := range rows {
			sel.Events[i] = row.ID
		}
	}
	total, err := r.st.DeliveryRetryCount(ctx, sel)
	if err != nil {
		return err
	}
	if r.req.DryRun {
		r.res.RetriedCount = int(total)
		return nil
	}
	batch := cmpOr(r.req.MaxBatch, DefaultRetryBatch)
	stall := cmpOr(r.req.StallTimeout, DefaultReplayStall)
	var after int64
	for {
		done, err := r.st.DeliveryRetryNow(ctx, sel, after, batch)
		if err != nil {
			return err
		}
		for _, p := range done {
			was := p.WasDue
			r.retried(RetryItem{EventID: p.EventID, Route: p.Route, State: string(webhook.StateRetrying),
				Series: p.Series, Attempt: p.Attempt, WasDue: &was})
			after = p.ID
		}
		r.progress(int(total), 0)
		if len(done) == 0 {
			break
		}
		if err := r.pace(ctx, done, int(total), stall); err != nil {
			return err
		}
		if len(done) < batch {
			break
		}
	}
	// Pairs counted but not taken were in flight, or went on meanwhile.
	if missed := int(total) - r.res.RetriedCount; missed > 0 {
		r.res.SkippedCount += missed
	}
	return nil
}

// pace waits for a batch to be attempted (see pacer), so a route's live
// events never queue behind more than a batch.
func (r *retrier) pace(ctx context.Context, batch []store.RetriedPair, total int, stall time.Duration) error {
	p := pacer{action: "retry", stall: stall, enqueued: func() int { return r.res.RetriedCount }}
	_, err := p.wait(ctx, len(batch), func(ctx context.Context) (int, error) {
		return r.st.DeliveryRetryWaiting(ctx, batch)
	}, func(waiting int) { r.progress(total, waiting) })
	return err
}

func (r *retrier) progress(total, waiting int) {
	if r.req.ProgressFunc != nil {
		r.req.ProgressFunc(RetryProgress{Retried: r.res.RetriedCount, Total: total, Waiting: waiting})
	}
}
