// Package ops is what an operator does to a running relay: find events and
// why they failed, replay them, read and requeue dead letters, purge old
// data. The hookrelay CLI and the admin HTTP API both call it, so they
// always agree.
package ops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	hamqp "github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/store"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Service carries what the operations need.
type Service struct {
	DB *store.DB
	// Dialer and Names reach the dead-letter queues.
	Dialer *hamqp.Dialer
	Names  hamqp.Names
	// RoutesFunc names the routes whose bindings match a routing key.
	RoutesFunc func(routingKey string) []string
	// Routes are the configured route names.
	Routes []string
	// DedupeWindow is how long purge keeps dedupe keys.
	DedupeWindow time.Duration
	// NowFunc is the clock; time.Now when nil.
	NowFunc func() time.Time
}

func (s *Service) now() time.Time {
	if s.NowFunc != nil {
		return s.NowFunc()
	}
	return time.Now()
}

// ErrUnknownRoute is returned for a route that is not configured.
var ErrUnknownRoute = errors.New("unknown route")

func (s *Service) checkRoute(route string) error {
	if route == "" || s.served(route) {
		return nil
	}
	return fmt.Errorf("%w: route %q is not in the config, so no dispatcher delivers it", ErrUnknownRoute, route)
}

// served reports whether route is in the config.
func (s *Service) served(route string) bool {
	return slices.Contains(s.Routes, route)
}

// UnservedReason is what an operator is told about a pair on a route that
// is not in the config.
func UnservedReason(route string) string {
	return "route " + route + " is not configured: no dispatcher delivers it"
}

// EventShow returns one event with its deliveries and attempts, each
// delivery marked Unserved when its route is not in the config; or
// store.ErrNotFound.
func (s *Service) EventShow(ctx context.Context, id uuid.UUID) (*store.EventDetail, error) {
	ev, err := s.DB.EventShow(ctx, id)
	if err != nil {
		return nil, err
	}
	for i := range ev.Deliveries {
		ev.Deliveries[i].Unserved = !s.served(ev.Deliveries[i].Route)
	}
	return ev, nil
}

// EventList is part of the events a filter selects: Shown of Total.
type EventList struct {
	Total int64                `json:"total"`
	Shown int                  `json:"shown"`
	Items []store.EventSummary `json:"items"`
}

// EventList lists the events f selects, newest first, up to f.Limit
// (default 100), with how many match in all.
func (s *Service) EventList(ctx context.Context, f store.EventFilter) (*EventList, error) {
	if f.Limit <= 0 {
		f.Limit = DefaultListLimit
	}
	items, err := s.DB.EventList(ctx, f)
	if err != nil {
		return nil, err
	}
	for i := range items {
		for j := range items[i].Deliveries {
			items[i].Deliveries[j].Unserved = !s.served(items[i].Deliveries[j].Route)
		}
	}
	out := &EventList{Total: int64(len(items)), Shown: len(items), Items: items}
	if len(items) >= f.Limit {
		// Only a full page needs the count.
		if out.Total, err = s.DB.EventCountByFilter(ctx, f); err != nil {
			return nil, err
		}
		out.Total = max(out.Total, int64(out.Shown))
	}
	return out, nil
}

// DefaultListLimit is how many events or dead letters a listing shows
// unless told otherwise.
const DefaultListLimit = 100

// DeadLetter is a message in a route's dead-letter queue.
type DeadLetter struct {
	EventID        string `json:"event_id"`
	Source         string `json:"source"`
	EventType      string `json:"event_type"`
	Attempts       int64  `json:"attempts"`
	LastStatus     int64  `json:"last_status"`
	LastError      string `json:"last_error"`
	FirstAttemptAt string `json:"first_attempt_at"`
	LastAttemptAt  string `json:"last_attempt_at"`
	// Reason is max_attempts, no_retry_status or malformed (the
	// dispatcher's), or delivery_limit (RabbitMQ parked it).
	Reason string `json:"reason"`
}

func (s *Service) channel() (*amqp.Connection, *amqp.Channel, error) {
	node, err := s.Dialer.Dial("hookrelay-cli")
	if err != nil {
		return nil, nil, err
	}
	conn := node.Connection
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("opening channel: %w", err)
	}
	return conn, ch, nil
}

// DeadLetterList is part of a dead-letter queue: Shown of its Total
// messages.
type DeadLetterList struct {
	Queue string       `json:"queue"`
	Total int          `json:"total"`
	Shown int          `json:"shown"`
	Items []DeadLetter `json:"items"`
}

// DeadList reads up to limit messages of route's dead-letter queue without
// consuming them: they are taken unacknowledged and all returned to the
// queue. (Dead-letter queues have no delivery limit, so reading is safe.)
// Total is the queue's message count, so a caller can say what it did not
// show.
func (s *Service) DeadList(ctx context.Context, route string, limit int) (*DeadLetterList, error) {
	if err := s.requireRoute(route); err != nil {
		return nil, err
	}
	conn, ch, err := s.channel()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	queue := s.Names.DeadQueue(route)
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		return nil, fmt.Errorf("inspecting %s: %w", queue, err)
	}
	out := &DeadLetterList{Queue: queue, Items: []DeadLetter{}}
	var last uint64
	for len(out.Items) < limit {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		d, ok, err := ch.Get(queue, false)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", queue, err)
		}
		if !ok {
			break
		}
		last = d.DeliveryTag
		out.Items = append(out.Items, deadLetter(d))
	}
	if last > 0 {
		if err := ch.Nack(last, true, true); err != nil {
			return nil, fmt.Errorf("returning messages to the queue: %w", err)
		}
	}
	out.Shown = len(out.Items)
	// Messages dead-lettered since the count was taken may have been read.
	out.Total = max(q.Messages, out.Shown)
	return out, nil
}

