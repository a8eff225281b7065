package activity_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/activity"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// Counts from two processes add up in Postgres, minute by minute.
func TestCountsAddUpInPostgres(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	a, b := activity.New(db, time.Hour, zerolog.Nop()), activity.New(db, time.Hour, zerolog.Nop())
	for range 3 {
		a.Add(activity.Delivery, "billing", "delivered", "")
	}
	b.Add(activity.Delivery, "billing", "delivered", "")
	b.Add(activity.Ingest, "acme", "rejected", "signature_mismatch")
	require.NoError(t, a.Flush(ctx, 0))
	require.NoError(t, b.Flush(ctx, activity.Keep))
	require.NoError(t, a.Flush(ctx, 0), "nothing left to flush")

	counts, _, err := db.ActivitySince(ctx, time.Hour)
	require.NoError(t, err)
	got := map[string]int64{}
	for _, c := range counts {
		got[c.Kind+" "+c.Name+" "+c.Outcome+" "+c.Reason] += c.N
	}
	require.Equal(t, map[string]int64{
		"delivery billing delivered ":             4,
		"ingest acme rejected signature_mismatch": 1,
	}, got)
}

// flaky fails its first call, then stores in db.
type flaky struct {
	db    *store.DB
	calls int
}

func (f *flaky) ActivityAdd(ctx context.Context, counts []store.ActivityCount, keep time.Duration) error {
	f.calls++
	if f.calls == 1 {
		return errors.New("postgres down")
	}
	return f.db.ActivityAdd(ctx, counts, keep)
}

// Counts that could not be stored are kept for the next flush.
func TestFailedFlushKeepsCounts(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	f := &flaky{db: db}
	c := activity.New(f, time.Hour, zerolog.Nop())
	c.Add(activity.Delivery, "crm", "dead", "")
	require.Error(t, c.Flush(ctx, 0))
	c.Add(activity.Delivery, "crm", "dead", "")
	require.NoError(t, c.Flush(ctx, 0), "the kept count and the new one")
	var nilCounter *activity.Counter
	nilCounter.Add(activity.Delivery, "crm", "dead", "") // counts nothing, panics not
	counts, _, err := db.ActivitySince(ctx, time.Hour)
	require.NoError(t, err)
	require.Len(t, counts, 1)
	require.EqualValues(t, 2, counts[0].N)
}
