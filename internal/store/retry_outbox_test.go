package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/stretchr/testify/require"
)

// retryRow is a retry copy waiting in the outbox.
type retryRow struct {
	route   string
	gen     int64
	attempt int
	retryMS int64
	first   time.Time
}

func retryRows(t *testing.T, db *store.DB, id uuid.UUID) []retryRow {
	t.Helper()
	rows, err := db.Pool().Query(context.Background(), `
		SELECT route, gen, attempt, retry_ms, first_attempt_at FROM outbox
		WHERE event_id = $1 AND retry_ms IS NOT NULL ORDER BY id`, id)
	require.NoError(t, err)
	defer rows.Close()
	var out []retryRow
	for rows.Next() {
		var r retryRow
		require.NoError(t, rows.Scan(&r.route, &r.gen, &r.attempt, &r.retryMS, &r.first))
		r.first = r.first.UTC()
		out = append(out, r)
	}
	require.NoError(t, rows.Err())
	return out
}

// Issue 25: a failed attempt's retry copy commits with its record, in the
// outbox, for the tier of its delay and the series' next attempt; the
// single and the grouped statement alike. A success, a lost lease and a
// pair a replay moved on put nothing there. The relay reads the copy back
// as a retry copy of its route.
func TestRecordPutsTheRetryCopyInTheOutbox(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	claim := func(id uuid.UUID, attempt int) *store.DeliveryLease {
		l, err := db.DeliveryClaim(ctx, uuid.New(), id, "billing", attempt, 0, time.Minute)
		require.NoError(t, err)
		return l
	}
	series := time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC)
	attempt := func(id uuid.UUID, number, status int, outcome webhook.DeliveryState) *webhook.Attempt {
		a := &webhook.Attempt{EventID: id, Route: "billing", Number: number, StartedAt: time.Now(), Status: status, Outcome: outcome}
		if outcome == webhook.StateRetrying {
			a.RetryIn = 90 * time.Second
			a.FirstAttemptAt = series
		}
		return a
	}

	t.Run("alone", func(t *testing.T) {
		failing, ok := insertBilling(t, db, "ro_fail"), insertBilling(t, db, "ro_ok")
		gen, current, err := claim(failing, 3).Record(ctx, attempt(failing, 3, 503, webhook.StateRetrying))
		require.NoError(t, err)
		require.True(t, current)
		require.EqualValues(t, 1, gen)
		require.Equal(t, []retryRow{{route: "billing", gen: 1, attempt: 4, retryMS: 90_000, first: series}}, retryRows(t, db, failing))
		_, _, err = claim(ok, 1).Record(ctx, attempt(ok, 1, 200, webhook.StateDelivered))
		require.NoError(t, err)
		require.Empty(t, retryRows(t, db, ok))

		// A first attempt starts its series: the copy carries its start.
		first := insertBilling(t, db, "ro_first")
		a := attempt(first, 1, 500, webhook.StateRetrying)
		a.FirstAttemptAt = time.Time{}
		_, _, err = claim(first, 1).Record(ctx, a)
		require.NoError(t, err)
		rows := retryRows(t, db, first)
		require.Len(t, rows, 1)
		require.WithinDuration(t, a.StartedAt, rows[0].first, time.Millisecond)
	})

	t.Run("grouped", func(t *testing.T) {
		failing, ok, lost, moved := insertBilling(t, db, "rg_fail"), insertBilling(t, db, "rg_ok"), insertBilling(t, db, "rg_lost"), insertBilling(t, db, "rg_moved")
		lFail, lOK, lLost, lMoved := claim(failing, 2), claim(ok, 1), claim(lost, 1), claim(moved, 1)
		expireLease(t, db, lost)
		claim(lost, 1) // taken over: lLost is lost
		_, err := db.Pool().Exec(ctx, `UPDATE deliveries SET gen = gen + 1 WHERE event_id = $1`, moved)
		require.NoError(t, err)
		res, err := db.RecordTogether(ctx, []*store.DeliveryLease{lFail, lOK, lLost, lMoved}, []*webhook.Attempt{
			attempt(failing, 2, 503, webhook.StateRetrying),
			attempt(ok, 1, 200, webhook.StateDelivered),
			attempt(lost, 1, 503, webhook.StateRetrying),
			attempt(moved, 1, 503, webhook.StateRetrying),
		})
		require.NoError(t, err)
		for i, r := range res {
			require.False(t, r.Alone, "record %d settled by the grouped statement", i)
		}
		require.Equal(t, []retryRow{{route: "billing", gen: 1, attempt: 3, retryMS: 90_000, first: series}}, retryRows(t, db, failing))
		require.Empty(t, retryRows(t, db, ok), "a success has no retry")
		require.ErrorIs(t, res[2].Err, webhook.ErrLeaseLost)
		require.Empty(t, retryRows(t, db, lost), "a lost lease changes nothing of the pair")
		require.Empty(t, retryRows(t, db, moved), "the replay's copy owns what comes next")
	})

	t.Run("the relay reads a retry copy", func(t *testing.T) {
		id := insertBilling(t, db, "ro_relay")
		_, err := db.Pool().Exec(ctx, `DELETE FROM outbox WHERE event_id <> $1`, id)
		require.NoError(t, err)
		_, _, err = claim(id, 1).Record(ctx, attempt(id, 1, 503, webhook.StateRetrying))
		require.NoError(t, err)
		batch, err := db.OutboxClaim(ctx, 10)
		require.NoError(t, err)
		defer func() { require.NoError(t, batch.Release(ctx)) }()
		var retry *webhook.Message
		for _, m := range batch.Messages() {
			if m.Route != "" {
				retry = &m
			}
		}
		require.NotNil(t, retry, "the retry copy is claimed with the event's first copy")
		require.Equal(t, "billing", retry.Route)
		require.EqualValues(t, 1, retry.Gen)
		require.Equal(t, 2, retry.Attempt)
		require.Equal(t, 90*time.Second, retry.RetryIn)
		require.True(t, series.Equal(retry.FirstAttemptAt))
		require.Equal(t, "acme.invoice.paid", retry.RoutingKey)
	})
}

