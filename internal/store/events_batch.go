package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNoPartition is wrapped when a row's id falls on a day that has no
// partition (a clock far off, or partitions not created for days: see
// EnsurePartitions). Not the sender's fault: answered as Postgres being
// unavailable, and the sender resends.
var ErrNoPartition = errors.New("no partition for the event's day")

// isNoPartition reports whether err is Postgres finding no partition for a
// row: no day partition holds its id and the legacy default partition's
// constraint (ids below the cutover) refuses it.
func isNoPartition(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23514" && strings.HasSuffix(pgErr.ConstraintName, "_legacy_before_cutover")
}

// refused wraps err in a *webhook.RefusedError when it is Postgres
// refusing a row's data.
func refused(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	if isNoPartition(err) {
		return fmt.Errorf("%w: %w", ErrNoPartition, err)
	}
	switch pgErr.Code[:2] {
	case "22", "23", "54":
		return &webhook.RefusedError{Reason: pgErr.Message, Err: err}
	}
	return err
}

// eventColumn is one column of events that an insert writes: its name, the
// Postgres type of its parameter, how to read the column's value of every
// event of a batch as one array (unnest takes one array per column), and
// the expression that turns the parameter into the column's value (the
// name itself unless set with as).
type eventColumn struct {
	name   string
	pgType string
	values func(items []webhook.Insert) any
	expr   string
}

// as sets the expression that computes the column from its parameter,
// which the expression names by the column's name.
func (c eventColumn) as(expr string) eventColumn {
	c.expr = expr
	return c
}

// column builds an eventColumn from the value of one event.
func column[T any](name, pgType string, value func(ev *webhook.Event) T) eventColumn {
	return eventColumn{name: name, pgType: pgType, values: func(items []webhook.Insert) any {
		out := make([]T, len(items))
		for i, it := range items {
			out[i] = value(it.Event)
		}
		return out
	}}
}

// eventColumns is the one list of the columns an event insert writes; a new
// events column is added here and nowhere else.
var eventColumns = []eventColumn{
	column("id", "uuid", func(ev *webhook.Event) [16]byte { return pgUUID(ev.ID) }),
	column("source", "text", func(ev *webhook.Event) string { return ev.Source }),
	column("idempotency_key", "text", func(ev *webhook.Event) string { return ev.IdempotencyKey }),
	column("event_type", "text", func(ev *webhook.Event) string { return ev.EventType }),
	column("content_type", "text", func(ev *webhook.Event) string { return ev.ContentType }),
	// jsonb as its text: one array of jsonb values.
	column("headers", "jsonb", func(ev *webhook.Event) string { return headersJSON(ev.Headers) }),
	column("body", "bytea", func(ev *webhook.Event) []byte { return ev.Body }),
	// NULL (a nil slice) for sources that do not deduplicate on the body.
	column("body_sha256", "bytea", func(ev *webhook.Event) []byte { return ev.BodySHA256 }),
	column("received_at", "timestamptz", func(ev *webhook.Event) time.Time { return ev.ReceivedAt }),
	// "" (no ordering declared, or a field missing) is stored as NULL.
	column("ordering_resource", "text", func(ev *webhook.Event) string { return ev.OrderingResource }).
		as("NULLIF(ordering_resource, '')"),
	column("ordering_version", "text", func(ev *webhook.Event) string { return ev.OrderingVersion }).
		as("NULLIF(ordering_version, '')"),
	column("ordering_version_num", "text", func(ev *webhook.Event) string { return ev.OrderingVersionNum }).
		as("NULLIF(ordering_version_num, '')::numeric"),
	// Always true: the event's keys are in event_keys (migration 0021;
	// leaving it out is what an older receiver's insert does, refused).
	column("keyed", "boolean", func(*webhook.Event) bool { return true }),
	// NULL when tracing was off.
	column("trace_parent", "text", func(ev *webhook.Event) string { return ev.TraceParent }).
		as("NULLIF(trace_parent, '')"),
}

func headersJSON(h http.Header) string {
	if h == nil {
		return "{}"
	}
	b, err := json.Marshal(h)
	if err != nil { // map[string][]string always marshals
		panic(fmt.Sprintf("marshalling headers: %v", err))
	}
	return string(b)
}

