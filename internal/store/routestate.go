package store

import (
	"context"
	"fmt"
	"time"

	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/jackc/pgx/v5"
)

// RouteStateChannel is the NOTIFY channel that announces a change of a
// route's row in route_state; the payload is the route.
const RouteStateChannel = "hookrelay_route_state"

const routeStateColumns = `route, paused, paused_at, COALESCE(paused_by, ''), COALESCE(paused_reason, ''), circuit, consecutive_failures,
	opened_until, COALESCE(cooldown_ms, 0), COALESCE(probe_owner, ''), probe_at, slow_until, held_until, updated_at, now()`

func scanRouteState(row pgx.CollectableRow) (webhook.RouteState, error) {
	var s webhook.RouteState
	var cooldownMS int64
	err := row.Scan(&s.Route, &s.Paused, &s.PausedAt, &s.PausedBy, &s.PausedReason, &s.Circuit, &s.ConsecutiveFailures,
		&s.OpenedUntil, &cooldownMS, &s.ProbeOwner, &s.ProbeAt, &s.SlowUntil, &s.HeldUntil, &s.UpdatedAt, &s.Now)
	s.Cooldown = time.Duration(cooldownMS) * time.Millisecond
	return s, err
}

// RouteStateEnsure makes sure every route has its row (active, circuit
// closed); existing rows are left as they are. One statement a route:
// dispatchers starting together each insert the same rows, and one
// multi-row insert each could deadlock on them (it did, in the fault
// suite); a single-row insert only waits for the other's.
func (db *DB) RouteStateEnsure(ctx context.Context, routes []string) error {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	for _, r := range routes {
		if _, err := db.pool.Exec(ctx, `
			INSERT INTO route_state (route) VALUES ($1)
			ON CONFLICT (route) DO NOTHING`, r); err != nil {
			return fmt.Errorf("creating route state row of %s: %w", r, err)
		}
	}
	return nil
}

// RouteStateList returns every route's row, ordered by route. A route
// without a row has never been paused or tripped.
func (db *DB) RouteStateList(ctx context.Context) ([]webhook.RouteState, error) {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	rows, err := db.pool.Query(ctx, `SELECT `+routeStateColumns+` FROM route_state ORDER BY route`)
	if err != nil {
		return nil, fmt.Errorf("reading route state: %w", err)
	}
	list, err := pgx.CollectRows(rows, scanRouteState)
	if err != nil {
		return nil, fmt.Errorf("reading route state: %w", err)
	}
	return list, nil
}

// RoutePause pauses (paused true) or resumes a route, noting who did it,
// and announces the change. It reports whether the state changed (pausing
// a paused route changes nothing).
func (db *DB) RoutePause(ctx context.Context, route string, paused bool, by string) (changed bool, err error) {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	return routePause(ctx, db.pool, route, paused, by, "")
}

// RoutePauseAudited is RoutePause that writes e to the audit log in the
// same transaction, with whether the route changed.
// reason says why (kept with a pause, cleared by a resume).
func (db *DB) RoutePauseAudited(ctx context.Context, route string, paused bool, by, reason string, e *AuditEntry) (changed bool, err error) {
	err = db.audited(ctx, e, func(tx pgx.Tx) (map[string]any, error) {
		changed, err = routePause(ctx, tx, route, paused, by, reason)
		return map[string]any{"paused": paused, "changed": changed}, err
	})
	return changed, err
}

func routePause(ctx context.Context, q querier, route string, paused bool, by, reason string) (bool, error) {
	// The upsert's WHERE leaves a row already in the asked state alone, so
	// RETURNING says whether anything changed.
	var n int
	err := q.QueryRow(ctx, `
		WITH u AS (
			INSERT INTO route_state AS r (route, paused, paused_at, paused_by, paused_reason)
			VALUES ($1, $2, CASE WHEN $2 THEN now() END, CASE WHEN $2 THEN $3 END, CASE WHEN $2 THEN NULLIF($4, '') END)
			ON CONFLICT (route) DO UPDATE SET paused = $2,
				paused_at = CASE WHEN $2 THEN now() END,
				paused_by = CASE WHEN $2 THEN $3 END,
				paused_reason = CASE WHEN $2 THEN NULLIF($4, '') END,
				updated_at = now()
			WHERE r.paused <> $2
			RETURNING route
		)
		SELECT count(pg_notify('`+RouteStateChannel+`', route)),
		       count(hookrelay_emit(CASE WHEN $2 THEN 'route.paused' ELSE 'route.resumed' END, route, NULL,
		           jsonb_strip_nulls(jsonb_build_object('route', route, 'by', $3::text, 'reason', NULLIF($4, '')))))
		FROM u`, route, paused, by, reason).Scan(&n, new(int))
	if err != nil {
		return false, fmt.Errorf("setting route %s paused=%t: %w", route, paused, err)
	}
	return n > 0, nil
}

