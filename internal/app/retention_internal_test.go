package app

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// Issue 38, reliability 3: the relay purges by itself what retention says
// has been kept long enough, one process at a time: delivered events past
// retention.max_age go (their day whole when it can), an event with a
// pending pair on any route stays (nothing is taken as abandoned), an
// event with a dead pair stays until retention.dead_max_age says
// otherwise; each purge that changed something is in the audit log.
func TestRetentionPurgesWhatRetentionSays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := storetest.Open(t)
	now := time.Now()
	days := func(n int) time.Time { return now.AddDate(0, 0, -n) }
	_, err := db.EnsurePartitionsFor(ctx, days(50), now)
	require.NoError(t, err)
	insert := func(key string, at time.Time, route string, outcome webhook.DeliveryState) uuid.UUID {
		ev := &webhook.Event{Source: "acme", IdempotencyKey: key, EventType: "invoice.paid", ContentType: "application/json",
			Body: []byte(`{"id":"` + key + `"}`), ReceivedAt: at}
		ev.ID = uuid.Must(uuid.NewV7())
		ms := uint64(at.UnixMilli())
		for i := range 6 {
			ev.ID[i] = byte(ms >> (40 - 8*i))
		}
		id, _, err := db.EventInsert(ctx, ev, []string{route})
		require.NoError(t, err)
		if outcome != webhook.StatePending {
			_, _, err = db.AttemptRecord(ctx, &webhook.Attempt{EventID: id, Route: route, Number: 1, StartedAt: at, Status: 200, Outcome: outcome})
			require.NoError(t, err)
		}
		return id
	}
	delivered := insert("delivered", days(45), "billing", webhook.StateDelivered)
	dead := insert("dead", days(44), "billing", webhook.StateDead)
	pending := insert("pending", days(44), "gone", webhook.StatePending) // a route no process serves
	young := insert("young", days(2), "billing", webhook.StateDelivered)
	_, err = db.Pool().Exec(ctx, `DELETE FROM outbox`)
	require.NoError(t, err)
	exists := func(id uuid.UUID) bool {
		_, err := db.EventGet(ctx, id)
		if err == store.ErrNotFound {
			return false
		}
		require.NoError(t, err)
		return true
	}
	cfg := config.Retention{DedupeWindow: 30 * 24 * time.Hour, MaxAge: 30 * 24 * time.Hour, Interval: time.Hour}

	// Another process purging now: this one leaves it alone.
	var other bool
	ran, err := db.Alone(ctx, "retention", func(context.Context) error {
		var err error
		other, err = purgeRetention(ctx, db, cfg, now, zerolog.Nop())
		return err
	})
	require.NoError(t, err)
	require.True(t, ran)
	require.False(t, other, "one process purges at a time")
	require.True(t, exists(delivered))

	ran, err = purgeRetention(ctx, db, cfg, now, zerolog.Nop())
	require.NoError(t, err)
	require.True(t, ran)
	require.False(t, exists(delivered), "delivered, past max_age")
	require.True(t, exists(dead), "a dead pair keeps its event without dead_max_age")
	require.True(t, exists(pending), "a pending pair keeps its event, whatever its route")
	require.True(t, exists(young))
	var day bool
	require.NoError(t, db.Pool().QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, "events_p"+days(45).UTC().Format("20060102")).Scan(&day))
	require.False(t, day, "the delivered event's day, dropped whole")

	audit, _, err := db.AuditList(ctx, store.AuditFilter{Actor: retentionActor, Limit: 10})
	require.NoError(t, err)
	require.Len(t, audit, 1)
	require.Equal(t, "purge", audit[0].Action)
	require.Equal(t, store.OutcomeOK, audit[0].Outcome)
	require.Equal(t, map[string]any{"older_than": "30d", "include_dead": false, "scheduled": true}, audit[0].Args)
	require.EqualValues(t, 1, audit[0].Result["events"])
	require.EqualValues(t, 2, audit[0].Result["kept_undelivered"])

	// Nothing more to purge: no audit row.
	_, err = purgeRetention(ctx, db, cfg, now, zerolog.Nop())
	require.NoError(t, err)
	audit, _, err = db.AuditList(ctx, store.AuditFilter{Actor: retentionActor, Limit: 10})
	require.NoError(t, err)
	require.Len(t, audit, 1)

	// dead_max_age: the dead pair's event goes once it is that old.
	cfg.DeadMaxAge = 40 * 24 * time.Hour
	_, err = purgeRetention(ctx, db, cfg, now, zerolog.Nop())
	require.NoError(t, err)
	require.False(t, exists(dead), "dead, past dead_max_age")
	require.True(t, exists(pending), "still pending: never purged by the relay")
	audit, _, err = db.AuditList(ctx, store.AuditFilter{Actor: retentionActor, Limit: 10})
	require.NoError(t, err)
	require.Len(t, audit, 2)
	require.Equal(t, map[string]any{"older_than": "40d", "include_dead": true, "scheduled": true}, audit[0].Args)
}

// A relay whose retention is off says so and purges nothing; an interval
// that is not positive is refused, never a loop without a pause.
func TestKeepRetentionOffAndInvalid(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.NoError(t, keepRetention(ctx, nil, config.Retention{}, zerolog.Nop()))
	require.ErrorContains(t, keepRetention(ctx, nil, config.Retention{MaxAge: time.Hour}, zerolog.Nop()), "retention.interval")
}