// eventInsertSQL is the statement that stores a whole batch, built once
// from eventColumns. Its parameters are one array per event column, then
// the routing keys, then the deliveries as two arrays (the 1-based position
// of the event in the batch, the route), then how many milliseconds the
// outbox rows wait before they are due (HoldOutbox), then each event's
// addressed routes joined with commas ("" for none).
//
// Every event gets its outbox row for the topic exchange; one that filtered
// routes took gets a second, addressed to them: route the first of them,
// cc the rest, generation 0 (the event's first copy), in the same
// statement.
//
// An event's keys go into event_keys first, and only the events whose keys
// went in (not duplicates) are stored, with their outbox rows and
// deliveries: event_keys is unpartitioned, so its unique indexes make
// idempotency exact across the day partitions of events. Keys go in sorted
// by (source, idempotency_key), so two batches that share keys take their
// index entries in the same order and wait for each other instead of
// deadlocking. Outbox rows go in in batch order. The outbox trigger is per
// statement: one NOTIFY for the whole batch.
var eventInsertSQL = func() string {
	var names, exprs, params []string
	for i, c := range eventColumns {
		names = append(names, c.name)
		expr := c.name
		if c.expr != "" {
			expr = c.expr
		}
		exprs = append(exprs, expr)
		params = append(params, fmt.Sprintf("$%d::%s[]", i+1, c.pgType))
	}
	n := len(eventColumns)
	cols := strings.Join(names, ", ")
	return fmt.Sprintf(`
		WITH input AS (
			SELECT * FROM unnest(%s, $%d::text[], $%d::text[]) WITH ORDINALITY AS i(%s, routing_key, addressed, n)
		), keys AS (
			INSERT INTO event_keys (source, idempotency_key, body_sha256, event_id)
			SELECT source, idempotency_key, body_sha256, id FROM input ORDER BY source, idempotency_key
			ON CONFLICT DO NOTHING
			RETURNING event_id
		), ins AS (
			INSERT INTO events (%s)
			SELECT %s FROM input JOIN keys ON keys.event_id = input.id
			RETURNING id
		), ob AS (
			INSERT INTO outbox (event_id, routing_key, next_try_at, route, gen, cc)
			SELECT input.id, input.routing_key, now() + $%d::bigint * interval '1 millisecond', a.route, a.gen, a.cc
			FROM input JOIN ins ON ins.id = input.id
			CROSS JOIN LATERAL (
				SELECT NULL::text AS route, NULL::bigint AS gen, NULL::text[] AS cc, 0 AS k
				UNION ALL
				SELECT r[1], 0, CASE WHEN cardinality(r) > 1 THEN r[2:] END, 1
				FROM string_to_array(NULLIF(input.addressed, ''), ',') AS r
				WHERE r IS NOT NULL
			) a
			ORDER BY input.n, a.k
			RETURNING id, event_id, route IS NOT NULL AS addressed
		), dl AS (
			-- Pending from the moment of acceptance: "which events have not
			-- arrived" has an answer even before a dispatcher saw them.
			-- versioned: whether the delivered trigger has a version to
			-- keep (migration 0030). lane: the event's resource, for
			-- routes that deliver in order (migration 0031).
			INSERT INTO deliveries (event_id, route, versioned, lane)
			SELECT input.id, d.route, input.ordering_resource <> '' AND input.ordering_version <> '',
			       CASE WHEN input.ordering_resource <> '' THEN input.source || ' ' || input.ordering_resource END
			FROM unnest($%d::bigint[], $%d::text[]) AS d(n, route)
			JOIN input ON input.n = d.n
			JOIN ins ON ins.id = input.id
		)
		SELECT event_id, id, addressed FROM ob`,
		strings.Join(params, ", "), n+1, n+5, cols, cols, strings.Join(exprs, ", "), n+4, n+2, n+3)
}()