// RouteSuccess records a successful attempt: it resets the route's
// consecutive failures and closes its circuit. A route with no failures
// and a closed circuit is not written to.
func (db *DB) RouteSuccess(ctx context.Context, route string) error {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	// old reads the circuit under the row's lock, so that exactly one
	// success reports the closing (route.circuit_closed, in this
	// statement: hookrelay_emit).
	if _, err := db.pool.Exec(ctx, `
		WITH old AS (
			SELECT route AS name, circuit AS was FROM route_state
			WHERE route = $1 AND (consecutive_failures > 0 OR circuit <> 'closed')
			FOR UPDATE
		), u AS (
			UPDATE route_state SET consecutive_failures = 0, circuit = 'closed', opened_until = NULL,
				cooldown_ms = NULL, probe_owner = NULL, probe_at = NULL, updated_at = now()
			FROM old
			WHERE route = old.name
			RETURNING route, old.was
		)
		SELECT pg_notify('`+RouteStateChannel+`', route),
		       CASE WHEN was <> 'closed' THEN hookrelay_emit('route.circuit_closed', route, NULL, jsonb_build_object('route', route)) END
		FROM u`, route); err != nil {
		return fmt.Errorf("recording a success on route %s: %w", route, err)
	}
	return nil
}

// RouteFailure records a failed attempt. The count of consecutive failures
// goes up by one in a single UPDATE, so failures from every dispatcher add
// up. A closed circuit opens when the count reaches threshold (for
// cooldown); a half-open circuit (its probe failed) opens again for twice
// its last cool-down, at most maxCooldown. An open circuit stays open. It
// returns the circuit afterwards and announces an opening and a first
// failure (so every dispatcher knows its next success must reset it).
func (db *DB) RouteFailure(ctx context.Context, route string, threshold int, cooldown, maxCooldown time.Duration) (circuit string, failures int, err error) {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	// In an UPDATE's SET every column reference is the row before the
	// update; under READ COMMITTED a concurrent update makes Postgres
	// evaluate the whole statement again on the newest row, so two
	// dispatchers' failures never count as one.
	var notified int
	// old reads the circuit under the row's lock, so that exactly one
	// failure reports the opening of a closed circuit
	// (route.circuit_opened, in this statement: hookrelay_emit).
	err = db.pool.QueryRow(ctx, `
		WITH old AS (
			SELECT route AS name, circuit AS was FROM route_state WHERE route = $1 FOR UPDATE
		), u AS (
			UPDATE route_state SET
				consecutive_failures = consecutive_failures + 1,
				circuit = CASE
					WHEN circuit = 'half_open' THEN 'open'
					WHEN circuit = 'closed' AND consecutive_failures + 1 >= $2 THEN 'open'
					ELSE circuit END,
				cooldown_ms = CASE
					WHEN circuit = 'half_open' THEN least(COALESCE(cooldown_ms, $3) * 2, $4)
					WHEN circuit = 'closed' AND consecutive_failures + 1 >= $2 THEN $3
					ELSE cooldown_ms END,
				opened_until = CASE
					WHEN circuit = 'half_open' THEN now() + least(COALESCE(cooldown_ms, $3) * 2, $4) * interval '1 millisecond'
					WHEN circuit = 'closed' AND consecutive_failures + 1 >= $2 THEN now() + $3 * interval '1 millisecond'
					ELSE opened_until END,
				probe_owner = CASE WHEN circuit = 'half_open' THEN NULL ELSE probe_owner END,
				probe_at = CASE WHEN circuit = 'half_open' THEN NULL ELSE probe_at END,
				-- updated_at marks a change of state only.
				updated_at = CASE
					WHEN circuit = 'half_open' OR (circuit = 'closed' AND consecutive_failures + 1 >= $2) THEN now()
					ELSE updated_at END
			FROM old
			WHERE route = old.name
			RETURNING route, circuit, consecutive_failures, opened_until,
				-- A change of state, or the first failure after a success: every
				-- dispatcher reads it, so its next success resets the count.
				updated_at = now() OR consecutive_failures = 1 AS changed,
				old.was = 'closed' AND circuit = 'open' AS opened
		)
		SELECT circuit, consecutive_failures,
		       count(pg_notify('`+RouteStateChannel+`', route)) FILTER (WHERE changed),
		       count(CASE WHEN opened THEN hookrelay_emit('route.circuit_opened', route, NULL,
		           jsonb_build_object('route', route, 'consecutive_failures', consecutive_failures, 'opened_until', opened_until)) END)
		FROM u GROUP BY circuit, consecutive_failures`,
		route, threshold, cooldown.Milliseconds(), maxCooldown.Milliseconds()).Scan(&circuit, &failures, &notified, new(int))
	if err == pgx.ErrNoRows {
		return "", 0, fmt.Errorf("recording a failure on route %s: %w", route, ErrNotFound)
	}
	if err != nil {
		return "", 0, fmt.Errorf("recording a failure on route %s: %w", route, err)
	}
	return circuit, failures, nil
}

