package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// OutboxChannel is the LISTEN/NOTIFY channel that outbox inserts signal.
const OutboxChannel = "hookrelay_outbox"

// OutboxBatch is a set of claimed outbox rows. The rows stay locked by the
// batch's transaction (other publishers skip them) until Complete or Release.
// If the process dies first, Postgres rolls the transaction back and the rows
// become claimable again: a publish may repeat, it is never lost.
//
// The transaction is driven by hand on a pooled connection so that each
// end of it is one round trip: BEGIN goes with the claim, and the deletes
// and updates go with the COMMIT (a pgx batch: one write, one Sync). At a
// few events a second, each event is a batch of its own, and three round
// trips fewer per event is CPU of every process involved.
type OutboxBatch struct {
	db *DB
	// conn holds the open transaction; nil for an empty batch.
	conn     *pgxpool.Conn
	messages []webhook.Message
}

// OutboxClaim locks up to limit unpublished rows that are due (next_try_at
// reached), oldest first, skipping rows another publisher holds. A row the
// broker refused waits out its backoff without holding back the rows behind
// it. An empty batch has no transaction open.
//
// The rows are claimed first, and their events read in a second statement
// that names the events' days (days.go): read in the claim, through a join,
// the events would be found by a parameter and every day partition locked
// at each claim, rows or none. An empty claim is one round trip, as
// before; a claim with rows takes one more.
func (db *DB) OutboxClaim(ctx context.Context, limit int) (*OutboxBatch, error) {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("claiming outbox batch: %w", err)
	}
	msgs, err := outboxClaim(ctx, conn, limit)
	if err != nil {
		db.endTx(ctx, conn)
		return nil, fmt.Errorf("claiming outbox batch: %w", err)
	}
	if len(msgs) == 0 {
		if err := db.endTx(ctx, conn); err != nil {
			return nil, fmt.Errorf("ending empty outbox claim: %w", err)
		}
		return &OutboxBatch{}, nil
	}
	return &OutboxBatch{db: db, conn: conn, messages: msgs}, nil
}

// outboxClaim begins a transaction on conn, locks up to limit due rows and
// reads their events: OutboxClaim's statements.
func outboxClaim(ctx context.Context, conn *pgxpool.Conn, limit int) ([]webhook.Message, error) {
	batch := &pgx.Batch{}
	batch.Queue(`BEGIN`)
	batch.Queue(`
		SELECT o.id, o.attempts, o.routing_key, COALESCE(o.route, ''), COALESCE(o.gen, 0), COALESCE(o.attempt, 1),
		       COALESCE(o.retry_ms, 0), o.first_attempt_at, o.event_id, COALESCE(o.trace_parent, ''), COALESCE(o.cc, '{}')
		FROM outbox o
		WHERE o.next_try_at <= now()
		ORDER BY o.id
		LIMIT $1
		FOR UPDATE OF o SKIP LOCKED`, limit)
	br := conn.SendBatch(ctx, batch)
	var msgs []webhook.Message
	_, err := br.Exec()
	if err == nil {
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			msgs, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (webhook.Message, error) {
				var (
					m       webhook.Message
					retryMS int64
					first   *time.Time
					eventID [16]byte
				)
				err := row.Scan(&m.OutboxID, &m.OutboxAttempts, &m.RoutingKey, &m.Route, &m.Gen, &m.Attempt,
					&retryMS, &first, &eventID, &m.TraceParent, &m.CC)
				m.EventID = eventID
				m.RetryIn = time.Duration(retryMS) * time.Millisecond
				if first != nil {
					m.FirstAttemptAt = *first
				}
				return m, err
			})
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil || len(msgs) == 0 {
		return nil, err
	}
	ids := make([]uuid.UUID, len(msgs))
	for i, m := range msgs {
		ids[i] = m.EventID
	}
	rows, err := conn.Query(ctx, withDays(`
		SELECT e.id, e.source, e.event_type, e.content_type, e.body, e.received_at, COALESCE(e.trace_parent, '')
		FROM events e WHERE e.id = ANY($1::uuid[]) AND @day(e.id)`, ids...), ids)
	if err != nil {
		return nil, fmt.Errorf("reading the events of outbox rows: %w", err)
	}
	type event struct {
		source, eventType, contentType string
		body                           []byte
		receivedAt                     time.Time
		traceParent                    string
	}
	events := make(map[uuid.UUID]event, len(ids))
	var (
		id [16]byte
		ev event
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &ev.source, &ev.eventType, &ev.contentType, &ev.body, &ev.receivedAt, &ev.traceParent}, func() error {
		events[id] = ev
		return nil
	}); err != nil {
		return nil, fmt.Errorf("reading the events of outbox rows: %w", err)
	}
	// A row whose event is gone is left where it is (locked until the
	// batch ends, then due again), as the join this replaces left it.
	out := msgs[:0]
	for _, m := range msgs {
		ev, ok := events[m.EventID]
		if !ok {
			continue
		}
		m.Source, m.EventType, m.ContentType, m.Body, m.ReceivedAt, m.EventTraceParent =
			ev.source, ev.eventType, ev.contentType, ev.body, ev.receivedAt, ev.traceParent
		out = append(out, m)
	}
	return out, nil
}

