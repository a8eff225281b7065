package store

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Team scopes. Row-level security (migration 22) shows a connection the
// rows of the team its hookrelay.team setting names; TeamAll sees every
// team's. The receiver, the dispatcher and the CLI connect with TeamAll;
// the admin API's pool (Config.TeamFromContext) sets the team of each call
// from its context.
const (
	TeamAll = "*"
	// PlatformTeam runs the relay: what is not another team's is its own,
	// and its tokens see every team.
	PlatformTeam = "platform"
	// RelaySource is the built-in source of the relay's own events
	// (circuits, pauses, dead letters, jobs: docs/alerts.md).
	RelaySource = "hookrelay"
)

// teamName is what a team may be called (the teams table checks it too).
var teamName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// ValidTeamName reports whether name can name a team.
func ValidTeamName(name string) bool { return teamName.MatchString(name) }

type teamKey struct{}

// WithTeam returns ctx whose calls on a TeamFromContext pool see team's
// rows only, or every team's for TeamAll.
func WithTeam(ctx context.Context, team string) context.Context {
	return context.WithValue(ctx, teamKey{}, team)
}

// TeamOf returns the team ctx acts for: "" when none was set, which on a
// TeamFromContext pool sees no row at all.
func TeamOf(ctx context.Context) string {
	t, _ := ctx.Value(teamKey{}).(string)
	return t
}

// setTeamPerCall makes every acquire of a connection of pc set its
// hookrelay.team to the acquiring context's team, "" when it names none:
// no call runs with the team a previous call left, and a call that forgot
// to name its team sees nothing.
func setTeamPerCall(pc *pgxpool.Config) {
	pc.PrepareConn = func(ctx context.Context, c *pgx.Conn) (bool, error) {
		if _, err := c.Exec(ctx, `SELECT set_config('hookrelay.team', $1, false)`, TeamOf(ctx)); err != nil {
			return false, fmt.Errorf("setting the connection's team: %w", err)
		}
		return true, nil
	}
}

// Team is a team as stored.
type Team struct {
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
	CreatedBy string    `json:"created_by"`
}

// TeamCreate stores a team, auditing it as e in the same transaction;
// ErrExists when the name is taken.
func (db *DB) TeamCreate(ctx context.Context, t Team, e *AuditEntry) error {
	return db.audited(ctx, e, func(tx pgx.Tx) (map[string]any, error) {
		_, err := tx.Exec(ctx, `INSERT INTO teams (name, created_by) VALUES ($1, $2)`, t.Name, t.CreatedBy)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" {
			return nil, fmt.Errorf("team %q: %w", t.Name, ErrExists)
		}
		if err != nil {
			return nil, fmt.Errorf("creating team %q: %w", t.Name, err)
		}
		return map[string]any{}, nil
	})
}

