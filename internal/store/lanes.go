package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/jackc/pgx/v5"
)

// Lanes: a route with ordering fifo delivers the events of one resource
// one at a time, in the order their pairs were made (docs/ordering.md).
// A pair's lane is its event's source and resource, set when the pair is
// made (laneSQL). The lane's head is its lowest-id pair still owed:
// pending, retrying, or dead (a dead head blocks its lane until an
// operator requeues it, unless the route's on_dead is skip, whose dead
// pairs leave their lane). Only the head is delivered, and only while no
// other pair of the lane is in flight; a copy of any other pair parks it
// (due_at infinity: the reconciler leaves it alone) and is acked, and the
// record that frees the lane sends the new head a copy (laneWakeSQL), in
// its own transaction. Both take the lane's transaction lock first
// (laneLockSQL), so a claim that parks and the record that frees the lane
// see each other: the claim runs after the record committed and finds the
// lane free, or before, and the record's wake finds it parked.
//
// Pair ids come from one sequence, taken when the pair is made; an
// event's pair is made in the statement that stores the event, before the
// sender gets its 200. So an event sent after another's 200 has the
// higher id, on every route: the lane's order is the order of acceptance.

// laneSQL is the lane of a pair made for the event whose row is in scope:
// "<source> <resource>", NULL when the event carries no resource. Source
// names are identifiers: no space.
const laneSQL = `CASE WHEN ordering_resource <> '' THEN source || ' ' || ordering_resource END`

// laneLockSQL takes the transaction lock of route $1's lane $2.
const laneLockSQL = `SELECT pg_advisory_xact_lock(hashtextextended($1 || E'\n' || $2, 41))`

// laneOwed is the condition on a pair of a lane still owed.
const laneOwed = `state IN ('pending', 'retrying', 'dead')`

// parkedAt is the due_at of a parked pair.
const parkedAt = "'infinity'"

// laneWakeSQL sends the head of route $1's lane $2 a copy when it is
// parked and no pair of the lane is in flight: it is due now, at a new
// generation (any older copy is stale), its copy in the outbox carrying
// its series' next attempt number. It does nothing otherwise, so it may
// run after any change of the lane.
const laneWakeSQL = `
	WITH head AS (
		SELECT id, event_id, due_at FROM deliveries
		WHERE route = $1 AND lane = $2 AND ` + laneOwed + `
		ORDER BY id LIMIT 1
	), u AS (
		UPDATE deliveries d SET gen = d.gen + 1, due_at = now(), updated_at = now()
		FROM head
		WHERE d.event_id = head.event_id AND d.route = $1 AND d.id = head.id AND head.due_at = ` + parkedAt + `
		  AND NOT EXISTS (SELECT 1 FROM deliveries o WHERE o.route = $1 AND o.lane = $2 AND o.` + laneOwed + `
		                  AND o.id <> head.id AND o.lease_until > now())
		RETURNING d.id, d.event_id, d.route, d.gen, d.series
	)
	INSERT INTO outbox (event_id, routing_key, route, gen, attempt)
	SELECT u.event_id, e.source || '.' || e.event_type, u.route, u.gen,
	       (SELECT COALESCE(max(a.attempt), 0) + 1 FROM delivery_attempts a
	        WHERE a.event_id = u.event_id AND a.delivery_id = u.id AND a.series = u.series)
	FROM u JOIN events e ON e.id = u.event_id`

// DeliveryClaimInOrder is DeliveryClaim for a route that delivers in order
// (ordering fifo). A pair whose event has a resource is claimed only when
// it is its lane's head and no other pair of the lane is in flight;
// otherwise it is parked, and the claim fails with webhook.ErrWaiting:
// the copy is done with, and the record that frees the lane sends the pair
// a new one. A pair whose event has no resource, or that left its lane, is
// claimed as by DeliveryClaim. skipDead says the route's dead pairs leave
// their lane (on_dead skip): Record then frees the lane on a dead outcome
// too.
//
// A dead pair is claimed whatever its place: its copy is a dead letter an
// operator moved back, which restarts it.
func (db *DB) DeliveryClaimInOrder(ctx context.Context, owner, eventID uuid.UUID, route string, attempt int, gen int64, ttl time.Duration, skipDead bool) (*DeliveryLease, error) {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	var (
		l      *DeliveryLease
		parked bool
	)
	err := pgx.BeginFunc(ctx, db.lax, func(tx pgx.Tx) error {
		var err error
		l, parked, err = db.claimInOrder(ctx, tx, owner, eventID, route, attempt, gen, ttl)
		return err
	})
	if err != nil {
		return nil, err
	}
	if parked {
		return nil, webhook.ErrWaiting
	}
	l.skipDead = skipDead
	if err := l.flushTakeover(ctx); err != nil {
		return nil, err
	}
	return l, nil
}

