package app

import (
	"context"
	"errors"

	"github.com/hookrelay/hookrelay/internal/ingest"
	"github.com/hookrelay/hookrelay/internal/store"
)

// ingestStore adapts *store.DB to ingest.Store: Postgres refusing a row's
// data (store.RefusedError) becomes ingest's RefusedError, so neither
// package imports the other.
type ingestStore struct{ db *store.DB }

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
	for i, r := range res {
		out[i] = ingest.Stored(r)
	}
	return out, nil
}

// IngestStore returns db as ingest's Store.
func IngestStore(db *store.DB) ingest.Store { return ingestStore{db} }
