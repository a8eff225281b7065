package store

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// opsTimeout bounds each operator call (a listing, a count, a replay page
// or batch, a purge batch). They may scan more than the relay's own calls,
// so they get longer than the query timeout; but a connection that stops
// answering must fail a CLI command or an admin request, not hang it.
const opsTimeout = time.Minute

func (db *DB) boundOps(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, max(opsTimeout, db.queryTimeout))
}

// EventFilter selects events for listing and replay. Zero fields do not
// filter. State and Route select events that have a delivery in that state
// and/or to that route.
type EventFilter struct {
	Source    string
	EventType string
	State     string
	Route     string
	Since     time.Time
	Until     time.Time
	Limit     int
	// Before pages a listing (newest first): only events before this
	// cursor (the last event of the page before). Replay ignores it.
	Before ReplayCursor
	// Key selects the events whose idempotency key (the sender's own
	// event id: evt_1Q…) is Key, of any source (or Source). Listings
	// and counts take it; a replay refuses it (ErrKeyFilter).
	Key string
	// Search selects by the body too (a --where expression); it needs
	// Since (ErrSearchWindow).
	Search *Search
}

// ErrKeyFilter refuses a key filter where a selection cannot take one.
var ErrKeyFilter = errors.New("a filter by the sender's id (key) lists events; it does not select a replay: replay the event by its id")

// The row types below are what the store, the operator service, the CLI
// (--json) and the admin API all show: one set of types, their JSON names
// a contract scripts parse (a field's name, type and place do not change).

// DeliverySummary is one route's delivery state of an event.
type DeliverySummary struct {
	Route         string     `json:"route"`
	State         string     `json:"state"`
	Attempts      int        `json:"attempts"`
	LastStatus    *int       `json:"last_status,omitempty"`
	LastError     *string    `json:"last_error,omitempty"`
	LastAttemptAt *time.Time `json:"last_attempt_at,omitempty"`
	// Unserved marks a route that is not in the config: no dispatcher
	// delivers it (set by the operator service, which knows the config).
	Unserved bool `json:"unserved,omitempty"`
}

// EventSummary is an event in a listing.
type EventSummary struct {
	ID             uuid.UUID         `json:"id"`
	Source         string            `json:"source"`
	EventType      string            `json:"event_type"`
	IdempotencyKey string            `json:"idempotency_key"`
	ReceivedAt     time.Time         `json:"received_at"`
	Purged         bool              `json:"purged,omitempty"`
	Deliveries     []DeliverySummary `json:"deliveries"`
}

const eventFilterSQL = `
	($1 = '' OR e.source = $1)
	AND ($2 = '' OR e.event_type = $2)
	AND ($3::timestamptz IS NULL OR e.received_at >= $3)
	AND ($4::timestamptz IS NULL OR e.received_at < $4)
	AND (($5 = '' AND $6 = '') OR EXISTS (
		SELECT 1 FROM deliveries f
		WHERE f.event_id = e.id AND ($5 = '' OR f.state = $5) AND ($6 = '' OR f.route = $6)))`

func filterArgs(f EventFilter) []any {
	var since, until *time.Time
	if !f.Since.IsZero() {
		since = &f.Since
	}
	if !f.Until.IsZero() {
		until = &f.Until
	}
	return []any{f.Source, f.EventType, since, until, f.State, f.Route}
}

func cursorTime(c ReplayCursor) *time.Time {
	if c.ReceivedAt.IsZero() {
		return nil
	}
	return &c.ReceivedAt
}

// EventList returns events matching f, newest first, with their deliveries.
// Limit defaults to 100.
func (db *DB) EventList(ctx context.Context, f EventFilter) ([]EventSummary, error) {
	ctx, cancel := db.boundOps(ctx)
	defer cancel()
	if f.Limit <= 0 {
		f.Limit = 100
	}
	if f.Search != nil {
		keys, _, err := db.searchKeys(ctx, f, f.Before, true, f.Limit)
		if err != nil {
			return nil, err
		}
		return db.eventsByKeys(ctx, keys)
	}
	args := append(filterArgs(f), f.Limit, cursorTime(f.Before), pgUUID(f.Before.ID))
	keyed := ""
	if f.Key != "" {
		keyed, args = `
		  AND e.id IN (`+keyedIDsSQL("$10")+`)`, append(args, f.Key)
	}
	rows, err := db.pool.Query(ctx, eventSummarySQL+`
		WHERE `+eventFilterSQL+`
		  AND ($8::timestamptz IS NULL OR (e.received_at, e.id) < ($8, $9::uuid))`+keyed+`
		ORDER BY e.received_at DESC, e.id DESC
		LIMIT $7`, args...)
	if err != nil {
		return nil, fmt.Errorf("listing events: %w", err)
	}
	return collectSummaries(rows)
}