// claimInOrder is DeliveryClaimInOrder in tx; parked says the pair was
// parked.
func (db *DB) claimInOrder(ctx context.Context, tx pgx.Tx, owner, eventID uuid.UUID, route string, attempt int, copyGen int64, ttl time.Duration) (*DeliveryLease, bool, error) {
	var (
		id   int64
		lane *string
	)
	for range 2 {
		// The lane's lock is taken in the statement that reads it (an
		// event's resource never changes; a pair only leaves its lane, as
		// a dead one that is then claimed anyway).
		err := tx.QueryRow(ctx, withDays(`
			SELECT d.id, d.lane, (SELECT count(*) FROM (SELECT pg_advisory_xact_lock(hashtextextended(d.route || E'\n' || d.lane, 41))) x)
			FROM deliveries d WHERE d.event_id = $1 AND @day(d.event_id) AND d.route = $2`, eventID),
			pgUUID(eventID), route).Scan(&id, &lane, new(int64))
		if errors.Is(err, pgx.ErrNoRows) {
			if err := deliveryCreate(ctx, db, tx, eventID, route); err != nil {
				return nil, false, err
			}
			continue
		}
		if err != nil {
			return nil, false, fmt.Errorf("taking delivery lease: reading the pair's lane: %w", err)
		}
		break
	}
	if id == 0 {
		return nil, false, errors.New("claiming delivery: the pair was not made")
	}
	if lane == nil {
		l, err := db.claimOn(ctx, tx, owner, eventID, route, attempt, &copyGen, ttl)
		return l, false, err
	}
	// A new statement: it sees what committed before the lock was taken.
	var (
		state               string
		gen                 int64
		busy, parked, first bool
		othersInFlight      bool
	)
	err := tx.QueryRow(ctx, withDays(`
		SELECT d.state, d.gen, COALESCE(d.lease_until > now() AND d.lease_owner <> $4, false), d.due_at = `+parkedAt+`,
		       (SELECT h.id FROM deliveries h WHERE h.route = $2 AND h.lane = $3 AND h.`+laneOwed+` ORDER BY h.id LIMIT 1) = d.id,
		       EXISTS (SELECT 1 FROM deliveries o WHERE o.route = $2 AND o.lane = $3 AND o.`+laneOwed+`
		               AND o.id <> d.id AND o.lease_until > now())
		FROM deliveries d WHERE d.event_id = $1 AND @day(d.event_id) AND d.route = $2`, eventID),
		pgUUID(eventID), route, *lane, pgUUID(owner)).Scan(&state, &gen, &busy, &parked, &first, &othersInFlight)
	if err != nil {
		return nil, false, fmt.Errorf("taking delivery lease: reading the pair's lane: %w", err)
	}
	owed := state == string(webhook.StatePending) || state == string(webhook.StateRetrying)
	if owed && gen == copyGen && !busy && (!first || othersInFlight) {
		// Not its turn: park it.
		if _, err := tx.Exec(ctx, withDays(`
			UPDATE deliveries SET due_at = `+parkedAt+`, updated_at = now()
			WHERE event_id = $1 AND @day(event_id) AND route = $2 AND due_at <> `+parkedAt, eventID),
			pgUUID(eventID), route); err != nil {
			return nil, false, fmt.Errorf("parking the pair behind its lane's head: %w", err)
		}
		return nil, true, nil
	}
	if owed && parked && gen == copyGen {
		// Its turn, and parked still (the copy that parked it came again
		// after the lane freed): due again, so that a claim lost with its
		// holder leaves the pair to the reconciler.
		if _, err := tx.Exec(ctx, withDays(`
			UPDATE deliveries SET due_at = now(), updated_at = now()
			WHERE event_id = $1 AND @day(event_id) AND route = $2`, eventID),
			pgUUID(eventID), route); err != nil {
			return nil, false, fmt.Errorf("unparking the pair: %w", err)
		}
	}
	// Its turn; or a copy that is stale, of a final pair, of a pair in
	// flight, or a dead letter moved back: claimOn answers those as for
	// any route.
	l, err := db.claimOn(ctx, tx, owner, eventID, route, attempt, &copyGen, ttl)
	if err != nil {
		return nil, false, err
	}
	l.route, l.lane = route, *lane
	return l, false, nil
}

// recordInOrder is Record of a lease on a lane: in one transaction that
// holds the lane's lock, the attempt's record, the pair's leaving its
// lane when it went dead on a route whose dead pairs do not block, and
// the wake of the lane's next head.
func (l *DeliveryLease) recordInOrder(ctx context.Context, a *webhook.Attempt) (gen int64, current bool, err error) {
	var recErr error
	err = pgx.BeginFunc(ctx, l.db.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, laneLockSQL, l.route, l.lane); err != nil {
			return fmt.Errorf("recording attempt: taking the lane's lock: %w", err)
		}
		if l.tries > 1 {
			// As recordAgain: after the first try, if it is still running.
			if _, err := tx.Exec(ctx, withDays(`SELECT 1 FROM deliveries WHERE event_id = $2 AND @day(event_id) AND id = $1 FOR UPDATE`, l.eventID),
				l.id, pgUUID(l.eventID)); err != nil {
				return fmt.Errorf("recording attempt: locking delivery: %w", err)
			}
		}
		gen, current, recErr = recordAttempt(ctx, tx, l.id, l.eventID, l.owner, l.attempts, a)
		if errors.Is(recErr, webhook.ErrLeaseLost) {
			return nil // its lost_lease attempt commits; the lane did not change
		}
		if recErr != nil {
			return recErr
		}
		if a.Outcome == webhook.StateDead && l.skipDead {
			if _, err := tx.Exec(ctx, withDays(`
				UPDATE deliveries SET lane = NULL WHERE event_id = $2 AND @day(event_id) AND id = $1 AND state = 'dead'`, l.eventID),
				l.id, pgUUID(l.eventID)); err != nil {
				return fmt.Errorf("recording attempt: skipping the dead pair: %w", err)
			}
		}
		if _, err := tx.Exec(ctx, laneWakeSQL, l.route, l.lane); err != nil {
			return fmt.Errorf("recording attempt: sending the lane's next event: %w", err)
		}
		return nil
	})
	if err != nil {
		return 0, false, err
	}
	return gen, current, recErr
}
