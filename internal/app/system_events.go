package app

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/routeset"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/webhook"
)

// systemEventPoll is how often a receiver looks for events of the relay's
// own when no notification came (a lost LISTEN connection);
// systemEventCheck how often it checks the routes' backlogs and the
// sources' rejections (store.SystemEventsCheck).
const (
	systemEventPoll  = 2 * time.Second
	systemEventCheck = 30 * time.Second
)

// relayEvents stores the relay's own events (docs/alerts.md) as events
// of source hookrelay, routed like any other: hookrelay_emit wrote each,
// in the transaction of the change it reports, into system_events; this
// moves it into events, its idempotency key the row's id, then deletes
// the row. Every receiver runs it: two storing the same row store it once
// (the key), and a receiver killed between the store and the delete
// leaves a row whose next store is a duplicate. So an event is never
// lost with its change, and never stored twice.
type relayEvents struct {
	db     *store.DB
	alerts config.Alerts
	routes func() *routeset.Set
	logger zerolog.Logger
	wake   chan struct{}
}

func newRelayEvents(db *store.DB, alerts config.Alerts, routes func() *routeset.Set, logger zerolog.Logger) *relayEvents {
	return &relayEvents{db: db, alerts: alerts, routes: routes, logger: logger.With().Str("component", "relay_events").Logger(),
		wake: make(chan struct{}, 1)}
}

// Run moves the waiting events until ctx is done, woken by
// store.SystemEventChannel (Listen) and by a poll.
func (r *relayEvents) Run(ctx context.Context) error {
	t := time.NewTicker(systemEventPoll)
	defer t.Stop()
	check := time.NewTicker(systemEventCheck)
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.wake:
		case <-t.C:
		case <-check.C:
			if _, err := r.db.SystemEventsCheck(ctx, r.alerts.BacklogAfter, r.alerts.RejectionsPerMinute); err != nil && ctx.Err() == nil {
				r.logger.Warn().Err(err).Msg("checking the routes' backlogs and the sources' rejections")
			}
		}
		for {
			n, err := r.move(ctx)
			if err != nil {
				if ctx.Err() == nil {
					r.logger.Warn().Err(err).Msg("storing the relay's own events; trying again")
				}
				break
			}
			if n < systemEventBatch {
				break
			}
		}
	}
}

const systemEventBatch = 100

// Listen wakes Run on each notification until ctx is done.
func (r *relayEvents) Listen(ctx context.Context) error {
	return r.db.Listen(ctx, store.SystemEventChannel, r.wake, r.logger)
}

// move stores one batch of waiting events and deletes their rows; it
// returns how many it moved.
func (r *relayEvents) move(ctx context.Context) (int, error) {
	waiting, err := r.db.SystemEventsWaiting(ctx, systemEventBatch)
	if err != nil || len(waiting) == 0 {
		return 0, err
	}
	set := r.routes()
	batch := make([]webhook.Insert, 0, len(waiting))
	taken := make([]store.SystemEvent, 0, len(waiting))
	ids := make([]int64, 0, len(waiting))
	for _, se := range waiting {
		id, err := uuid.NewV7()
		if err != nil {
			return 0, err
		}
		ev := &webhook.Event{
			ID: id, Source: store.RelaySource, IdempotencyKey: "system-" + strconv.FormatInt(se.ID, 10),
			EventType: se.Kind, ContentType: "application/json", Headers: http.Header{}, Body: se.Body,
			ReceivedAt: time.Now(), Team: se.Team,
		}
		ids = append(ids, se.ID)
		routed := set.Route(ctx, ev)
		if len(routed.Routes) == 0 {
			// No route takes it: not stored (nor parked among the
			// unrouted events an operator looks into).
			r.logger.Debug().Str("kind", se.Kind).Str("subject", se.Subject).Msg("the relay's own event: no route takes it")
			continue
		}
		batch = append(batch, webhook.Insert{Event: ev, Routes: routed.Routes, Addressed: routed.Addressed})
		taken = append(taken, se)
	}
	var stored []webhook.Stored
	if len(batch) > 0 {
		if stored, err = r.db.EventInsertBatch(ctx, batch); err != nil {
			return 0, err
		}
	}
	for i, s := range stored {
		if s.Err != nil {
			return 0, s.Err
		}
		if !s.Duplicate {
			r.logger.Info().Str("kind", taken[i].Kind).Str("subject", taken[i].Subject).Str("team", taken[i].Team).
				Strs("routes", batch[i].Routes).Stringer("event_id", s.ID).Msg("the relay's own event stored")
		}
	}
	if err := r.db.SystemEventsDone(ctx, ids); err != nil {
		return 0, err
	}
	return len(waiting), nil
}
