package store

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DeliveryLock holds the row lock on one (event, route) delivery for the
// length of an HTTP attempt. A second dispatcher that receives a duplicate
// message for the same pair waits on the lock, then sees the outcome: it
// never POSTs while the first is in flight, and never after a delivered
// one. If the process dies, Postgres drops the connection and the lock with
// it, so a redelivered message can proceed at once.
type DeliveryLock struct {
	db    *DB
	tx    pgx.Tx
	id    int64
	state webhook.DeliveryState
	gen   int64
}

// DeliveryLock creates the delivery row if needed and locks it. The call
// has the query timeout; the lock it returns is held, with no deadline,
// until Record or Release. Waiting behind another dispatcher's lock on the
// same pair counts against the timeout: the caller then tries again.
func (db *DB) DeliveryLock(ctx context.Context, eventID uuid.UUID, route string) (*DeliveryLock, error) {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("beginning delivery: %w", err)
	}
	id, state, gen, err := lockDelivery(ctx, tx, eventID, route)
	if err != nil {
		db.rollback(ctx, tx)
		return nil, err
	}
	return &DeliveryLock{db: db, tx: tx, id: id, state: state, gen: gen}, nil
}

func lockDelivery(ctx context.Context, tx pgx.Tx, eventID uuid.UUID, route string) (int64, webhook.DeliveryState, int64, error) {
	if _, err := tx.Exec(ctx, `
		INSERT INTO deliveries (event_id, route) VALUES ($1, $2)
		ON CONFLICT (event_id, route) DO NOTHING`, eventID, route); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23503" {
			// The event row is gone (purged): nothing to record against.
			return 0, "", 0, fmt.Errorf("event %s: %w", eventID, ErrNotFound)
		}
		return 0, "", 0, fmt.Errorf("creating delivery: %w", err)
	}
	var (
		id    int64
		state string
		gen   int64
	)
	err := tx.QueryRow(ctx, `
		SELECT id, state, gen FROM deliveries WHERE event_id = $1 AND route = $2 FOR UPDATE`,
		eventID, route).Scan(&id, &state, &gen)
	if err != nil {
		return 0, "", 0, fmt.Errorf("locking delivery: %w", err)
	}
	return id, webhook.DeliveryState(state), gen, nil
}

// State is the delivery's state when it was locked.
func (l *DeliveryLock) State() webhook.DeliveryState { return l.state }

// Gen is the generation of the pair's current copy: only a message of this
// generation may be delivered.
func (l *DeliveryLock) Gen() int64 { return l.gen }

// Restart starts a new attempt series for a dead pair whose dead letter an
// operator moved back to the route queue: the pair is pending again, in
// its next series, under a new generation (any other copy of the dead
// letter is then stale). It returns the new generation; the lock is still
// held.
func (l *DeliveryLock) Restart(ctx context.Context) (int64, error) {
	ctx, cancel := l.db.bound(ctx)
	defer cancel()
	err := l.tx.QueryRow(ctx, `
		UPDATE deliveries SET state = 'pending', gen = gen + 1, series = series + 1, due_at = now(), updated_at = now()
		WHERE id = $1 RETURNING gen`, l.id).Scan(&l.gen)
	if err != nil {
		l.db.rollback(ctx, l.tx)
		return 0, fmt.Errorf("restarting delivery: %w", err)
	}
	l.state = webhook.StatePending
	return l.gen, nil
}

// Record stores the attempt, moves the delivery to a.Outcome, and commits,
// releasing the lock. It returns the pair's generation afterwards: a
// retrying outcome moves the pair to a new generation, the retry copy's.
func (l *DeliveryLock) Record(ctx context.Context, a *webhook.Attempt) (int64, error) {
	ctx, cancel := l.db.bound(ctx)
	defer cancel()
	gen, _, err := recordAttempt(ctx, l.tx, l.id, a)
	if err != nil {
		l.db.rollback(ctx, l.tx)
		return 0, err
	}
	if err := l.tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("committing attempt: %w", err)
	}
	return gen, nil
}

// Release gives the lock back without recording anything.
func (l *DeliveryLock) Release(ctx context.Context) error {
	ctx, cancel := l.db.bound(ctx)
	defer cancel()
	if err := l.tx.Rollback(ctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return fmt.Errorf("releasing delivery: %w", err)
	}
	return nil
}

// AttemptRecord stores an attempt in a transaction of its own, for when the
// lock's connection was lost during the attempt. The pair's state changes
// only if it is still at a.Gen (nobody else moved it meanwhile); current
// says whether it did, and gen is the pair's generation afterwards.
func (db *DB) AttemptRecord(ctx context.Context, a *webhook.Attempt) (gen int64, current bool, err error) {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	err = db.InTx(ctx, func(tx pgx.Tx) error {
		id, _, _, err := lockDelivery(ctx, tx, a.EventID, a.Route)
		if err != nil {
			return err
		}
		gen, current, err = recordAttempt(ctx, tx, id, a)
		return err
	})
	return gen, current, err
}