// requireRoute is checkRoute for operations that need one route.
func (s *Service) requireRoute(route string) error {
	if route == "" {
		return errors.New("a route is required (--route)")
	}
	return s.checkRoute(route)
}

func deadLetter(d amqp.Delivery) DeadLetter {
	str := func(k string) string { v, _ := d.Headers[k].(string); return v }
	num := func(k string) int64 {
		switch v := d.Headers[k].(type) {
		case int32:
			return int64(v)
		case int64:
			return v
		}
		return 0
	}
	dl := DeadLetter{
		EventID: str(hamqp.HeaderEventID), Source: str(hamqp.HeaderSource), EventType: str(hamqp.HeaderEventType),
		Attempts: num(hamqp.HeaderAttempts), LastStatus: num(hamqp.HeaderLastStatus), LastError: str(hamqp.HeaderLastError),
		FirstAttemptAt: str(hamqp.HeaderFirstAttemptAt), LastAttemptAt: str(hamqp.HeaderLastAttemptAt),
		Reason: str(hamqp.HeaderDeadReason),
	}
	if deaths, ok := d.Headers["x-death"].([]any); ok && len(deaths) > 0 && dl.Reason == "" {
		if t, ok := deaths[0].(amqp.Table); ok {
			if r, ok := t["reason"].(string); ok {
				dl.Reason = r
			}
		}
	}
	return dl
}

// DeadRequeue moves up to limit messages (0: all there are now) from route's dead-letter
// queue back to its route queue, one at a time: each copy is published with
// a fresh attempt count and confirmed before the original is acked, so a
// crash can duplicate a message, never lose one.
func (s *Service) DeadRequeue(ctx context.Context, route string, limit int) (int, error) {
	if err := s.requireRoute(route); err != nil {
		return 0, err
	}
	conn, ch, err := s.channel()
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if err := ch.Confirm(false); err != nil {
		return 0, fmt.Errorf("enabling confirms: %w", err)
	}
	returns := ch.NotifyReturn(make(chan amqp.Return, 1))
	if limit <= 0 {
		// "All" means what is there now: a message that fails at once (a
		// 410) comes straight back, and must not be moved forever.
		q, err := ch.QueueDeclarePassive(s.Names.DeadQueue(route), true, false, false, false, nil)
		if err != nil {
			return 0, fmt.Errorf("inspecting %s: %w", s.Names.DeadQueue(route), err)
		}
		limit = q.Messages
	}
	moved := 0
	for moved < limit {
		if err := ctx.Err(); err != nil {
			return moved, err
		}
		d, ok, err := ch.Get(s.Names.DeadQueue(route), false)
		if err != nil {
			return moved, fmt.Errorf("reading %s: %w", s.Names.DeadQueue(route), err)
		}
		if !ok {
			break
		}
		// A fresh attempt series: no attempt count. The route header and the
		// generation tell the dispatcher this is a dead letter moved back, to
		// restart only if the pair is still dead at that generation (a
		// replay may have delivered it meanwhile).
		headers := amqp.Table{hamqp.HeaderRoute: route}
		for _, k := range []string{hamqp.HeaderEventID, hamqp.HeaderSource, hamqp.HeaderEventType, hamqp.HeaderGen} {
			if v, ok := d.Headers[k]; ok {
				headers[k] = v
			}
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", s.Names.RouteQueue(route), true, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent, ContentType: d.ContentType, MessageId: d.MessageId, Type: d.Type,
			AppId: "hookrelay", Timestamp: s.now(), Headers: headers, Body: d.Body,
		})
		if err != nil {
			return moved, fmt.Errorf("republishing: %w", err)
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		acked, err := dc.WaitContext(wctx)
		cancel()
		if err != nil || !acked {
			return moved, fmt.Errorf("republishing: not confirmed (%v)", err)
		}
		select {
		case r := <-returns:
			return moved, fmt.Errorf("republishing: returned: %s", r.ReplyText)
		default:
		}
		if err := d.Ack(false); err != nil {
			return moved, fmt.Errorf("acking the dead letter: %w", err)
		}
		moved++
	}
	return moved, nil
}

// PurgeRequest says what to purge.
type PurgeRequest struct {
	// OlderThan is the age past which events are purged.
	OlderThan time.Duration
	// Batch is how many events one transaction handles; default 1000.
	Batch int
	// IncludeDead purges events with dead pairs too (their dead letters
	// then park as event_missing on requeue).
	IncludeDead bool
}

// Purge deletes what is older than req.OlderThan (see store.Purge),
// keeping dedupe keys for the retention window and every event with
// something undelivered. Pairs pending or retrying on a route that is not
// in the config are abandoned: no dispatcher will ever deliver them.
func (s *Service) Purge(ctx context.Context, req PurgeRequest) (store.PurgeResult, error) {
	if req.OlderThan <= 0 {
		return store.PurgeResult{}, errors.New("--older-than must be positive")
	}
	now := s.now()
	return s.DB.Purge(ctx, store.PurgeConfig{
		OlderThan:    now.Add(-req.OlderThan),
		DedupeBefore: now.Add(-s.DedupeWindow),
		Batch:        req.Batch,
		IncludeDead:  req.IncludeDead,
		ServedRoutes: append([]string{}, s.Routes...), // never nil: nil would mean every route is served
	})
}