// eventSummarySQL selects events as EventSummary rows (collectSummaries
// reads them); a WHERE and ORDER BY follow.
const eventSummarySQL = `
		SELECT e.id, e.source, e.event_type, e.idempotency_key, e.received_at, e.purged_at IS NOT NULL,
			COALESCE((
				-- Keys are DeliverySummary's JSON names: pgx decodes the
				-- JSON into it.
				SELECT json_agg(json_build_object(
					'route', d.route, 'state', d.state, 'attempts', d.attempts,
					'last_status', d.last_status, 'last_error', d.last_error,
					'last_attempt_at', d.last_attempt_at) ORDER BY d.route)
				FROM deliveries d WHERE d.event_id = e.id), '[]')
		FROM events e`

func collectSummaries(rows pgx.Rows) ([]EventSummary, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (EventSummary, error) {
		var s EventSummary
		err := row.Scan(&s.ID, &s.Source, &s.EventType, &s.IdempotencyKey, &s.ReceivedAt, &s.Purged, &s.Deliveries)
		return s, err
	})
}

// EventsByKey returns up to limit events whose idempotency key (a
// sender's event id: evt_1Q…) is key, of any source, newest first, among
// those ctx's team sees (hookrelay_event_ids_by_key, migration 25: it
// walks the sources through event_keys' primary key, which no team
// reads, so no second index costs every ingest a write). An event
// purged since (its key kept for the dedupe window) is not listed.
func (db *DB) EventsByKey(ctx context.Context, key string, limit int) ([]EventSummary, error) {
	ctx, cancel := db.boundOps(ctx)
	defer cancel()
	rows, err := db.pool.Query(ctx, eventSummarySQL+`
		WHERE e.id IN (`+keyedIDsSQL("$1")+`)
		ORDER BY e.received_at DESC, e.id DESC
		LIMIT $2`, key, max(limit, 1))
	if err != nil {
		return nil, fmt.Errorf("finding events by key: %w", err)
	}
	events, err := collectSummaries(rows)
	if err != nil {
		return nil, fmt.Errorf("finding events by key: %w", err)
	}
	return events, nil
}

// keyedIDsSQL selects the ids of the events whose idempotency key is the
// parameter param, of any source, that ctx's team sees: the function of
// migration 25, which walks the sources through event_keys' primary key
// (a loose index scan; Postgres 15 has no skip scan) with every team's
// reach for that one call, then reads the ids found from events under the
// caller's row-level security.
func keyedIDsSQL(param string) string {
	return `SELECT hookrelay_event_ids_by_key(` + param + `)`
}

