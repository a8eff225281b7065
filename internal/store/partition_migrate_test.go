package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// Issue 21: a database of schema 18 holding events, deliveries and
// attempts converts to day partitions in place. Its tables become the
// default partitions with their indexes attached, not rebuilt (the
// conversion's locks are held for no scan or build), every row stays
// readable and deduplicated, its pending pair is delivered, its old events
// are purged, and a receiver of the previous release is refused (503, not
// a silent duplicate).
func TestMigrationPartitionsADatabaseWithData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := emptyDatabase(t)
	require.NoError(t, store.MigrateTo(dbURL, 18))

	old, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer old.Close(ctx)
	now := time.Now()
	delivered := newEventAt("acme", "evt_delivered", now.Add(-48*time.Hour))
	pending := newEventAt("acme", "evt_pending", now.Add(-time.Minute))
	stripped := newEventAt("acme", "evt_stripped", now.Add(-10*24*time.Hour))
	// As the previous release wrote them.
	for _, ev := range []*webhook.Event{delivered, pending, stripped} {
		_, err := old.Exec(ctx, `INSERT INTO events (id, source, idempotency_key, event_type, body, received_at) VALUES ($1, $2, $3, $4, $5, $6)`,
			ev.ID, ev.Source, ev.IdempotencyKey, ev.EventType, ev.Body, ev.ReceivedAt)
		require.NoError(t, err)
	}
	for _, q := range []string{
		`UPDATE events SET body = '', purged_at = now() WHERE id = $3 AND $1::uuid IS NOT NULL AND $2::uuid IS NOT NULL`,
		`INSERT INTO deliveries (event_id, route, state, attempts) VALUES ($1, 'billing', 'delivered', 1), ($2, 'billing', 'pending', 0), ($3, 'billing', 'delivered', 1)`,
		`INSERT INTO delivery_attempts (delivery_id, attempt, started_at, duration_ms, status, outcome)
		 SELECT id, 1, now(), 12, 200, 'delivered' FROM deliveries WHERE event_id IN ($1, $3) AND $2::uuid IS NOT NULL`,
		`INSERT INTO outbox (event_id, routing_key) SELECT $2, 'acme.invoice.paid' WHERE $1::uuid IS NOT NULL AND $3::uuid IS NOT NULL`,
	} {
		_, err = old.Exec(ctx, q, delivered.ID, pending.ID, stripped.ID)
		require.NoError(t, err, q)
	}
	indexes := func(table string) map[uint32]bool {
		rows, err := old.Query(ctx, `SELECT indexrelid::int8 FROM pg_index WHERE indrelid = $1::regclass`, table)
		require.NoError(t, err)
		oids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)
		m := map[uint32]bool{}
		for _, o := range oids {
			m[uint32(o)] = true
		}
		return m
	}
	laterIndexes := map[string][]string{"deliveries": {"deliveries_lane_idx", "deliveries_lane_leased_idx"}, "events": {"events_body_idx"}}
	before := map[string]map[uint32]bool{"events": indexes("events"), "deliveries": indexes("deliveries"), "delivery_attempts": indexes("delivery_attempts")}

	v, err := store.Migrate(ctx, dbURL)
	require.NoError(t, err)
	require.Equal(t, store.LatestVersion(), v)

	// The legacy tables are the default partitions, their indexes the same
	// ones (attached, not built): all of events' but the two unique key
	// indexes event_keys replaced.
	for table, oids := range before {
		var def string
		require.NoError(t, old.QueryRow(ctx, `
			SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
			WHERE i.inhparent = $1::regclass AND pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT'`, table).Scan(&def))
		require.Equal(t, table+"_legacy", def)
		after := indexes(def)
		// Indexes a later migration made on the whole table (0031's
		// lanes, 0032's body search) are built on this partition too: not the
		// partitioning's.
		for _, later := range laterIndexes[table] {
			var oid int64
			require.NoError(t, old.QueryRow(ctx, `
				SELECT i.indexrelid::int8 FROM pg_index i JOIN pg_inherits h ON h.inhrelid = i.indexrelid
				WHERE i.indrelid = $1::regclass AND h.inhparent = $2::regclass`, def, later).Scan(&oid))
			delete(after, uint32(oid))
		}
		for oid := range after {
			require.True(t, oids[oid], "%s: index %d was built by the migration", def, oid)
		}
		dropped := 0
		if table == "events" {
			dropped = 2
		}
		require.Len(t, after, len(oids)-dropped, "%s keeps its indexes", def)
	}
	var cutover uuid.UUID
	require.NoError(t, old.QueryRow(ctx, `SELECT cutover FROM hookrelay_partitioning`).Scan(&cutover))
	day := now.UTC().Truncate(24*time.Hour).AddDate(0, 0, 3)
	require.Equal(t, hexPrefix(day), cutover.String()[:13], "the legacy tables hold ids to the end of the day after tomorrow")

	db, err := store.Open(ctx, store.Config{URL: dbURL, MaxConns: 4, ApplicationName: "hookrelay-test"})
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.RequireSchema(ctx))

	// Every key of the previous schema is a duplicate, stripped ones too.
	for _, ev := range []*webhook.Event{delivered, pending, stripped} {
		id, dup, err := db.EventInsert(ctx, newEvent(ev.Source, ev.IdempotencyKey), nil)
		require.NoError(t, err)
		require.True(t, dup, ev.IdempotencyKey)
		require.Equal(t, ev.ID, id)
	}
	// A new event goes to the legacy table until the cutover, to its day
	// partition after.
	where := func(id uuid.UUID) (table string) {
		require.NoError(t, old.QueryRow(ctx, `SELECT tableoid::regclass::text FROM events WHERE id = $1`, id).Scan(&table))
		return table
	}
	today, _, err := db.EventInsert(ctx, newEvent("acme", "evt_today"), []string{"billing"})
	require.NoError(t, err)
	require.Equal(t, "events_legacy", where(today))
	later := newEventAt("acme", "evt_later", now.AddDate(0, 0, 4))
	made, err := db.EnsurePartitionsFor(ctx, later.ReceivedAt, later.ReceivedAt)
	require.NoError(t, err)
	require.Equal(t, 3, made, "the day's three partitions")
	_, _, err = db.EventInsert(ctx, later, []string{"billing"})
	require.NoError(t, err)
	require.Equal(t, "events_p"+later.ReceivedAt.UTC().Format("20060102"), where(later.ID))

	// The legacy pending pair is claimed and delivered; its attempt has its
	// event's id.
	l, err := db.DeliveryClaim(ctx, uuid.New(), pending.ID, "billing", 1, 0, time.Minute)
	require.NoError(t, err)
	_, _, err = l.Record(ctx, &webhook.Attempt{EventID: pending.ID, Route: "billing", Number: 1, StartedAt: time.Now(), Status: 200, Outcome: webhook.StateDelivered})
	require.NoError(t, err)
	state, attempts, err := db.DeliveryGet(ctx, pending.ID, "billing")
	require.NoError(t, err)
	require.Equal(t, webhook.StateDelivered, state)
	require.Equal(t, 1, attempts)

	// A receiver of the previous release inserts without keyed: refused
	// with an error it answers 503 (not class 22/23, which it answers 400).
	_, err = old.Exec(ctx, `INSERT INTO events (id, source, idempotency_key, event_type, body) VALUES ($1, 'acme', 'evt_old_receiver', 't', 'x')`,
		uuid.Must(uuid.NewV7()))
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "%v", err)
	require.Equal(t, "55000", pgErr.Code)
	// A dispatcher of the previous release records without an event id:
	// accepted, in the legacy table.
	_, err = old.Exec(ctx, `INSERT INTO delivery_attempts (delivery_id, attempt, started_at, duration_ms, outcome)
		SELECT id, 2, now(), 1, 'delivered' FROM deliveries WHERE event_id = $1`, pending.ID)
	require.NoError(t, err)

	// The old events are purged row by row from the legacy tables, with
	// their attempts (no cascade any more); their keys stay.
	res, err := db.Purge(ctx, store.PurgeConfig{OlderThan: now.Add(-24 * time.Hour), DedupeBefore: now.Add(-30 * 24 * time.Hour), ServedRoutes: []string{"billing"}})
	require.NoError(t, err)
	require.EqualValues(t, 2, res.Events, "the delivered one and the stripped one: %+v", res)
	require.EqualValues(t, 2, res.Deliveries)
	var n int
	require.NoError(t, old.QueryRow(ctx, `SELECT count(*) FROM delivery_attempts a JOIN deliveries d ON d.id = a.delivery_id WHERE d.event_id = $1`, delivered.ID).Scan(&n))
	require.Zero(t, n)
	require.NoError(t, old.QueryRow(ctx, `SELECT count(*) FROM delivery_attempts WHERE delivery_id NOT IN (SELECT id FROM deliveries)`).Scan(&n))
	require.Zero(t, n, "no attempt outlives its delivery")
	_, dup, err := db.EventInsert(ctx, newEvent("acme", "evt_delivered"), nil)
	require.NoError(t, err)
	require.True(t, dup, "a purged event's key is kept for the dedupe window")
}

// hexPrefix is the first 13 characters of the UUIDv7 text of t's
// millisecond: its 48-bit time, with the dash.
func hexPrefix(t time.Time) string {
	ms := t.UnixMilli()
	const digits = "0123456789abcdef"
	b := make([]byte, 12)
	for i := 11; i >= 0; i-- {
		b[i] = digits[ms&0xf]
		ms >>= 4
	}
	return string(b[:8]) + "-" + string(b[8:])
}
