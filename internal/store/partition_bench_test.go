package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
)

// BenchmarkClaimWithDays times a delivery's claim and release (the
// dispatcher's two statements around a POST, on the processes' generic
// plans) with the template's 5 day partitions, then with 400, in one run:
// issue 38 wants the second within 20% of the first. Setting up the 400
// days takes a minute.
//
//	go test -run '^$' -bench ClaimWithDays -benchtime 2000x ./internal/store/
func BenchmarkClaimWithDays(b *testing.B) {
	ctx := context.Background()
	dbURL := storetest.NewDatabase(b)
	db, err := store.Open(ctx, store.Config{URL: dbURL, MaxConns: 8, ApplicationName: "hookrelay-bench", GenericPlans: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(db.Close)
	id, _, err := db.EventInsert(ctx, newEvent("acme", "evt_bench"), []string{"billing"})
	if err != nil {
		b.Fatal(err)
	}
	owner := uuid.New()
	run := func(b *testing.B) {
		for b.Loop() {
			l, err := db.DeliveryClaim(ctx, owner, id, "billing", 1, 0, time.Minute)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("partitions=5", run)
	partitions := func() int {
		var n int
		if err := db.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'deliveries'::regclass`).Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n
	}
	oldest := time.Now().UTC().AddDate(0, 0, -1)
	for n := partitions(); n < 400; n = partitions() {
		first := oldest.AddDate(0, 0, -min(10, 400-n))
		if _, err := db.EnsurePartitionsFor(ctx, first, oldest.AddDate(0, 0, -1)); err != nil {
			b.Fatal(err)
		}
		oldest = first
	}
	n := partitions()
	b.Logf("%d day partitions", n)
	b.Run("partitions=400", run)
}