// RouteProbeClaim moves an open circuit whose cool-down is over to
// half-open with owner as the one dispatcher that may make the probe, or
// takes over a half-open circuit whose owner stopped refreshing its claim
// for longer than stale. The conditional UPDATE lets exactly one claimant
// win. It reports whether owner holds the probe now, and announces it.
func (db *DB) RouteProbeClaim(ctx context.Context, route, owner string, stale time.Duration) (bool, error) {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	var n int
	err := db.pool.QueryRow(ctx, `
		WITH u AS (
			UPDATE route_state SET circuit = 'half_open', probe_owner = $2, probe_at = now(), updated_at = now()
			WHERE route = $1 AND (
				(circuit = 'open' AND opened_until <= now())
				OR (circuit = 'half_open' AND probe_owner IS DISTINCT FROM $2
				    AND (probe_at IS NULL OR probe_at < now() - $3 * interval '1 millisecond')))
			RETURNING route
		)
		SELECT count(pg_notify('`+RouteStateChannel+`', route)) FROM u`, route, owner, stale.Milliseconds()).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("claiming the probe of route %s: %w", route, err)
	}
	return n > 0, nil
}

// RouteProbeRefresh renews owner's claim on a half-open route's probe. It
// reports whether owner still holds it.
func (db *DB) RouteProbeRefresh(ctx context.Context, route, owner string) (bool, error) {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	tag, err := db.pool.Exec(ctx, `
		UPDATE route_state SET probe_at = now()
		WHERE route = $1 AND circuit = 'half_open' AND probe_owner = $2`, route, owner)
	if err != nil {
		return false, fmt.Errorf("refreshing the probe of route %s: %w", route, err)
	}
	return tag.RowsAffected() == 1, nil
}

// RouteSlow holds every delivery of route until now + d (a destination's
// Retry-After), unless it is held longer already, and announces it.
func (db *DB) RouteSlow(ctx context.Context, route string, d time.Duration) error {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	if _, err := db.pool.Exec(ctx, `
		WITH u AS (
			UPDATE route_state SET slow_until = now() + $2 * interval '1 millisecond', updated_at = now()
			WHERE route = $1 AND (slow_until IS NULL OR slow_until < now() + $2 * interval '1 millisecond')
			RETURNING route
		)
		SELECT pg_notify('`+RouteStateChannel+`', route) FROM u`, route, d.Milliseconds()); err != nil {
		return fmt.Errorf("slowing route %s: %w", route, err)
	}
	return nil
}

// RouteHold marks route held for d from now (the mark only moves later):
// a dispatcher holds a delivery that long, its message in hand and its
// pair unclaimed, for the rate limit or a Retry-After. The reconciler
// leaves a held route alone (DeliveryReconcile).
func (db *DB) RouteHold(ctx context.Context, route string, d time.Duration) error {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	if _, err := db.lax.Exec(ctx, `
		UPDATE route_state SET held_until = now() + $2 * interval '1 millisecond'
		WHERE route = $1 AND (held_until IS NULL OR held_until < now() + $2 * interval '1 millisecond')`,
		route, d.Milliseconds()); err != nil {
		return fmt.Errorf("marking route %s held: %w", route, err)
	}
	return nil
}

// RouteRateTake takes one delivery from route's rate limit, a generic cell
// rate algorithm kept in Postgres so that the limit holds for the route as
// a whole, whatever the number of dispatchers: each delivery moves the
// route's theoretical arrival time (tat) on by interval; a delivery may go
// when the moved tat is at most burst intervals ahead of now. It returns 0
// when the delivery may go (and counted it), otherwise how long to wait
// before asking again (nothing taken).
func (db *DB) RouteRateTake(ctx context.Context, route string, interval time.Duration, burst int) (time.Duration, error) {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	us := interval.Microseconds()
	// greatest() ignores NULL: a route with no tat yet starts at now().
	tag, err := db.pool.Exec(ctx, `
		UPDATE route_state SET tat = greatest(tat, clock_timestamp()) + $2 * interval '1 microsecond'
		WHERE route = $1
		  AND greatest(tat, clock_timestamp()) + $2 * interval '1 microsecond' <= clock_timestamp() + $3 * $2 * interval '1 microsecond'`,
		route, us, burst)
	if err != nil {
		return 0, fmt.Errorf("taking from the rate limit of route %s: %w", route, err)
	}
	if tag.RowsAffected() == 1 {
		return 0, nil
	}
	var waitUS float64
	err = db.pool.QueryRow(ctx, `
		SELECT EXTRACT(EPOCH FROM greatest(tat, clock_timestamp()) + $2 * interval '1 microsecond'
		                          - $3 * $2 * interval '1 microsecond' - clock_timestamp()) * 1e6
		FROM route_state WHERE route = $1`, route, us, burst).Scan(&waitUS)
	if err == pgx.ErrNoRows {
		return 0, fmt.Errorf("taking from the rate limit of route %s: %w", route, ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("reading the rate limit of route %s: %w", route, err)
	}
	// Never 0: the caller asks again after the wait.
	return max(time.Duration(waitUS)*time.Microsecond, time.Millisecond), nil
}
