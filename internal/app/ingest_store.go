package app

import (
	"context"
	"errors"

	"github.com/hookrelay/hookrelay/internal/ingest"
	"github.com/hookrelay/hookrelay/internal/outbox"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/webhook"
)

// ingestStore adapts *store.DB to ingest.Store: Postgres refusing a row's
// data (store.RefusedError) becomes ingest's RefusedError, so neither
// package imports the other. With direct set, the new events of a batch
// are offered to it for a publish as soon as the batch committed.
type ingestStore struct {
	db     *store.DB
	direct *outbox.Direct
}

func (s ingestStore) EventInsertBatch(ctx context.Context, batch []ingest.Insert) ([]ingest.Stored, error) {
	items := make([]store.EventInsertItem, len(batch))
	for i, in := range batch {
		items[i] = store.EventInsertItem(in)
	}
	res, err := s.db.EventInsertBatch(ctx, items)
	if err != nil {
		var re *store.RefusedError
		if errors.As(err, &re) {
			return nil, errors.Join(&ingest.RefusedError{Reason: re.Reason}, err)
		}
		return nil, err
	}
	out := make([]ingest.Stored, len(res))
	var msgs []webhook.Message
	for i, r := range res {
		out[i] = ingest.Stored{ID: r.ID, Duplicate: r.Duplicate, Err: r.Err}
		if s.direct != nil && r.OutboxID != 0 {
			ev := batch[i].Event
			m := webhook.Message{
				OutboxID: r.OutboxID, EventID: ev.ID, RoutingKey: ev.RoutingKey(), Attempt: 1,
				Source: ev.Source, EventType: ev.EventType, ContentType: ev.ContentType, Body: ev.Body, ReceivedAt: ev.ReceivedAt,
				EventTraceParent: ev.TraceParent,
			}
			msgs = append(msgs, m)
			if a := batch[i].Addressed; r.AddressedOutboxID != 0 && len(a) > 0 {
				m.OutboxID, m.Route, m.CC = r.AddressedOutboxID, a[0], a[1:]
				msgs = append(msgs, m)
			}
		}
	}
	if s.direct != nil {
		s.direct.Offer(msgs)
	}
	return out, nil
}

// IngestStore returns db as ingest's Store.
func IngestStore(db *store.DB) ingest.Store { return ingestStore{db: db} }