// recordAttempt inserts the attempt and, when the pair is still at the
// attempt's generation, moves it to a.Outcome (a retrying outcome to the
// next generation, due when its tier expires). It returns the pair's
// generation afterwards and whether the attempt's copy was current.
func recordAttempt(ctx context.Context, tx pgx.Tx, deliveryID int64, a *webhook.Attempt) (int64, bool, error) {
	var status *int
	if a.Status != 0 {
		status = &a.Status
	}
	var errText *string
	if a.Error != "" {
		errText = &a.Error
	}
	headers := a.ResponseHeaders
	if headers == nil && status != nil {
		headers = http.Header{}
	}
	// The attempt belongs to the pair's current series.
	_, err := tx.Exec(ctx, `
		INSERT INTO delivery_attempts
			(delivery_id, attempt, started_at, duration_ms, status, response_headers, response_body, error, outcome, series)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, (SELECT series FROM deliveries WHERE id = $1))`,
		deliveryID, a.Number, a.StartedAt, a.Duration.Milliseconds(), status, headers, a.ResponseBody, errText, string(a.Outcome))
	if err != nil {
		return 0, false, fmt.Errorf("inserting attempt: %w", err)
	}
	// A delivered pair stays delivered: a late record of a failed duplicate
	// attempt must not make it look undelivered. A copy of another
	// generation (the pair moved on meanwhile) records its attempt, and a
	// success, but changes nothing else.
	var gen int64
	var current bool
	err = tx.QueryRow(ctx, `
		WITH old AS (SELECT gen FROM deliveries WHERE id = $1)
		UPDATE deliveries SET
			state            = CASE WHEN state = 'delivered' THEN 'delivered'
			                        WHEN gen = $6 OR $2 = 'delivered' THEN $2 ELSE state END,
			attempts         = attempts + 1,
			last_status      = $3,
			last_error       = $4,
			first_attempt_at = COALESCE(first_attempt_at, $5),
			last_attempt_at  = $5,
			delivered_at     = CASE WHEN $2 = 'delivered' AND delivered_at IS NULL THEN now() ELSE delivered_at END,
			gen              = CASE WHEN gen = $6 AND $2 = 'retrying' THEN gen + 1 ELSE gen END,
			due_at           = CASE WHEN gen = $6 AND $2 = 'retrying' THEN now() + $7::interval ELSE due_at END,
			updated_at       = now()
		WHERE id = $1
		RETURNING gen, (SELECT gen FROM old) = $6`,
		deliveryID, string(a.Outcome), status, errText, a.StartedAt, a.Gen, a.RetryIn).Scan(&gen, &current)
	if err != nil {
		return 0, false, fmt.Errorf("updating delivery: %w", err)
	}
	return gen, current, nil
}

// DeliveryGet returns the state and attempt count of one pair, or
// ErrNotFound.
func (db *DB) DeliveryGet(ctx context.Context, eventID uuid.UUID, route string) (webhook.DeliveryState, int, error) {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	var (
		state    string
		attempts int
	)
	err := db.pool.QueryRow(ctx, `SELECT state, attempts FROM deliveries WHERE event_id = $1 AND route = $2`,
		eventID, route).Scan(&state, &attempts)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", 0, ErrNotFound
	}
	if err != nil {
		return "", 0, fmt.Errorf("reading delivery: %w", err)
	}
	return webhook.DeliveryState(state), attempts, nil
}

// RouteStats is what Postgres knows of one route's deliveries.
type RouteStats struct {
	Route string
	// Undelivered counts pairs pending or retrying.
	Undelivered int64
	// OldestUndelivered is the age of the oldest such pair.
	OldestUndelivered time.Duration
	// Dead counts pairs in the dead-letter state.
	Dead int64
}

// RouteStatsList reports undelivered and dead pairs per route.
func (db *DB) RouteStatsList(ctx context.Context) ([]RouteStats, error) {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	rows, err := db.pool.Query(ctx, `
		SELECT route,
		       count(*) FILTER (WHERE state IN ('pending', 'retrying')),
		       COALESCE(EXTRACT(EPOCH FROM now() - min(created_at) FILTER (WHERE state IN ('pending', 'retrying'))), 0)::float8,
		       count(*) FILTER (WHERE state = 'dead')
		FROM deliveries
		WHERE state <> 'delivered'
		GROUP BY route`)
	if err != nil {
		return nil, fmt.Errorf("reading route stats: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (RouteStats, error) {
		var s RouteStats
		var age float64
		err := row.Scan(&s.Route, &s.Undelivered, &age, &s.Dead)
		s.OldestUndelivered = time.Duration(age * float64(time.Second))
		return s, err
	})
}