// insertLost stores an event with a pending billing pair whose copy is
// lost: nothing in the outbox, due an hour ago.
func insertLost(t *testing.T, db *store.DB, key string) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	id := insertBilling(t, db, key)
	_, err := db.Pool().Exec(ctx, `DELETE FROM outbox WHERE event_id = $1`, id)
	require.NoError(t, err)
	_, err = db.Pool().Exec(ctx, `UPDATE deliveries SET due_at = now() - interval '1 hour' WHERE event_id = $1`, id)
	require.NoError(t, err)
	return id
}

// Issue 18, item 2: the reconciler leaves alone a route whose deliveries
// are held (in a dispatcher's hand, their pairs unclaimed): paused, its
// circuit not closed, or marked held for its rate limit or a Retry-After
// less than a margin ago.
func TestReconcileSkipsHeldRoutes(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	insertLost(t, db, "evt_held")
	require.NoError(t, db.RouteStateEnsure(ctx, []string{"billing"}))
	set := func(sql string) {
		t.Helper()
		_, err := db.Pool().Exec(ctx, `UPDATE route_state SET paused = false, circuit = 'closed', held_until = NULL, slow_until = NULL WHERE route = 'billing'`)
		require.NoError(t, err)
		if sql != "" {
			_, err = db.Pool().Exec(ctx, `UPDATE route_state SET `+sql+` WHERE route = 'billing'`)
			require.NoError(t, err)
		}
	}
	for _, held := range []string{
		"paused = true",
		"circuit = 'open'",
		"circuit = 'half_open'",
		"held_until = now() + interval '5 seconds'",
		"held_until = now() - interval '30 seconds'", // within the margin
		"slow_until = now() - interval '30 seconds'",
	} {
		set(held)
		rec, err := db.DeliveryReconcile(ctx, "billing", time.Minute, 10, nil)
		require.NoError(t, err)
		require.Empty(t, rec, held)
	}
	set("")
	require.NoError(t, db.RouteHold(ctx, "billing", 3*time.Second))
	rec, err := db.DeliveryReconcile(ctx, "billing", time.Minute, 10, nil)
	require.NoError(t, err)
	require.Empty(t, rec, "RouteHold marks the route held")

	set("held_until = now() - interval '2 minutes'")
	rec, err = db.DeliveryReconcile(ctx, "billing", time.Minute, 10, nil)
	require.NoError(t, err)
	require.Len(t, rec, 1, "a hold over for longer than the margin")
}