// TeamList returns the teams the context sees, by name.
func (db *DB) TeamList(ctx context.Context) ([]Team, error) {
	ctx, cancel := db.boundOps(ctx)
	defer cancel()
	rows, err := db.pool.Query(ctx, `SELECT name, created_at, created_by FROM teams ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("listing teams: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Team])
	if err != nil {
		return nil, fmt.Errorf("listing teams: %w", err)
	}
	return out, nil
}

// Owned is a route or a source and the team it belongs to.
type Owned struct {
	Name string
	Team string
	// Subscribers (sources only) are the teams that may bind routes to
	// the source's events; "*" admits every team.
	Subscribers []string
}

// Declare writes the routes and sources of the config (declared: applied
// at every start, read-only at run time) with their teams. A team that
// does not exist is an error naming it.
func (db *DB) Declare(ctx context.Context, routes, sources []Owned) error {
	ctx, cancel := db.boundOps(ctx)
	defer cancel()
	// In name order: processes starting together with configs in other
	// orders take the rows' locks in one order.
	byName := func(a, b Owned) int { return strings.Compare(a.Name, b.Name) }
	routes, sources = slices.SortedFunc(slices.Values(routes), byName), slices.SortedFunc(slices.Values(sources), byName)
	return db.InTx(ctx, func(tx pgx.Tx) error {
		names := make([]string, len(routes))
		for i, r := range routes {
			names[i] = r.Name
		}
		var taken []string
		if err := tx.QueryRow(ctx, `SELECT COALESCE(array_agg(name ORDER BY name), '{}') FROM routes WHERE name = ANY($1) AND NOT declared`, names).Scan(&taken); err != nil {
			return fmt.Errorf("declaring routes: %w", err)
		}
		if len(taken) > 0 {
			return fmt.Errorf("routes %s of the config are routes made at run time (hookrelay routes list): rename them in the config", strings.Join(taken, ", "))
		}
		for _, r := range routes {
			if _, err := tx.Exec(ctx, `
				INSERT INTO routes (name, team, declared) VALUES ($1, $2, true)
				ON CONFLICT (name) DO UPDATE SET team = EXCLUDED.team, declared = true, updated_at = now()
				WHERE (routes.team, routes.declared) IS DISTINCT FROM (EXCLUDED.team, true)`, r.Name, r.Team); err != nil {
				return declareError("route", r, err)
			}
		}
		for _, s := range sources {
			subs := s.Subscribers
			if subs == nil {
				subs = []string{}
			}
			if _, err := tx.Exec(ctx, `
				INSERT INTO sources (name, team, subscribers, declared) VALUES ($1, $2, $3, true)
				ON CONFLICT (name) DO UPDATE SET team = EXCLUDED.team, subscribers = EXCLUDED.subscribers, declared = true, updated_at = now()
				WHERE (sources.team, sources.subscribers, sources.declared) IS DISTINCT FROM (EXCLUDED.team, EXCLUDED.subscribers, true)`,
				s.Name, s.Team, subs); err != nil {
				return declareError("source", s, err)
			}
		}
		return nil
	})
}

func declareError(kind string, o Owned, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23503" {
		return fmt.Errorf("%s %q belongs to team %q, which does not exist (hookrelay teams create %s)", kind, o.Name, o.Team, o.Team)
	}
	return fmt.Errorf("declaring %s %q: %w", kind, o.Name, err)
}

// RoutesVisible returns the names of the routes the context's team sees.
func (db *DB) RoutesVisible(ctx context.Context) (map[string]bool, error) {
	ctx, cancel := db.boundOps(ctx)
	defer cancel()
	rows, err := db.pool.Query(ctx, `SELECT name FROM routes`)
	if err != nil {
		return nil, fmt.Errorf("reading routes: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("reading routes: %w", err)
	}
	out := make(map[string]bool, len(names))
	for _, n := range names {
		out[n] = true
	}
	return out, nil
}

// Isolation is what keeps the teams apart on a connection's role.
type Isolation struct {
	// Role is the role the connection logged in as.
	Role string
	// Bypass names why the role's rows are not held to row-level
	// security ("superuser", "bypassrls", "owns table events"); "" when
	// they are.
	Bypass string
	// Teams counts the teams other than the platform team.
	Teams int
}

// Isolation reads how the pool's role stands to row-level security.
func (db *DB) Isolation(ctx context.Context) (Isolation, error) {
	ctx, cancel := db.boundOps(ctx)
	defer cancel()
	var iso Isolation
	err := db.pool.QueryRow(ctx, `SELECT current_user, (SELECT count(*) FROM teams WHERE name <> $1)`, PlatformTeam).Scan(&iso.Role, &iso.Teams)
	if err != nil {
		return iso, fmt.Errorf("reading the database role: %w", err)
	}
	iso.Bypass, err = roleBypass(ctx, db.pool, iso.Role)
	return iso, err
}

// roleBypass names why row-level security does not hold role ("superuser",
// "bypassrls", "owns table events"), "" when it does.
func roleBypass(ctx context.Context, q querier, role string) (string, error) {
	var super, bypass bool
	var owned *string
	if err := q.QueryRow(ctx, `
		SELECT r.rolsuper, r.rolbypassrls,
		       (SELECT min(c.relname) FROM pg_class c WHERE c.relowner = r.oid AND c.relnamespace = current_schema()::regnamespace)
		FROM pg_roles r WHERE r.rolname = $1`, role).Scan(&super, &bypass, &owned); err != nil {
		return "", fmt.Errorf("reading role %q: %w", role, err)
	}
	switch {
	case super:
		return "superuser", nil
	case bypass:
		return "bypassrls", nil
	case owned != nil:
		return "owns table " + *owned, nil
	}
	return "", nil
}

// RequireIsolation refuses a role that row-level security does not hold
// once there is a team besides the platform team: its processes would
// show every team's rows to each. Without such a team it returns a
// warning to log ("" when none).
func (db *DB) RequireIsolation(ctx context.Context) (warning string, err error) {
	iso, err := db.Isolation(ctx)
	if err != nil {
		return "", err
	}
	if iso.Bypass == "" {
		return "", nil
	}
	msg := fmt.Sprintf("database.url logs in as %q (%s), which row-level security does not hold", iso.Role, iso.Bypass)
	if iso.Teams > 0 {
		return "", fmt.Errorf("%s, and %d team(s) besides %q exist: their rows would not be kept apart; "+
			"set database.url to a role that owns no table and database.migrate_url to the owner, then run hookrelay migrate, which creates the first", msg, iso.Teams, PlatformTeam)
	}
	return msg + ": fine while the platform team is the only one; set database.migrate_url to this role and database.url to one that owns nothing before creating teams", nil
}