// EventCountByFilter counts the events f selects, ignoring its limit: what
// a listing that stopped at its limit reports as the total. It stops
// counting at upTo (0: never), so a listing of a million events does not
// read them all to say so: a result of upTo means "at least".
func (db *DB) EventCountByFilter(ctx context.Context, f EventFilter, upTo int64) (int64, error) {
	ctx, cancel := db.boundOps(ctx)
	defer cancel()
	if f.Search != nil {
		return db.searchCount(ctx, f, ReplayCursor{}, upTo)
	}
	var n int64
	var limit *int64
	if upTo > 0 {
		limit = &upTo
	}
	args, keyed := append(filterArgs(f), limit), ""
	if f.Key != "" {
		keyed, args = ` AND e.id IN (`+keyedIDsSQL("$8")+`)`, append(args, f.Key)
	}
	if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM events e WHERE `+eventFilterSQL+keyed+` LIMIT $7) s`,
		args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting events: %w", err)
	}
	return n, nil
}

// AttemptRow is one stored HTTP attempt.
type AttemptRow struct {
	// Attempt is its number within its series (a replay or a requeued
	// dead letter starts a new series at 1).
	Attempt         int         `json:"attempt"`
	Series          int         `json:"series"`
	StartedAt       time.Time   `json:"started_at"`
	DurationMS      int         `json:"duration_ms"`
	Status          *int        `json:"status,omitempty"`
	ResponseHeaders http.Header `json:"response_headers,omitempty"`
	ResponseBody    string      `json:"response_body,omitempty"`
	Error           *string     `json:"error,omitempty"`
	Outcome         string      `json:"outcome"`
	// TraceID is the trace the attempt was made in, when tracing; a
	// replay's differs from its event's. TraceLink is its link in the
	// tracing UI (tracing.link_template), set by the operator service.
	TraceID   string `json:"trace_id,omitempty"`
	TraceLink string `json:"trace_link,omitempty"`
	// RouteVersion is the version of the run-time route that shaped the
	// attempt's request (its filter and transformation); absent for a
	// route of config.yaml.
	RouteVersion *int64 `json:"route_version,omitempty"`
}

// DeliveryDetail is one route's delivery with every attempt.
type DeliveryDetail struct {
	DeliverySummary
	FirstAttemptAt *time.Time `json:"first_attempt_at,omitempty"`
	DeliveredAt    *time.Time `json:"delivered_at,omitempty"`
	// Series is the pair's current attempt series: 1, and one more for
	// each replay or requeued dead letter.
	Series int `json:"series"`
	// DueAt is when the pair's current copy is due at a dispatcher: for a
	// retrying pair, when its retry tier gives it back.
	DueAt time.Time `json:"-"`
	// NextAttempt and NextAttemptAt say, for a retrying pair, which
	// attempt of the series comes next and when its retry tier gives it
	// back (`hookrelay retry` brings it forward); set by the operator
	// service.
	NextAttempt   int          `json:"next_attempt,omitempty"`
	NextAttemptAt *time.Time   `json:"next_attempt_at,omitempty"`
	AttemptRows   []AttemptRow `json:"attempts_detail"`
}

// EventDetail is an event, its deliveries and their attempts.
type EventDetail struct {
	ID             uuid.UUID        `json:"id"`
	Source         string           `json:"source"`
	EventType      string           `json:"event_type"`
	IdempotencyKey string           `json:"idempotency_key"`
	ContentType    string           `json:"content_type"`
	ReceivedAt     time.Time        `json:"received_at"`
	Headers        http.Header      `json:"headers"`
	Body           string           `json:"body"`
	Purged         bool             `json:"purged,omitempty"`
	Deliveries     []DeliveryDetail `json:"deliveries"`

	// OrderingResource and OrderingVersion are what the stale check of a
	// drop_stale route compares (the source's ordering), absent when none.
	OrderingResource string `json:"ordering_resource,omitempty"`
	OrderingVersion  string `json:"ordering_version,omitempty"`

	// TraceID is the event's trace (tracing), from its receipt on;
	// TraceLink its link in the tracing UI, set by the operator service.
	TraceID   string `json:"trace_id,omitempty"`
	TraceLink string `json:"trace_link,omitempty"`
}

// EventShow returns one event with its deliveries and attempts, or
// ErrNotFound.
func (db *DB) EventShow(ctx context.Context, id uuid.UUID) (*EventDetail, error) {
	ctx, cancel := db.boundOps(ctx)
	defer cancel()
	var ev EventDetail
	var body []byte
	err := db.pool.QueryRow(ctx, `
		SELECT id, source, event_type, idempotency_key, content_type, received_at, headers, body, purged_at IS NOT NULL,
			COALESCE(ordering_resource, ''), COALESCE(ordering_version, ''), COALESCE(substr(trace_parent, 4, 32), '')
		FROM events WHERE id = $1`, id,
	).Scan(&ev.ID, &ev.Source, &ev.EventType, &ev.IdempotencyKey, &ev.ContentType, &ev.ReceivedAt, &ev.Headers, &body, &ev.Purged,
		&ev.OrderingResource, &ev.OrderingVersion, &ev.TraceID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("reading event: %w", err)
	}
	ev.Body = string(body)
	rows, err := db.pool.Query(ctx, `
		SELECT d.id, d.route, d.state, d.attempts, d.last_status, d.last_error, d.last_attempt_at, d.first_attempt_at, d.delivered_at,
			d.series, d.due_at
		FROM deliveries d WHERE d.event_id = $1 ORDER BY d.route`, id)
	if err != nil {
		return nil, fmt.Errorf("reading deliveries: %w", err)
	}
	ids := map[int64]int{}
	ev.Deliveries, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (DeliveryDetail, error) {
		var d DeliveryDetail
		var did int64
		err := row.Scan(&did, &d.Route, &d.State, &d.Attempts, &d.LastStatus, &d.LastError, &d.LastAttemptAt, &d.FirstAttemptAt, &d.DeliveredAt,
			&d.Series, &d.DueAt)
		ids[did] = len(ids)
		d.AttemptRows = []AttemptRow{}
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading deliveries: %w", err)
	}
	rows, err = db.pool.Query(ctx, `
		SELECT a.delivery_id, a.attempt, a.series, a.started_at, a.duration_ms, a.status, a.response_headers, a.response_body, a.error, a.outcome,
		       COALESCE(a.trace_id, ''), a.route_version
		FROM delivery_attempts a JOIN deliveries d ON d.id = a.delivery_id
		WHERE d.event_id = $1 ORDER BY a.started_at, a.id`, id)
	if err != nil {
		return nil, fmt.Errorf("reading attempts: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var a AttemptRow
		var did int64
		var respBody []byte
		if err := rows.Scan(&did, &a.Attempt, &a.Series, &a.StartedAt, &a.DurationMS, &a.Status, &a.ResponseHeaders, &respBody, &a.Error, &a.Outcome,
			&a.TraceID, &a.RouteVersion); err != nil {
			return nil, fmt.Errorf("reading attempt: %w", err)
		}
		a.ResponseBody = string(respBody)
		if i, ok := ids[did]; ok {
			ev.Deliveries[i].AttemptRows = append(ev.Deliveries[i].AttemptRows, a)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading attempts: %w", err)
	}
	return &ev, nil
}

// PurgeResult counts what Purge removed.
type PurgeResult struct {
	// Events counts the events deleted (their dedupe keys stay until
	// retention.dedupe_window has passed), Days the whole days among them:
	// days whose partitions were dropped.
	Events int64 `json:"events"`
	Days   int64 `json:"days"`
	// Keys counts the dedupe keys deleted: of events purged earlier or now,
	// received before DedupeBefore.
	Keys       int64 `json:"keys"`
	Deliveries int64 `json:"deliveries"`
	// Abandoned counts the deleted deliveries that were pending or
	// retrying on a route no dispatcher serves.
	Abandoned int64 `json:"abandoned"`
	// Versions counts the resources' stored versions deleted with the
	// last event of their resource left whole (see ResourceVersion).
	Versions int64 `json:"versions"`
	// Batches counts the transactions of the row-by-row purge (the events
	// of days that could not be dropped whole).
	Batches int `json:"batches"`
	// KeptUndelivered counts events old enough to purge that were kept
	// because something of them is undelivered: in the outbox, in flight on
	// a served route, or dead (without IncludeDead).
	KeptUndelivered int64 `json:"kept_undelivered"`
}

// PurgeConfig says what Purge removes.
type PurgeConfig struct {
	// OlderThan: events received before it are deleted, with their
	// deliveries and attempts.
	OlderThan time.Time
	// DedupeBefore: the dedupe keys of deleted events received before it
	// are deleted too; until then a resend is still recognised.
	DedupeBefore time.Time
	// Batch is how many events one transaction handles. Default 1000.
	Batch int
	// IncludeDead purges events with dead pairs too. Their dead letters
	// then become event_missing on requeue, so it is off by default.
	IncludeDead bool
	// ServedRoutes are the routes of the config (the purging process's):
	// a dispatcher delivers them. Routes made at run time and not retired
	// are served too, read by each statement that decides what goes (a
	// day under its tables' lock, a batch after its events' locks), so a
	// route made while a long purge runs, and the events replayed to it,
	// are seen. A pair pending or retrying on any other route never
	// clears on its own: it is abandoned and purged with its event. nil
	// means every route is served.
	ServedRoutes []string
	// ProgressFunc, when set, is called after each day dropped and each
	// batch with the counts so far.
	ProgressFunc func(PurgeResult)
}

// servedSQL holds when route d.route is served: $1 names the config's
// routes (NULL: every route is served), and a run-time route is served
// until it retired, as its statement's snapshot sees the routes.
const servedSQL = `($1::text[] IS NULL OR d.route = ANY($1::text[])
	OR EXISTS (SELECT 1 FROM routes r WHERE r.name = d.route AND NOT r.declared AND r.retired_at IS NULL))`

// purgeableSQL holds when nothing of event e must be kept: no outbox row
// (a replay or an unpublished event), no pair in flight on a served route
// (servedSQL), no dead pair unless $2 (include dead).
const purgeableSQL = `
	NOT EXISTS (SELECT 1 FROM outbox o WHERE o.event_id = e.id)
	AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = e.id AND (
		(d.state IN ('pending', 'retrying') AND ` + servedSQL + `)
		OR (d.state = 'dead' AND NOT $2::boolean)))`

// Purge removes the events older than cfg.OlderThan with nothing to keep
// (see purgeableSQL), with their deliveries and attempts, and then the
// dedupe keys of purged events older than cfg.DedupeBefore. A day wholly
// older than cfg.OlderThan with nothing to keep is dropped whole: its
// three partitions (events, deliveries, attempts) go in one statement,
// whatever their size, and leave no dead rows behind. The events of the
// other days (a day with something undelivered, the legacy tables of a
// database from before schema 21, the day of the cut-off) are purged
// row by row, an event at a time and never part of one. A resource with
// no event left whole loses its stored versions (route_resource_versions).
// An event with anything undelivered is kept whole, so a replay or a
// requeued dead letter still finds its body and its deliveries.
//
// Each batch locks its events (FOR UPDATE SKIP LOCKED) and then checks
// them again in a new statement, whose snapshot sees every replay that
// committed before the lock: a replay enqueue locks the event FOR SHARE
// and re-checks it is there, so whichever of the two comes second sees
// the other, and a replay never sends a purged event. A day is checked
// under its tables' lock, for the same reason.
func (db *DB) Purge(ctx context.Context, cfg PurgeConfig) (PurgeResult, error) {
	var res PurgeResult
	if cfg.Batch <= 0 {
		cfg.Batch = 1000
	}
	days, err := db.dayPartitions(ctx)
	if err != nil {
		return res, err
	}
	for _, p := range days {
		if p.day.AddDate(0, 0, 1).After(cfg.OlderThan) {
			break
		}
		dropped, err := db.dropDay(ctx, p, cfg, &res)
		if err != nil {
			return res, err
		}
		if dropped && cfg.ProgressFunc != nil {
			cfg.ProgressFunc(res)
		}
	}
	for {
		var selected int
		bctx, cancel := db.boundOps(ctx)
		err := db.InTx(bctx, func(tx pgx.Tx) error {
			ctx := bctx
			rows, err := tx.Query(ctx, `
				SELECT e.id FROM events e
				WHERE `+purgeSelectSQL+`
				ORDER BY e.received_at
				LIMIT $4
				FOR UPDATE SKIP LOCKED`, cfg.ServedRoutes, cfg.IncludeDead, cfg.OlderThan, cfg.Batch)
			if err != nil {
				return fmt.Errorf("selecting events to purge: %w", err)
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
			if err != nil {
				return fmt.Errorf("selecting events to purge: %w", err)
			}
			selected = len(ids)
			if selected == 0 {
				return nil
			}
			rows, err = tx.Query(ctx, `SELECT e.id FROM events e WHERE e.id = ANY($3) AND `+purgeableSQL,
				cfg.ServedRoutes, cfg.IncludeDead, ids)
			if err != nil {
				return fmt.Errorf("re-checking events to purge: %w", err)
			}
			if ids, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID]); err != nil {
				return fmt.Errorf("re-checking events to purge: %w", err)
			}
			// The resources these events are about, read before they go:
			// a resource with no event left whole loses its versions.
			resSources, resIDs, err := resourcesOf(ctx, tx, `
				SELECT DISTINCT source, ordering_resource FROM events
				WHERE id = ANY($1) AND ordering_resource IS NOT NULL AND purged_at IS NULL`, ids)
			if err != nil {
				return err
			}
			// Attempts, deliveries, events: no foreign key cascades (a day
			// is dropped whole, see 0021), so each goes by hand.
			var deleted, abandoned int64
			err = tx.QueryRow(ctx, `
				WITH gone AS (DELETE FROM deliveries WHERE event_id = ANY($1) RETURNING id, state),
				attempts AS (DELETE FROM delivery_attempts WHERE delivery_id = ANY(ARRAY(SELECT id FROM gone)))
				SELECT count(*), count(*) FILTER (WHERE state IN ('pending', 'retrying')) FROM gone`, ids,
			).Scan(&deleted, &abandoned)
			if err != nil {
				return fmt.Errorf("purging deliveries: %w", err)
			}
			tag, err := tx.Exec(ctx, `DELETE FROM events WHERE id = ANY($1)`, ids)
			if err != nil {
				return fmt.Errorf("purging events: %w", err)
			}
			versions, err := forgetVersions(ctx, tx, resSources, resIDs)
			if err != nil {
				return err
			}
			res.Deliveries += deleted
			res.Abandoned += abandoned
			res.Events += tag.RowsAffected()
			res.Versions += versions
			return nil
		})
		cancel()
		if err != nil {
			return res, err
		}
		res.Batches++
		if cfg.ProgressFunc != nil {
			cfg.ProgressFunc(res)
		}
		if selected < cfg.Batch {
			break
		}
	}
	if res.Keys, err = db.expireKeys(ctx, cfg.DedupeBefore, 10*cfg.Batch); err != nil {
		return res, err
	}
	res.KeptUndelivered, err = db.purgeKept(ctx, cfg)
	return res, err
}

// purgeSelectSQL selects the events a purge takes: old enough ($3), with
// nothing to keep.
const purgeSelectSQL = `e.received_at < $3 AND ` + purgeableSQL

// purgeKept counts the events old enough to purge that are kept because
// something of them is undelivered.
func (db *DB) purgeKept(ctx context.Context, cfg PurgeConfig) (int64, error) {
	ctx, cancel := db.boundOps(ctx)
	defer cancel()
	var n int64
	err := db.pool.QueryRow(ctx, `
		SELECT count(*) FROM events e
		WHERE e.received_at < $3 AND NOT (`+purgeableSQL+`)`,
		cfg.ServedRoutes, cfg.IncludeDead, cfg.OlderThan,
	).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("counting events kept: %w", err)
	}
	return n, nil
}

// PurgeCount counts what Purge would do with cfg now, changing nothing:
// the same selection, counted instead of deleted (a purge's dry run).
// Batches is how many transactions the purge would take if no day could be
// dropped whole. Only a change between the two (a new delivery, an event
// aging past the cut-off) makes the purge's counts differ.
func (db *DB) PurgeCount(ctx context.Context, cfg PurgeConfig) (PurgeResult, error) {
	if cfg.Batch <= 0 {
		cfg.Batch = 1000
	}
	var res PurgeResult
	bctx, cancel := db.boundOps(ctx)
	defer cancel()
	err := db.pool.QueryRow(bctx, `
		WITH c AS (SELECT e.id FROM events e WHERE `+purgeSelectSQL+`)
		SELECT
			(SELECT count(*) FROM c),
			(SELECT count(*) FROM deliveries d JOIN c ON c.id = d.event_id),
			(SELECT count(*) FROM deliveries d JOIN c ON c.id = d.event_id WHERE d.state IN ('pending', 'retrying')),
			(SELECT count(*) FROM event_keys k WHERE k.event_id < $4
			   AND (k.event_id IN (SELECT id FROM c) OR NOT EXISTS (SELECT 1 FROM events e WHERE e.id = k.event_id)))`,
		cfg.ServedRoutes, cfg.IncludeDead, cfg.OlderThan, uuid7Floor(cfg.DedupeBefore),
	).Scan(&res.Events, &res.Deliveries, &res.Abandoned, &res.Keys)
	if err != nil {
		return res, fmt.Errorf("counting what to purge: %w", err)
	}
	// A batch that takes fewer than Batch events is the last.
	res.Batches = int(res.Events/int64(cfg.Batch)) + 1
	res.KeptUndelivered, err = db.purgeKept(ctx, cfg)
	return res, err
}
