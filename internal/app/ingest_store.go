package app

import (
	"context"

	"github.com/hookrelay/hookrelay/internal/ingest"
	"github.com/hookrelay/hookrelay/internal/outbox"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/webhook"
)

// ingestStore is *store.DB as ingest's Store that also offers the new
// events of each batch to direct (not nil) for a publish as soon as the
// batch committed.
type ingestStore struct {
	db     *store.DB
	direct *outbox.Direct
}

func (s ingestStore) EventInsertBatch(ctx context.Context, batch []webhook.Insert) ([]webhook.Stored, error) {
	res, err := s.db.EventInsertBatch(ctx, batch)
	if err != nil {
		return nil, err
	}
	var msgs []webhook.Message
	for i, r := range res {
		if r.OutboxID == 0 {
			continue
		}
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
	s.direct.Offer(msgs)
	return res, nil
}

// IngestStore returns db as ingest's Store.
func IngestStore(db *store.DB) ingest.Store { return db }
