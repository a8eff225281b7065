package main

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/stretchr/testify/require"
)

// bulkDead inserts n events of source acme received an hour ago, each with
// a dead delivery to billing, in one statement.
func bulkDead(t *testing.T, db *store.DB, n int) {
	t.Helper()
	_, err := db.Pool().Exec(context.Background(), `
		WITH ev AS (
			INSERT INTO events (id, source, idempotency_key, event_type, content_type, body, received_at, keyed)
			SELECT hookrelay_uuid7(now() - interval '1 hour' + i * interval '1 millisecond'), 'acme', 'evt_bulk_' || i, 'invoice.paid', 'application/json',
				convert_to('{"id":"evt_bulk_' || i || '"}', 'UTF8'), now() - interval '1 hour' + i * interval '1 millisecond', true
			FROM generate_series(1, $1::int) AS i
			RETURNING id)
		INSERT INTO deliveries (event_id, route, state, attempts) SELECT id, 'billing', 'dead', 4 FROM ev`, n)
	require.NoError(t, err)
}

// drainer stands in for the outbox publisher and the dispatcher: every
// tick it delivers up to perTick pending billing pairs (and drops their
// outbox rows), and it records the most pairs ever pending at once.
type drainer struct {
	maxPending atomic.Int64
	delivered  atomic.Int64
	err        chan error
}

func startDrainer(t *testing.T, db *store.DB, perTick int, tick time.Duration) *drainer {
	t.Helper()
	d := &drainer{err: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		<-stopped
		select {
		case err := <-d.err:
			t.Errorf("drainer: %v", err)
		default:
		}
	})
	go func() {
		defer close(stopped)
		tk := time.NewTicker(tick)
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
			}
			var pending int64
			if err := db.Pool().QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE state = 'pending'`).Scan(&pending); err != nil {
				if ctx.Err() == nil {
					d.err <- err
				}
				return
			}
			if pending > d.maxPending.Load() {
				d.maxPending.Store(pending)
			}
			tag, err := db.Pool().Exec(ctx, `
				WITH done AS (
					UPDATE deliveries SET state = 'delivered', attempts = attempts + 1, delivered_at = now()
					WHERE id IN (SELECT id FROM deliveries WHERE state = 'pending' ORDER BY id LIMIT $1)
					RETURNING event_id)
				DELETE FROM outbox WHERE event_id IN (SELECT event_id FROM done)`, perTick)
			if err != nil {
				if ctx.Err() == nil {
					d.err <- err
				}
				return
			}
			d.delivered.Add(tag.RowsAffected())
		}
	}()
	return d
}

// Issue 8, item 15: the CLI replays a large selection a batch at a time,
// never letting more than a batch (and what is left of the previous one)
// wait ahead of live events, and prints its progress every few seconds.
func TestReplayPacesBatchesAndPrintsProgress(t *testing.T) {
	t.Parallel()
	db, dbURL := storetest.Open(t)
	const n, batch = 3000, 500
	bulkDead(t, db, n)
	path, _ := cliConfig(t, dbURL, "hookrelay")
	// About 600 pairs a second: the replay takes about five seconds.
	d := startDrainer(t, db, 30, 50*time.Millisecond)

	out, progress, err := runCLI(t, path, "replay", "--source", "acme", "--state", "dead", "--route", "billing",
		"--batch", "500", "--list", "5")
	require.NoError(t, err, progress)
	t.Log("\n" + progress + out)
	require.Contains(t, out, "replayed 3000 pair(s)")
	require.Contains(t, out, "skipped 0, of 3000 event(s)")
	require.Contains(t, out, "listed 5 of 3000 replayed and 0 of 0 skipped (--list N for more)")
	lines := strings.Split(strings.TrimSpace(progress), "\n")
	require.GreaterOrEqual(t, len(lines), 2, "a progress line every few seconds")
	require.Regexp(t, `^replay: \d+ of 3000 event\(s\) scanned, \d+ pair\(s\) enqueued, \d+ delivered so far`, lines[0])
	require.LessOrEqual(t, d.maxPending.Load(), int64(batch+batch/10),
		"never more than a batch (and a tenth of the last) waiting ahead of live events")
	require.Eventually(t, func() bool { return d.delivered.Load() == n }, testenv.Scaled(20*time.Second), 20*time.Millisecond)
}

// A replay whose batch nobody takes (no dispatcher) fails loudly after the
// stall timeout, leaves what it enqueued enqueued, and a second run skips
// those as in flight.
func TestReplayStallFailsLoudlyAndKeepsWhatItEnqueued(t *testing.T) {
	t.Parallel()
	db, dbURL := storetest.Open(t)
	bulkDead(t, db, 250)
	path, _ := cliConfig(t, dbURL, "hookrelay")
	args := []string{"replay", "--source", "acme", "--route", "billing", "--batch", "100", "--stall-timeout", "1s"}

	start := time.Now()
	_, progress, err := runCLI(t, path, args...)
	require.Error(t, err)
	require.Less(t, time.Since(start), 10*time.Second)
	require.Contains(t, err.Error(), "replay stalled: 100 of the last batch of 100 pair(s) still pending")
	require.Contains(t, err.Error(), "is a dispatcher consuming the route")
	require.Contains(t, progress, "replay: stopped after 100 pair(s) enqueued")
	var pending, outbox int
	require.NoError(t, db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM deliveries WHERE state = 'pending'`).Scan(&pending))
	require.NoError(t, db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM outbox`).Scan(&outbox))
	require.Equal(t, 100, pending, "what was enqueued stays enqueued")
	require.Equal(t, 100, outbox)

	// Run it again with a dispatcher: the 100 in flight are skipped, the
	// rest replayed.
	startDrainer(t, db, 50, 20*time.Millisecond)
	out, _, err := runCLI(t, path, append(args, "--state", "dead")...)
	require.NoError(t, err)
	require.Contains(t, out, "replayed 150 pair(s)")
	out, _, err = runCLI(t, path, args...)
	require.NoError(t, err)
	require.Contains(t, out, "replayed 0 pair(s), skipped 250")
}
