package ops

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/topic"
)

// ListenRequest is what a listener (hookrelay listen) follows: the events
// one route gets, or the events whose "source.event_type" a topic pattern
// matches (a listen-only tap: nothing is bound, nothing delivered), from
// From on (zero: from the stream's start).
type ListenRequest struct {
	Route   string
	Pattern string
	From    time.Time
	// Start is when the stream began, the time its client was told it
	// listens from (zero: when Listen is called). An event received after
	// it is live, whatever the moment Listen first reads the store: one
	// accepted between the client's "listening" and that read is sent.
	Start time.Time
}

// ListenEvent is one event as a listener gets it: what the sender posted,
// the body byte for byte (base64 in JSON).
type ListenEvent struct {
	ID          uuid.UUID `json:"id" doc:"The event's id."`
	Source      string    `json:"source"`
	EventType   string    `json:"event_type"`
	ReceivedAt  time.Time `json:"received_at"`
	ContentType string    `json:"content_type"`
	Body        []byte    `json:"body" doc:"The body as the sender posted it, base64."`
	// Replayed says the event was stored before the listener started
	// (ListenRequest.From before it).
	Replayed bool `json:"replayed,omitempty"`
}

// Listen timing: how often the store is read for new events, and how far
// behind the newest event sent each read looks again (an event is stored
// with its received_at before its transaction commits, so one committed
// late may sort before one already sent; a listener sees it on a later
// read, once).
const (
	ListenPoll = 200 * time.Millisecond
	listenLag  = 10 * time.Second
	listenPage = 200
)

// CheckListen refuses a request Listen cannot follow (ErrInvalidRequest
// or ErrUnknownRoute), before a stream is opened.
func (s *Service) CheckListen(ctx context.Context, req ListenRequest) error {
	switch {
	case (req.Route == "") == (req.Pattern == ""):
		return Invalid("give a route or an event pattern (source.event_type, with * and #), not both")
	case req.Pattern != "":
		if err := topic.PatternError(req.Pattern); err != nil {
			return Invalid("events: " + err.Error())
		}
		return nil
	}
	return s.requireRoute(ctx, req.Route)
}

// Listen sends each event req selects, oldest first and each once, until
// ctx ends or send fails, reading the store every ListenPoll. It changes
// nothing: the route's deliveries go on as they would without it. A
// team's caller gets only events delivered to its team's routes (a
// pattern included); the platform gets every event.
func (s *Service) Listen(ctx context.Context, req ListenRequest, send func(ListenEvent) error) error {
	if err := s.CheckListen(ctx, req); err != nil {
		return err
	}
	started := req.Start
	if started.IsZero() {
		started = s.now()
	}
	from := req.From
	if from.IsZero() || from.After(started) {
		from = started
	}
	var visible map[string]bool
	if !Platform(ctx) {
		var err error
		if visible, err = s.Store.RoutesVisible(ctx); err != nil {
			return err
		}
	}
	sent := map[uuid.UUID]time.Time{} // within listenLag of the newest sent
	var newest time.Time
	tick := time.NewTicker(ListenPoll)
	defer tick.Stop()
	for {
		// Read from listenLag before the newest sent (never before from).
		scanFrom := from
		if lagged := newest.Add(-listenLag); lagged.After(scanFrom) {
			scanFrom = lagged
		}
		after := store.ReplayCursor{}
		for {
			page, err := s.Store.ReplayCandidatesPage(ctx, store.EventFilter{Route: req.Route, Since: scanFrom}, after, listenPage)
			if err != nil {
				return err
			}
			for _, c := range page {
				after = store.ReplayCursor{ReceivedAt: c.ReceivedAt, ID: c.EventID}
				if _, done := sent[c.EventID]; done || c.Purged || !listenTakes(req, visible, c) {
					continue
				}
				ev, err := s.Store.EventShow(ctx, c.EventID)
				if errors.Is(err, store.ErrNotFound) {
					continue // purged since the page was read
				}
				if err != nil {
					return err
				}
				if err := send(ListenEvent{ID: ev.ID, Source: ev.Source, EventType: ev.EventType, ReceivedAt: ev.ReceivedAt,
					ContentType: ev.ContentType, Body: []byte(ev.Body), Replayed: ev.ReceivedAt.Before(started)}); err != nil {
					return fmt.Errorf("sending event %s: %w", ev.ID, err)
				}
				sent[c.EventID] = c.ReceivedAt
				if c.ReceivedAt.After(newest) {
					newest = c.ReceivedAt
				}
			}
			if len(page) < listenPage {
				break
			}
		}
		for id, at := range sent {
			if at.Before(newest.Add(-2 * listenLag)) {
				delete(sent, id)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// listenTakes reports whether candidate c is one req follows: delivered
// to its route (the store's filter already chose those), or matching its
// pattern and, for a team, delivered to one of the team's routes.
func listenTakes(req ListenRequest, visible map[string]bool, c store.ReplayCandidate) bool {
	if req.Route != "" {
		return true
	}
	if !topic.Match(req.Pattern, c.Source+"."+c.EventType) {
		return false
	}
	if visible == nil {
		return true
	}
	for route := range c.States {
		if visible[route] {
			return true
		}
	}
	return false
}