// The reconciler's last word: a re-send commits only if commit, asked
// after the statement ran, agrees (deliver.Reconciler refuses when the
// statement came back late). Refused, nothing of it is left: the pair keeps
// its generation and due time, no copy is in the outbox, no repair is
// counted; and the refusal is the call's error.
func TestReconcileRollsBackWhenCommitRefuses(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	id := insertLost(t, db, "evt_reconcile_refused")
	pair := func() (gen int64, reconciled int, outbox int) {
		t.Helper()
		require.NoError(t, db.Pool().QueryRow(ctx, `SELECT d.gen, d.reconciled, (SELECT count(*) FROM outbox o WHERE o.event_id = d.event_id)
			FROM deliveries d WHERE d.event_id = $1`, id).Scan(&gen, &reconciled, &outbox))
		return gen, reconciled, outbox
	}
	refused := errors.New("too late")
	asked := 0
	rec, err := db.DeliveryReconcile(ctx, "billing", time.Minute, 10, func() error { asked++; return refused })
	require.ErrorIs(t, err, refused)
	require.Nil(t, rec)
	require.Equal(t, 1, asked)
	gen, reconciled, outbox := pair()
	require.Zero(t, gen)
	require.Zero(t, reconciled)
	require.Zero(t, outbox)

	rec, err = db.DeliveryReconcile(ctx, "billing", time.Minute, 10, func() error { asked++; return nil })
	require.NoError(t, err)
	require.Len(t, rec, 1)
	require.Equal(t, 2, asked)
	gen, reconciled, outbox = pair()
	require.EqualValues(t, 1, gen)
	require.Equal(t, 1, reconciled)
	require.Equal(t, 1, outbox)

	_, err = db.DeliveryReconcile(ctx, "billing", time.Minute, 10, func() error { asked++; return refused })
	require.NoError(t, err, "nothing found: commit is not asked")
	require.Equal(t, 2, asked)
}

// Fault suite on a slow day (2026-12-01): a retry copy that waited in the
// outbox longer than the reconcile margin reached its tier late, and the
// reconciler took the pair for lost while its copy waited there. The
// publish of a retry copy moves the pair's due time to the publish plus
// the tier's delay; a plain copy's publish leaves it alone.
func TestRetryPublishMovesTheDueTime(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	id := insertBilling(t, db, "evt_late_retry")
	lease, err := db.DeliveryClaim(ctx, uuid.New(), id, "billing", 1, 0, time.Minute)
	require.NoError(t, err)
	require.NotNil(t, lease)
	_, _, err = lease.Record(ctx, &webhook.Attempt{EventID: id, Route: "billing", Number: 1, StartedAt: time.Now(), Status: 503, Outcome: webhook.StateRetrying, RetryIn: 90 * time.Second})
	require.NoError(t, err)
	// The copy waited in the outbox: its pair is long past due by the
	// record's reckoning.
	_, err = db.Pool().Exec(ctx, `UPDATE deliveries SET due_at = now() - interval '1 hour' WHERE event_id = $1`, id)
	require.NoError(t, err)
	require.Len(t, retryRows(t, db, id), 1)

	batch, err := db.OutboxClaim(ctx, 100)
	require.NoError(t, err)
	var retryID int64
	var others []int64
	for _, m := range batch.Messages() {
		if m.EventID == id && m.RetryIn > 0 {
			require.Equal(t, 90*time.Second, m.RetryIn)
			retryID = m.OutboxID
		} else {
			others = append(others, m.OutboxID)
		}
	}
	require.NotZero(t, retryID, "the retry copy is claimed")
	published := time.Now()
	require.NoError(t, batch.Complete(ctx, append(others, retryID), nil))
	require.Empty(t, retryRows(t, db, id))

	var due time.Time
	require.NoError(t, db.Pool().QueryRow(ctx, `SELECT due_at FROM deliveries WHERE event_id = $1`, id).Scan(&due))
	require.WithinDuration(t, published.Add(90*time.Second), due, 5*time.Second, "due when its tier lets the copy go")
	rec, err := db.DeliveryReconcile(ctx, "billing", time.Second, 10, nil)
	require.NoError(t, err)
	require.Empty(t, rec, "a copy waiting in its tier is not lost")

	// A plain copy's publish leaves the due time as it was.
	plain := insertBilling(t, db, "evt_plain")
	_, err = db.Pool().Exec(ctx, `UPDATE deliveries SET due_at = now() - interval '1 hour' WHERE event_id = $1`, plain)
	require.NoError(t, err)
	publishAll(t, db)
	require.NoError(t, db.Pool().QueryRow(ctx, `SELECT due_at FROM deliveries WHERE event_id = $1`, plain).Scan(&due))
	require.True(t, due.Before(time.Now().Add(-50*time.Minute)), "due_at %s", due)
}