// endTx rolls back the transaction open on conn, if any, and gives the
// connection back to the pool. It runs even when ctx is done (the failure
// may be ctx's deadline) but has a deadline of its own. A connection whose
// transaction could not be ended is discarded by the pool, which rolls it
// back on the server.
func (db *DB) endTx(ctx context.Context, conn *pgxpool.Conn) error {
	defer conn.Release()
	if conn.Conn().PgConn().TxStatus() == 'I' {
		return nil
	}
	rctx, cancel := db.bound(context.WithoutCancel(ctx))
	defer cancel()
	_, err := conn.Exec(rctx, `ROLLBACK`)
	return err
}

// Messages returns the claimed rows with their events.
func (b *OutboxBatch) Messages() []webhook.Message { return b.messages }

// Complete deletes the rows whose publish was confirmed, records each
// failure on its row (one more attempt, the reason, the next try after its
// RetryIn), and commits, in one round trip. Rows in neither list are
// released as they were. Nothing is written unless all of it commits.
func (b *OutboxBatch) Complete(ctx context.Context, confirmed []int64, failed []webhook.OutboxFailure) error {
	if b.conn == nil {
		return nil
	}
	ctx, cancel := b.db.bound(ctx)
	defer cancel()
	batch := &pgx.Batch{}
	// A lost completion only publishes its rows again (lax.go): no need
	// to wait for the WAL flush.
	steps := []string{"completing outbox batch"}
	batch.Queue(`SET LOCAL synchronous_commit = off`)
	if len(confirmed) > 0 {
		// A copy is due at a dispatcher when it reaches the broker, and
		// for a retry copy when its tier lets it go: its delay counts from
		// this publish, not from the attempt that scheduled it. A row
		// published late (it waited out a dead receiver's hold, a broker
		// outage, or in the outbox behind others) moves its pairs' due_at
		// to the publish, so the reconciler does not take a copy that has
		// just arrived, or still waits in its tier, for a lost one (fault
		// suite, a receiver killed: its events' copies were swept after the
		// 15 s hold, overdue by the whole margin on arrival, and two were
		// sent again while their dispatcher was taking them). A row
		// published within a second of its insert (the steady state when
		// the direct publish is off) touches no pair: the reconcile margin
		// (at least 15 s) covers that second.
		steps = append(steps, "deleting published outbox rows")
		batch.Queue(withDays(`
			WITH o AS (
				DELETE FROM outbox WHERE id = ANY($1)
				RETURNING event_id, route, cc, gen, retry_ms, created_at
			)
			UPDATE deliveries d SET due_at = greatest(d.due_at, clock_timestamp() + COALESCE(o.retry_ms, 0) * interval '1 millisecond')
			FROM o
			WHERE (o.retry_ms > 0 OR o.created_at < clock_timestamp() - interval '1 second')
			  AND d.event_id = o.event_id AND @day(d.event_id)
			  AND (o.route IS NULL OR d.route = o.route OR d.route = ANY(o.cc))
			  AND (o.gen IS NULL OR d.gen = o.gen)
			  AND d.state IN ('pending', 'retrying')`, b.eventsOf(confirmed)...), confirmed)
	}
	if len(failed) > 0 {
		ids := make([]int64, len(failed))
		reasons := make([]string, len(failed))
		delays := make([]int64, len(failed))
		for i, f := range failed {
			ids[i], reasons[i], delays[i] = f.OutboxID, f.Reason, f.RetryIn.Milliseconds()
		}
		// clock_timestamp(), not now(): now() is when the claim began, and
		// the publish may have taken most of the confirm timeout since.
		steps = append(steps, "recording refused outbox rows")
		batch.Queue(`
			UPDATE outbox o SET
				attempts    = o.attempts + 1,
				next_try_at = clock_timestamp() + f.delay_ms * interval '1 millisecond',
				last_error  = f.reason
			FROM unnest($1::bigint[], $2::text[], $3::bigint[]) AS f(id, reason, delay_ms)
			WHERE o.id = f.id`, ids, reasons, delays)
	}
	steps = append(steps, "committing outbox batch")
	batch.Queue(`COMMIT`)
	br := b.conn.SendBatch(ctx, batch)
	var err error
	for _, step := range steps {
		if _, err = br.Exec(); err != nil {
			err = fmt.Errorf("%s: %w", step, err)
			break
		}
	}
	if cerr := br.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("committing outbox batch: %w", cerr)
	}
	conn := b.conn
	b.conn = nil
	if eerr := b.db.endTx(ctx, conn); err == nil && eerr != nil {
		// COMMIT answered, yet a transaction is still open: nothing is
		// known to be written.
		err = fmt.Errorf("committing outbox batch: %w", eerr)
	}
	return err
}

