package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// RoutesChannel is the NOTIFY channel of every change of the routes table
// (a trigger, migration 23).
const RoutesChannel = "hookrelay_routes"

// Route dispositions: what the dispatchers do with a deleted route's
// backlog before its queue goes.
const (
	DisposeDeliver    = "deliver"
	DisposeDeadLetter = "dead_letter"
)

// ErrDeclared is returned for a change of a route of config.yaml: it
// changes by a deploy of the config, not at run time.
var ErrDeclared = errors.New("route is declared in config.yaml; change it there")

// ErrNoTeam is returned for a route of a team that does not exist.
var ErrNoTeam = errors.New("no such team (hookrelay teams create)")

// ErrChanged is returned by RouteUpdate when the route changed since it
// was read.
var ErrChanged = errors.New("route changed meanwhile")

// BacklogError refuses to delete a route that has undelivered work
// without being told what to do with it.
type BacklogError struct{ Undelivered int64 }

func (e *BacklogError) Error() string {
	return fmt.Sprintf("the route has %d undelivered deliveries", e.Undelivered)
}

// RouteRow is a route as stored. Spec and the secrets are a run-time
// route's; a declared route's settings are in its config.
type RouteRow struct {
	Name     string
	Team     string
	Declared bool
	// Spec is a run-time route's settings as JSON.
	Spec []byte
	// Secret and PreviousSecret are sealed (internal/routeset); the
	// previous one signs until PreviousUntil.
	Secret, PreviousSecret                 []byte
	SecretFingerprint, PreviousFingerprint string
	PreviousUntil                          time.Time
	// DeletedAt is set once the route is deleted; it retires (Disposal
	// says how) until RetiredAt.
	DeletedAt, RetiredAt time.Time
	Disposal             string
	Version              int64
	CreatedAt, UpdatedAt time.Time
}

// Deleted reports whether the route was deleted (retiring or retired).
func (r *RouteRow) Deleted() bool { return !r.DeletedAt.IsZero() }

const routeColumns = `name, team, declared, spec, secret, previous_secret, COALESCE(secret_fingerprint, ''), COALESCE(previous_fingerprint, ''),
	previous_until, deleted_at, retired_at, COALESCE(disposal, ''), version, created_at, updated_at`

func scanRoute(row pgx.Row) (RouteRow, error) {
	var r RouteRow
	var prevUntil, deleted, retired *time.Time
	err := row.Scan(&r.Name, &r.Team, &r.Declared, &r.Spec, &r.Secret, &r.PreviousSecret, &r.SecretFingerprint, &r.PreviousFingerprint,
		&prevUntil, &deleted, &retired, &r.Disposal, &r.Version, &r.CreatedAt, &r.UpdatedAt)
	for _, t := range []struct {
		to   *time.Time
		from *time.Time
	}{{&r.PreviousUntil, prevUntil}, {&r.DeletedAt, deleted}, {&r.RetiredAt, retired}} {
		if t.from != nil {
			*t.to = *t.from
		}
	}
	return r, err
}