// EventInsertBatch stores every item (its event, its outbox row and a
// pending delivery per route) in ONE statement, so all of it commits or
// nothing does. An item whose event exists already (same source and
// idempotency key, or same body hash for sources that set BodySHA256, an
// earlier item of the same batch included) writes nothing and is answered
// with the existing event's id, Duplicate true; one matching the key wins
// over one matching only the body. Every ev.ID and ev.ReceivedAt must be set.
//
// A non-nil error means nothing was stored; it wraps
// webhook.ErrRowRefused (a *webhook.RefusedError) when Postgres refused the
// data of some row. Otherwise results holds one entry per item, in order.
//
// Concurrency: ON CONFLICT DO NOTHING without a conflict target checks
// every unique index of event_keys and waits for a concurrent transaction holding the
// same key; the duplicates' ids are read afterwards by a second statement,
// whose new snapshot (READ COMMITTED) sees the rows that transaction or
// this batch committed.
func (db *DB) EventInsertBatch(ctx context.Context, items []webhook.Insert) ([]webhook.Stored, error) {
	if len(items) == 0 {
		return nil, nil
	}
	args := make([]any, 0, len(eventColumns)+3)
	for _, c := range eventColumns {
		args = append(args, c.values(items))
	}
	keys := make([]string, len(items))
	addressed := make([]string, len(items))
	var delivN []int64
	var delivRoute []string
	for i, it := range items {
		keys[i] = it.Event.RoutingKey()
		addressed[i] = strings.Join(it.Addressed, ",")
		for _, r := range it.Routes {
			delivN = append(delivN, int64(i+1))
			delivRoute = append(delivRoute, r)
		}
	}
	args = append(args, keys, delivN, delivRoute, db.outboxHold.Milliseconds(), addressed)

	inserted, err := db.insertEvents(ctx, args, len(items))
	if isDeadlock(err) {
		// Rows go in ordered by (source, idempotency_key), so batches take
		// that index's entries in one order; but a source that dedupes on
		// its body has a second unique index, whose entries two batches
		// can take in crossed order (A's key-sorted rows have hashes H1,
		// H2; B's, H2, H1). Postgres then aborts one of them. Its
		// statement wrote nothing: made again, it waits for the other's
		// commit and finds its duplicates, instead of failing its every
		// request, unrelated senders' included, with a 503.
		inserted, err = db.insertEvents(ctx, args, len(items))
	}
	if errors.Is(err, ErrNoPartition) {
		// Partitions are made ahead (EnsurePartitions, hourly); a day
		// missing means they were not. Make them now and try once more;
		// an id still without a day (a clock days off) fails.
		if perr := db.EnsurePartitions(ctx, time.Now()); perr != nil {
			return nil, errors.Join(err, perr)
		}
		inserted, err = db.insertEvents(ctx, args, len(items))
	}
	if err != nil {
		return nil, err
	}

	results := make([]webhook.Stored, len(items))
	var dups []int
	for i, it := range items {
		if ob, ok := inserted[it.Event.ID]; ok {
			results[i].ID, results[i].OutboxID, results[i].AddressedOutboxID = it.Event.ID, ob.topic, ob.addressed
			continue
		}
		dups = append(dups, i)
	}
	if len(dups) > 0 {
		db.resolveDuplicates(ctx, items, dups, results)
	}
	return results, nil
}

// outboxRows are the outbox rows of one inserted event: its topic row's
// id, and its addressed copy's (0 when none).
type outboxRows struct{ topic, addressed int64 }

// insertEvents runs the batch's statement and returns the ids of the
// events it inserted, each with its outbox rows' ids.
func (db *DB) insertEvents(ctx context.Context, args []any, n int) (map[uuid.UUID]outboxRows, error) {
	rows, err := db.pool.Query(ctx, eventInsertSQL, args...)
	if err != nil {
		return nil, fmt.Errorf("inserting events: %w", refused(err))
	}
	inserted := make(map[uuid.UUID]outboxRows, n)
	for rows.Next() {
		var id [16]byte // not uuid.UUID: see pgUUID
		var ob int64
		var addressed bool
		if err := rows.Scan(&id, &ob, &addressed); err != nil {
			rows.Close()
			return nil, fmt.Errorf("reading inserted events: %w", err)
		}
		r := inserted[id]
		if addressed {
			r.addressed = ob
		} else {
			r.topic = ob
		}
		inserted[id] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("inserting events: %w", refused(err))
	}
	return inserted, nil
}

// isDeadlock reports whether err is Postgres' deadlock_detected.
func isDeadlock(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "40P01"
}

// resolveDuplicates sets the existing event's id on results[i] for every i
// of dups, or its Err when none can be read.
func (db *DB) resolveDuplicates(ctx context.Context, items []webhook.Insert, dups []int, results []webhook.Stored) {
	sources := make([]string, len(dups))
	keys := make([]string, len(dups))
	sums := make([][]byte, len(dups))
	for j, i := range dups {
		ev := items[i].Event
		sources[j], keys[j], sums[j] = ev.Source, ev.IdempotencyKey, ev.BodySHA256
	}
	found := make(map[int64]uuid.UUID, len(dups))
	rows, err := db.pool.Query(ctx, `
		SELECT DISTINCT ON (d.n) d.n, e.event_id
		FROM unnest($1::text[], $2::text[], $3::bytea[]) WITH ORDINALITY AS d(source, key, sha, n)
		JOIN event_keys e ON e.source = d.source AND (e.idempotency_key = d.key OR e.body_sha256 = d.sha)
		ORDER BY d.n, e.idempotency_key = d.key DESC`,
		sources, keys, sums)
	if err == nil {
		for rows.Next() {
			var n int64
			var id uuid.UUID
			if err = rows.Scan(&n, &id); err != nil {
				rows.Close()
				break
			}
			found[n] = id
		}
		if err == nil {
			err = rows.Err()
		}
	}
	for j, i := range dups {
		results[i].Duplicate = true
		id, ok := found[int64(j+1)]
		switch {
		case err != nil:
			results[i].Err = fmt.Errorf("reading duplicate event: %w", err)
		case !ok:
			// Its keys expired between the insert and this read (a purge
			// past retention.dedupe_window).
			results[i].Err = fmt.Errorf("reading duplicate event: %w", ErrNotFound)
		default:
			results[i].ID = id
		}
	}
}