// eventsOf returns the events of the claimed rows of ids.
func (b *OutboxBatch) eventsOf(ids []int64) []uuid.UUID {
	want := make(map[int64]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	var out []uuid.UUID
	for _, m := range b.messages {
		if want[m.OutboxID] {
			out = append(out, m.EventID)
		}
	}
	return out
}

// Release gives every row back without deleting or counting any.
func (b *OutboxBatch) Release(ctx context.Context) error {
	if b.conn == nil {
		return nil
	}
	conn := b.conn
	b.conn = nil
	if err := b.db.endTx(ctx, conn); err != nil {
		return fmt.Errorf("releasing outbox batch: %w", err)
	}
	return nil
}

// HoldOutbox makes EventInsertBatch write the outbox rows of new events due
// only hold after their commit, for a receiver that publishes them itself
// right after it (outbox.Direct): the rows are then the safety net a
// publisher sweeps only when the direct publish did not confirm and delete
// them in time. The insert then wakes no publisher (migration 0018). Call it
// once, before the first insert; zero (the default) writes them due at once.
func (db *DB) HoldOutbox(hold time.Duration) { db.outboxHold = hold }

// OutboxDeletePublished deletes the outbox rows of ids whose messages a
// direct publish had confirmed, without waiting for the WAL flush: a lost
// delete only publishes its rows again. A row a publisher's claim holds at
// this moment (its hold ran out) is skipped: that publisher deletes it.
func (db *DB) OutboxDeletePublished(ctx context.Context, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	ctx, cancel := db.bound(ctx)
	defer cancel()
	_, err := db.lax.Exec(ctx, `
		DELETE FROM outbox WHERE id IN (
			SELECT id FROM outbox WHERE id = ANY($1) FOR UPDATE SKIP LOCKED
		)`, ids)
	if err != nil {
		return fmt.Errorf("deleting published outbox rows: %w", err)
	}
	return nil
}

// OutboxDueNow makes the outbox rows of ids due at once, for rows whose
// direct publish failed: the publishers' next claim takes them instead of
// waiting out the hold. Rows already counted as refused keep their backoff.
func (db *DB) OutboxDueNow(ctx context.Context, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	ctx, cancel := db.bound(ctx)
	defer cancel()
	_, err := db.lax.Exec(ctx, `
		UPDATE outbox SET next_try_at = now()
		WHERE id = ANY($1) AND attempts = 0 AND next_try_at > now()`, ids)
	if err != nil {
		return fmt.Errorf("releasing outbox rows to the publishers: %w", err)
	}
	return nil
}