// RouteRows returns every route the context sees, by name, retired ones
// included, with the database's clock.
func (db *DB) RouteRows(ctx context.Context) ([]RouteRow, time.Time, error) {
	ctx, cancel := db.boundOps(ctx)
	defer cancel()
	var now time.Time
	var out []RouteRow
	err := db.InTx(ctx, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT `+routeColumns+` FROM routes ORDER BY name`)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (RouteRow, error) { return scanRoute(row) })
		return err
	})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("reading routes: %w", err)
	}
	return out, now, nil
}

// RouteGet returns the route named name as the context sees it;
// ErrNotFound when it does not.
func (db *DB) RouteGet(ctx context.Context, name string) (RouteRow, error) {
	ctx, cancel := db.boundOps(ctx)
	defer cancel()
	r, err := scanRoute(db.pool.QueryRow(ctx, `SELECT `+routeColumns+` FROM routes WHERE name = $1`, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return r, fmt.Errorf("route %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return r, fmt.Errorf("reading route %q: %w", name, err)
	}
	return r, nil
}

// RouteCreate stores a run-time route (Name, Team, Spec, Secret and its
// fingerprint), auditing it as e in the same transaction; ErrExists when
// the name is taken, by any route, of any team, deleted or not.
func (db *DB) RouteCreate(ctx context.Context, r RouteRow, e *AuditEntry) error {
	return db.audited(ctx, e, func(tx pgx.Tx) (map[string]any, error) {
		_, err := tx.Exec(ctx, `
			INSERT INTO routes (name, team, declared, spec, secret, secret_fingerprint)
			VALUES ($1, $2, false, $3, $4, $5)`, r.Name, r.Team, r.Spec, r.Secret, r.SecretFingerprint)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" {
			return nil, fmt.Errorf("route %q: %w", r.Name, ErrExists)
		}
		if errors.As(err, &pgErr) && pgErr.Code == "23503" {
			return nil, fmt.Errorf("team %q: %w", r.Team, ErrNoTeam)
		}
		if err != nil {
			return nil, fmt.Errorf("creating route %q: %w", r.Name, err)
		}
		return map[string]any{"secret_fingerprint": r.SecretFingerprint}, nil
	})
}

// runtimeRoute locks the live run-time route name in tx: ErrNotFound for
// none (or a deleted one), ErrDeclared for a route of config.yaml.
func runtimeRoute(ctx context.Context, tx pgx.Tx, name string) (RouteRow, error) {
	r, err := scanRoute(tx.QueryRow(ctx, `SELECT `+routeColumns+` FROM routes WHERE name = $1 FOR UPDATE`, name))
	switch {
	case errors.Is(err, pgx.ErrNoRows), err == nil && r.Deleted():
		return r, fmt.Errorf("route %q: %w", name, ErrNotFound)
	case err != nil:
		return r, fmt.Errorf("reading route %q: %w", name, err)
	case r.Declared:
		return r, fmt.Errorf("route %q: %w", name, ErrDeclared)
	}
	return r, nil
}

// RouteUpdate replaces the settings of the run-time route name, read at
// version, auditing it as e; ErrChanged when it changed since.
func (db *DB) RouteUpdate(ctx context.Context, name string, version int64, spec []byte, e *AuditEntry) error {
	return db.audited(ctx, e, func(tx pgx.Tx) (map[string]any, error) {
		r, err := runtimeRoute(ctx, tx, name)
		if err != nil {
			return nil, err
		}
		if r.Version != version {
			return nil, fmt.Errorf("route %q: %w", name, ErrChanged)
		}
		if _, err := tx.Exec(ctx, `UPDATE routes SET spec = $2, version = version + 1, updated_at = now() WHERE name = $1`, name, spec); err != nil {
			return nil, fmt.Errorf("updating route %q: %w", name, err)
		}
		return map[string]any{"version": r.Version + 1}, nil
	})
}

// RouteRotateSecret makes secret (sealed, with its fingerprint) the
// run-time route's signing secret; the one it replaces still signs for
// overlap (none when 0). It returns until when.
func (db *DB) RouteRotateSecret(ctx context.Context, name string, secret []byte, fingerprint string, overlap time.Duration, e *AuditEntry) (time.Time, error) {
	var until time.Time
	err := db.audited(ctx, e, func(tx pgx.Tx) (map[string]any, error) {
		if _, err := runtimeRoute(ctx, tx, name); err != nil {
			return nil, err
		}
		if err := tx.QueryRow(ctx, `
			UPDATE routes SET
				previous_secret = CASE WHEN $4 > interval '0' THEN secret END,
				previous_fingerprint = CASE WHEN $4 > interval '0' THEN secret_fingerprint END,
				previous_until = CASE WHEN $4 > interval '0' THEN now() + $4 END,
				secret = $2, secret_fingerprint = $3, version = version + 1, updated_at = now()
			WHERE name = $1
			RETURNING COALESCE(previous_until, now())`, name, secret, fingerprint, overlap).Scan(&until); err != nil {
			return nil, fmt.Errorf("rotating the secret of route %q: %w", name, err)
		}
		return map[string]any{"secret_fingerprint": fingerprint, "previous_until": until}, nil
	})
	return until, err
}

// undeliveredSQL counts a route's ($1) pairs not yet final.
const undeliveredSQL = `SELECT count(*) FROM deliveries WHERE route = $1 AND state IN ('pending', 'retrying')`

// RouteDelete deletes the run-time route name, auditing it as e: no event
// is routed to it any more, and the dispatchers retire it, doing with its
// backlog what disposal says. With disposal "" a route with undelivered
// work is refused with a *BacklogError (and one without any has whatever
// arrives late dead-lettered). It returns the undelivered count.
func (db *DB) RouteDelete(ctx context.Context, name, disposal string, e *AuditEntry) (int64, error) {
	var n int64
	err := db.audited(ctx, e, func(tx pgx.Tx) (map[string]any, error) {
		if _, err := runtimeRoute(ctx, tx, name); err != nil {
			return nil, err
		}
		if err := tx.QueryRow(ctx, undeliveredSQL, name).Scan(&n); err != nil {
			return nil, fmt.Errorf("counting the backlog of route %q: %w", name, err)
		}
		if disposal == "" {
			if n > 0 {
				return nil, &BacklogError{Undelivered: n}
			}
			disposal = DisposeDeadLetter
		}
		if _, err := tx.Exec(ctx, `UPDATE routes SET deleted_at = now(), disposal = $2, version = version + 1, updated_at = now() WHERE name = $1`,
			name, disposal); err != nil {
			return nil, fmt.Errorf("deleting route %q: %w", name, err)
		}
		return map[string]any{"undelivered": n, "disposal": disposal}, nil
	})
	return n, err
}

// RouteRetiring reports whether the deleted route name may retire now:
// deleted more than grace ago (every receiver has stopped routing to it)
// with nothing undelivered.
func (db *DB) RouteRetiring(ctx context.Context, name string, grace time.Duration) (bool, error) {
	ctx, cancel := db.boundOps(ctx)
	defer cancel()
	var ok bool
	err := db.pool.QueryRow(ctx, `
		SELECT EXISTS (SELECT 1 FROM routes WHERE name = $1 AND retired_at IS NULL AND deleted_at < now() - $2::interval)
			AND NOT EXISTS (SELECT 1 FROM deliveries WHERE route = $1 AND state IN ('pending', 'retrying'))`, name, grace).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("checking whether route %q may retire: %w", name, err)
	}
	return ok, nil
}

// RouteRetired marks the deleted route name retired: its queue is gone.
func (db *DB) RouteRetired(ctx context.Context, name string) error {
	ctx, cancel := db.boundOps(ctx)
	defer cancel()
	if _, err := db.pool.Exec(ctx, `UPDATE routes SET retired_at = now() WHERE name = $1 AND deleted_at IS NOT NULL AND retired_at IS NULL`, name); err != nil {
		return fmt.Errorf("retiring route %q: %w", name, err)
	}
	return nil
}

// RouteWhileRetired runs fn (deleting the route's queue) only while name
// is retired, holding its row so that RouteUnretireLate, which skips a
// locked row, cannot put the route back to retiring under it: a queue
// deleted just after its route came back would take the late pairs'
// copies with it, leaving them to the reconciler's margin. It reports
// whether fn ran; a route no longer retired is left alone.
func (db *DB) RouteWhileRetired(ctx context.Context, name string, fn func() error) (bool, error) {
	ctx, cancel := db.boundOps(ctx)
	defer cancel()
	ran := false
	err := db.InTx(ctx, func(tx pgx.Tx) error {
		var retired bool
		err := tx.QueryRow(ctx, `SELECT retired_at IS NOT NULL FROM routes WHERE name = $1 FOR SHARE`, name).Scan(&retired)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("checking that route %q is retired: %w", name, err)
		}
		if !retired {
			return nil
		}
		ran = true
		return fn()
	})
	if err != nil {
		return false, err
	}
	return ran, nil
}

// RouteLate is a deleted route put back to retiring: it had retired, and
// pairs of it were committed after (Resent of them sent again now).
type RouteLate struct {
	Route  string
	Resent int
}

// RouteUnretireLate puts back to retiring every route retired within
// within that has a pair pending or retrying, and sends those pairs again
// (as DeliveryReconcile does, due now), in one transaction. Such a pair
// was committed after its route retired: an ingest that matched the route
// before its deletion and committed past the retirement grace (a
// statement stalled on its connection), or a receiver whose routes
// lagged. Retiring again, the route is followed by every dispatcher, which
// finish those pairs as its disposal says; then it retires again. A pair
// whose event is still in the outbox is left to its own copy and, that
// lost, to the reconciler.
func (db *DB) RouteUnretireLate(ctx context.Context, within time.Duration) ([]RouteLate, error) {
	ctx, cancel := db.boundOps(ctx)
	defer cancel()
	var out []RouteLate
	err := db.InTx(ctx, func(tx pgx.Tx) error {
		// Found first, changed only then: an UPDATE, even of no row, fires
		// the routes' NOTIFY, which wakes every process's follower.
		rows, err := tx.Query(ctx, `
			SELECT r.name FROM routes r
			WHERE r.retired_at > now() - $1::interval
			  AND EXISTS (SELECT 1 FROM deliveries d WHERE d.route = r.name AND d.state IN ('pending', 'retrying'))
			ORDER BY r.name
			FOR UPDATE OF r SKIP LOCKED`, within)
		if err != nil {
			return fmt.Errorf("finding late pairs of retired routes: %w", err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("finding late pairs of retired routes: %w", err)
		}
		if len(names) == 0 {
			return nil
		}
		if _, err := tx.Exec(ctx, `UPDATE routes SET retired_at = NULL, updated_at = now() WHERE name = ANY($1)`, names); err != nil {
			return fmt.Errorf("putting back to retiring routes %s: %w", strings.Join(names, ", "), err)
		}
		for _, name := range names {
			sent, err := reconcileIn(ctx, tx, name, 0, 10000)
			if err != nil {
				return err
			}
			out = append(out, RouteLate{Route: name, Resent: len(sent)})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// RoutesRetiredWithin returns the routes retired less than within ago and
// more than settled ago, by name.
func (db *DB) RoutesRetiredWithin(ctx context.Context, within, settled time.Duration) ([]string, error) {
	ctx, cancel := db.boundOps(ctx)
	defer cancel()
	rows, err := db.pool.Query(ctx, `SELECT name FROM routes WHERE retired_at > now() - $1::interval AND retired_at < now() - $2::interval ORDER BY name`,
		within, settled)
	if err != nil {
		return nil, fmt.Errorf("reading retired routes: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("reading retired routes: %w", err)
	}
	return out, nil
}

// RouteReseal seals every run-time route's secrets again (a key
// rotation), in one transaction: its signing secrets with reseal, and its
// stored settings with resealSpec (the header values sealed in them). It
// returns how many routes it changed.
func (db *DB) RouteReseal(ctx context.Context, reseal func(route string, sealed []byte) ([]byte, error),
	resealSpec func(route string, spec []byte) ([]byte, error), e *AuditEntry) (int, error) {
	n := 0
	err := db.audited(ctx, e, func(tx pgx.Tx) (map[string]any, error) {
		rows, err := tx.Query(ctx, `SELECT name, secret, previous_secret, spec FROM routes WHERE secret IS NOT NULL ORDER BY name FOR UPDATE`)
		if err != nil {
			return nil, fmt.Errorf("reading route secrets: %w", err)
		}
		type sealed struct {
			name               string
			secret, prev, spec []byte
		}
		list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (sealed, error) {
			var s sealed
			err := row.Scan(&s.name, &s.secret, &s.prev, &s.spec)
			return s, err
		})
		if err != nil {
			return nil, fmt.Errorf("reading route secrets: %w", err)
		}
		for _, s := range list {
			secret, err := reseal(s.name, s.secret)
			if err != nil {
				return nil, fmt.Errorf("route %q: %w", s.name, err)
			}
			var prev []byte
			if s.prev != nil {
				if prev, err = reseal(s.name, s.prev); err != nil {
					return nil, fmt.Errorf("route %q, previous secret: %w", s.name, err)
				}
			}
			spec := s.spec
			if spec != nil {
				if spec, err = resealSpec(s.name, s.spec); err != nil {
					return nil, fmt.Errorf("route %q, settings: %w", s.name, err)
				}
			}
			if _, err := tx.Exec(ctx, `UPDATE routes SET secret = $2, previous_secret = $3, spec = $4 WHERE name = $1`, s.name, secret, prev, spec); err != nil {
				return nil, fmt.Errorf("resealing route %q: %w", s.name, err)
			}
			n++
		}
		return map[string]any{"routes": n}, nil
	})
	return n, err
}

// SourceList returns the sources the context sees, by name, with their
// teams and subscribers.
func (db *DB) SourceList(ctx context.Context) ([]Owned, error) {
	ctx, cancel := db.boundOps(ctx)
	defer cancel()
	rows, err := db.pool.Query(ctx, `SELECT name, team, subscribers FROM sources ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("listing sources: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Owned, error) {
		var o Owned
		err := row.Scan(&o.Name, &o.Team, &o.Subscribers)
		return o, err
	})
	if err != nil {
		return nil, fmt.Errorf("listing sources: %w", err)
	}
	return out, nil
}