// publishAll claims every due outbox row and completes them all as
// confirmed, as a publisher does after the broker took them.
func publishAll(t *testing.T, db *store.DB) {
	t.Helper()
	batch, err := db.OutboxClaim(context.Background(), 100)
	require.NoError(t, err)
	var ids []int64
	for _, m := range batch.Messages() {
		ids = append(ids, m.OutboxID)
	}
	require.NotEmpty(t, ids)
	require.NoError(t, batch.Complete(context.Background(), ids, nil))
}

// Fault suite (2026-12-05, a receiver killed): the events whose direct
// publish died with their receiver were swept from the outbox after the
// hold, each copy overdue by the whole reconcile margin on arrival, and
// the reconciler sent two again while a dispatcher was taking them. A
// plain copy published late is due from its publish; one published on
// time leaves its pair alone (TestRetryPublishMovesTheDueTime).
func TestLatePublishMovesTheDueTime(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	late := insertBilling(t, db, "evt_swept_late")
	_, err := db.Pool().Exec(ctx, `UPDATE deliveries SET due_at = now() - interval '1 hour' WHERE event_id = $1`, late)
	require.NoError(t, err)
	_, err = db.Pool().Exec(ctx, `UPDATE outbox SET created_at = now() - interval '1 hour' WHERE event_id = $1`, late)
	require.NoError(t, err)
	rec, err := db.DeliveryReconcile(ctx, "billing", time.Minute, 10, nil)
	require.NoError(t, err)
	require.Empty(t, rec, "a pair whose copy is still in the outbox is not lost")

	published := time.Now()
	publishAll(t, db)
	var due time.Time
	require.NoError(t, db.Pool().QueryRow(ctx, `SELECT due_at FROM deliveries WHERE event_id = $1`, late).Scan(&due))
	require.WithinDuration(t, published, due, 5*time.Second, "due from its publish")
	rec, err = db.DeliveryReconcile(ctx, "billing", time.Minute, 10, nil)
	require.NoError(t, err)
	require.Empty(t, rec, "a copy that has just arrived is not lost")

	// A delivered pair stays as it was.
	_, err = db.Pool().Exec(ctx, `UPDATE deliveries SET state = 'delivered', due_at = now() - interval '1 hour' WHERE event_id = $1`, late)
	require.NoError(t, err)
	_, err = db.Pool().Exec(ctx, `INSERT INTO outbox (event_id, routing_key, created_at) VALUES ($1, 'stripe.invoice.paid', now() - interval '1 hour')`, late)
	require.NoError(t, err)
	publishAll(t, db)
	require.NoError(t, db.Pool().QueryRow(ctx, `SELECT due_at FROM deliveries WHERE event_id = $1`, late).Scan(&due))
	require.True(t, due.Before(time.Now().Add(-50*time.Minute)), "due_at %s", due)
	var left int
	require.NoError(t, db.Pool().QueryRow(ctx, `SELECT count(*) FROM outbox WHERE event_id = $1`, late).Scan(&left))
	require.Zero(t, left, "the published row is deleted")
}
