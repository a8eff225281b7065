package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// globalTables hold nothing of any team, so row-level security does not
// apply to them: every other table must have it.
var globalTables = []string{"schema_migrations", "hookrelay_partitioning"}

// fillTeam writes, as the owner (a superuser: no policy applies), a row of
// team's in every table: a route and a source of its own, an event of its
// source delivered to its route with an attempt, and a delivery with an
// attempt of the platform's shared event; a token, an audit row, a job,
// route state and versions, activity.
func fillTeam(t *testing.T, owner *pgx.Conn, team, shared string) {
	t.Helper()
	ctx := context.Background()
	route, source := team+"-route", team+"-source"
	var event string
	steps := []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO teams (name) VALUES ($1) ON CONFLICT DO NOTHING`, []any{team}},
		{`INSERT INTO routes (name, team) VALUES ($1, $2)`, []any{route, team}},
		{`INSERT INTO sources (name, team) VALUES ($1, $2)`, []any{source, team}},
		{`INSERT INTO api_tokens (name, role, secret_hash, created_by, team) VALUES ($1, 'admin', convert_to($1::text, 'UTF8'), 'test', $2)`, []any{team + "-token", team}},
		{`INSERT INTO audit_log (actor, action, target, outcome, team) VALUES ('token:' || $1, 'pause', $1, 'ok', $1)`, []any{team}},
		{`INSERT INTO api_jobs (id, kind, actor, state, team) VALUES (gen_random_uuid(), 'replay', 'token:' || $1, 'succeeded', $1)`, []any{team}},
		{`INSERT INTO route_state (route) VALUES ($1)`, []any{route}},
		{`INSERT INTO system_events (kind, subject, team, body) VALUES ('route.paused', $1, $2, '{}')`, []any{route, team}},
		{`INSERT INTO system_event_limits (kind, subject, last_at) VALUES ('route.paused', $1, now())`, []any{route}},
		{`INSERT INTO activity_minutes (minute, kind, name, outcome, n) VALUES (date_trunc('minute', now()), 'delivery', $1, 'delivered', 1),
		                                                                    (date_trunc('minute', now()), 'ingest', $2, 'stored', 1)`, []any{route, source}},
	}
	for _, s := range steps {
		_, err := owner.Exec(ctx, s.sql, s.args...)
		require.NoError(t, err, s.sql)
	}
	require.NoError(t, owner.QueryRow(ctx, `
		INSERT INTO events (id, source, idempotency_key, event_type, body, keyed)
		VALUES (hookrelay_uuid7(now()), $1, $1 || '-key', 'invoice.paid', '{"look":"alike"}', true) RETURNING id::text`, source).Scan(&event))
	for _, s := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO event_keys (source, idempotency_key, event_id) VALUES ($1, $1 || '-key', $2)`, []any{source, event}},
		{`INSERT INTO outbox (event_id, routing_key) VALUES ($1, $2 || '.invoice.paid')`, []any{event, source}},
		{`INSERT INTO route_resource_versions (route, source, resource, version, event_id) VALUES ($1, $2, 'cus_1', '1', $3)`, []any{route, source, event}},
	} {
		_, err := owner.Exec(ctx, s.sql, s.args...)
		require.NoError(t, err, s.sql)
	}
	for _, ev := range []string{event, shared} {
		_, err := owner.Exec(ctx, `
			WITH d AS (INSERT INTO deliveries (event_id, route, state, attempts) VALUES ($1, $2, 'retrying', 1) RETURNING id, event_id)
			INSERT INTO delivery_attempts (delivery_id, event_id, attempt, started_at, duration_ms, status, outcome)
			SELECT id, event_id, 1, now(), 12, 500, 'retry' FROM d`, ev, route)
		require.NoError(t, err)
	}
}

// rlsDatabase is a database with two look-alike teams and a platform
// event delivered to both, with its owner's and the application role's
// URLs.
func rlsDatabase(t *testing.T) (ownerURL, appURL string) {
	t.Helper()
	ownerURL = storetest.NewDatabase(t)
	appURL = storetest.AppURL(t, ownerURL)
	ctx := context.Background()
	owner, err := pgx.Connect(ctx, ownerURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = owner.Close(ctx) })
	var shared string
	require.NoError(t, owner.QueryRow(ctx, `
		INSERT INTO events (id, source, idempotency_key, event_type, body, keyed)
		VALUES (hookrelay_uuid7(now()), 'stripe', 'evt_shared', 'invoice.paid', '{}', true) RETURNING id::text`).Scan(&shared))
	_, err = owner.Exec(ctx, `INSERT INTO console_sessions (token, data, expiry) VALUES ('s', 'x', now() + interval '1 hour')`)
	require.NoError(t, err)
	fillTeam(t, owner, "team-a", shared)
	fillTeam(t, owner, "team-b", shared)
	return ownerURL, appURL
}

// scopedTables lists the tables of the schema that are not partitions and
// not global.
func scopedTables(t *testing.T, conn *pgx.Conn) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), `
		SELECT c.relname FROM pg_class c
		WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
		ORDER BY 1`)
	require.NoError(t, err)
	all, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return slices.DeleteFunc(all, func(n string) bool { return slices.Contains(globalTables, n) })
}

func count(t *testing.T, conn *pgx.Conn, table string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT count(*) FROM `+pgx.Identifier{table}.Sanitize()).Scan(&n), table)
	return n
}

// TestApplicationRoleWithoutATeamSeesNothing: logged in as the role the
// processes use, with no hookrelay.team setting (and with an empty one),
// every table but the global ones counts 0 rows, though each holds rows
// of both teams; every such table has row-level security enabled and
// forced with a policy; the role owns nothing.
func TestApplicationRoleWithoutATeamSeesNothing(t *testing.T) {
	ownerURL, appURL := rlsDatabase(t)
	ctx := context.Background()
	owner, err := pgx.Connect(ctx, ownerURL)
	require.NoError(t, err)
	defer owner.Close(ctx)
	app, err := pgx.Connect(ctx, appURL) // no hookrelay.team: pgx.Connect sets none
	require.NoError(t, err)
	defer app.Close(ctx)

	tables := scopedTables(t, owner)
	require.Contains(t, tables, "events")
	require.Contains(t, tables, "deliveries")
	for _, table := range tables {
		require.Positive(t, count(t, owner, table), "the test must fill %s, or its 0 below proves nothing", table)
		require.Zero(t, count(t, app, table), "%s without a team", table)
	}
	_, err = app.Exec(ctx, `SELECT set_config('hookrelay.team', '', false)`)
	require.NoError(t, err)
	for _, table := range tables {
		require.Zero(t, count(t, app, table), "%s with an empty team", table)
	}

	for _, table := range tables {
		var enabled, forced bool
		var policies int
		require.NoError(t, owner.QueryRow(ctx, `
			SELECT c.relrowsecurity, c.relforcerowsecurity, (SELECT count(*) FROM pg_policy p WHERE p.polrelid = c.oid)
			FROM pg_class c WHERE c.oid = $1::regclass`, table).Scan(&enabled, &forced, &policies))
		require.True(t, enabled && forced, "%s: row-level security must be enabled and forced", table)
		require.Positive(t, policies, "%s has no policy", table)
	}

	var owned []string
	rows, err := owner.Query(ctx, `SELECT c.relname FROM pg_class c WHERE c.relowner = $1::regrole`, storetest.AppRole)
	require.NoError(t, err)
	owned, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Empty(t, owned, "the application role owns relations")
	var super, bypass bool
	require.NoError(t, owner.QueryRow(ctx, `SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = $1`, storetest.AppRole).Scan(&super, &bypass))
	require.False(t, super || bypass)

	// A day partition is out of reach: only the parents are granted.
	var partition string
	require.NoError(t, owner.QueryRow(ctx, `SELECT min(c.relname) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'events'::regclass AND c.relname LIKE 'events_p%'`).Scan(&partition))
	_, err = app.Exec(ctx, `SELECT count(*) FROM `+pgx.Identifier{partition}.Sanitize())
	requirePgCode(t, err, "42501")
}

// TestTeamSeesOnlyItsOwnRows: as team A, each table holds A's rows only
// (the shared platform event is seen through A's delivery, not B's), and
// B's rows can be neither changed nor made.
func TestTeamSeesOnlyItsOwnRows(t *testing.T) {
	_, appURL := rlsDatabase(t)
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(appURL)
	require.NoError(t, err)
	cfg.RuntimeParams["hookrelay.team"] = "team-a"
	app, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer app.Close(ctx)

	strings := func(sql string) []string {
		rows, err := app.Query(ctx, sql)
		require.NoError(t, err, sql)
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err, sql)
		slices.Sort(out)
		return out
	}
	require.Equal(t, []string{"team-a"}, strings(`SELECT name FROM teams`))
	require.Equal(t, []string{"team-a-route"}, strings(`SELECT name FROM routes`))
	require.Equal(t, []string{"team-a-source"}, strings(`SELECT name FROM sources`))
	require.Equal(t, []string{"team-a-route", "team-a-route"}, strings(`SELECT route FROM deliveries`))
	require.Equal(t, []string{"evt_shared", "team-a-source-key"}, strings(`SELECT idempotency_key FROM events`))
	require.Equal(t, []string{"team-a-route", "team-a-route"}, strings(`
		SELECT d.route FROM delivery_attempts a JOIN deliveries d ON d.id = a.delivery_id`))
	require.Len(t, strings(`SELECT id::text FROM delivery_attempts`), 2)
	require.Equal(t, []string{"team-a-token"}, strings(`SELECT name FROM api_tokens`))
	require.Equal(t, []string{"team-a"}, strings(`SELECT target FROM audit_log`))
	require.Equal(t, []string{"team-a"}, strings(`SELECT team FROM api_jobs`))
	require.Equal(t, []string{"team-a-route"}, strings(`SELECT route FROM route_state`))
	require.Equal(t, []string{"team-a-route"}, strings(`SELECT route FROM route_resource_versions`))
	require.Equal(t, []string{"team-a-route", "team-a-source"}, strings(`SELECT name FROM activity_minutes`))
	for _, engine := range []string{"outbox", "event_keys", "console_sessions"} {
		require.Zero(t, count(t, app, engine), engine)
	}

	// B's rows cannot be changed: they are not there.
	tag, err := app.Exec(ctx, `UPDATE deliveries SET state = 'dead' WHERE route = 'team-b-route'`)
	require.NoError(t, err)
	require.Zero(t, tag.RowsAffected())
	tag, err = app.Exec(ctx, `DELETE FROM api_tokens WHERE name = 'team-b-token'`)
	require.NoError(t, err)
	require.Zero(t, tag.RowsAffected())
	// Nor made for B, nor moved to B.
	_, err = app.Exec(ctx, `INSERT INTO routes (name, team) VALUES ('sneaky', 'team-b')`)
	requirePgCode(t, err, "42501")
	_, err = app.Exec(ctx, `UPDATE routes SET team = 'team-b' WHERE name = 'team-a-route'`)
	requirePgCode(t, err, "42501")
	_, err = app.Exec(ctx, `SELECT hookrelay_drop_day(current_date)`)
	requirePgCode(t, err, "42501")

	// What a team writes without naming its team is its own.
	var team string
	require.NoError(t, app.QueryRow(ctx, `INSERT INTO audit_log (actor, action, target, outcome) VALUES ('x', 'y', 'z', 'ok') RETURNING team`).Scan(&team))
	require.Equal(t, "team-a", team)
}

func requirePgCode(t *testing.T, err error, code string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, code, pgErr.Code, pgErr.Message)
}

// TestProcessesRoleRunsTheEngine: the store, logged in as the application
// role, ingests, claims, records, makes partitions and purges a whole day:
// everything the receiver, the dispatcher and the CLI do needs no table of
// its own.
func TestProcessesRoleRunsTheEngine(t *testing.T) {
	ownerURL := storetest.NewDatabase(t)
	appURL := storetest.AppURL(t, ownerURL)
	ctx := context.Background()
	db, err := store.Open(ctx, store.Config{URL: appURL, MaxConns: 4, ApplicationName: "rls-test"})
	require.NoError(t, err)
	defer db.Close()
	iso, err := db.Isolation(ctx)
	require.NoError(t, err)
	require.Equal(t, store.Isolation{Role: storetest.AppRole}, iso)
	require.NoError(t, db.Declare(ctx, []store.Owned{{Name: "billing", Team: store.PlatformTeam}}, []store.Owned{{Name: "stripe", Team: store.PlatformTeam}}))

	old := time.Now().UTC().AddDate(0, 0, -10)
	_, err = db.EnsurePartitionsFor(ctx, old, old)
	require.NoError(t, err)
	require.NoError(t, db.EnsurePartitions(ctx, time.Now()))
	for _, ev := range []*webhook.Event{newEventAt("stripe", "evt_old", old), newEventAt("stripe", "evt_new", time.Now())} {
		id, dup, err := db.EventInsert(ctx, ev, []string{"billing"})
		require.NoError(t, err)
		require.False(t, dup)
		require.NoError(t, recordErr(db.AttemptRecord(ctx, &webhook.Attempt{EventID: id, Route: "billing", Number: 1,
			StartedAt: ev.ReceivedAt, Outcome: webhook.StateDelivered})))
	}
	_, err = db.Pool().Exec(ctx, `DELETE FROM outbox`)
	require.NoError(t, err)
	cut := time.Now().AddDate(0, 0, -5)
	purged, err := db.Purge(ctx, store.PurgeConfig{OlderThan: cut, DedupeBefore: cut})
	require.NoError(t, err)
	require.Equal(t, int64(1), purged.Days, "the old day dropped whole, by a role that owns nothing")
	require.Equal(t, int64(1), purged.Events)
}

// TestUpgradeGivesEverythingToThePlatformTeam: a database of the previous
// release (schema 21) with a route that ran, a token and audit rows
// upgrades in place: the route, the token and the rows belong to the
// platform team, the token's reach is unchanged, and the processes' role
// (made by EnsureAppRole, as hookrelay migrate does) runs on it; the
// migration is reversible.
func TestUpgradeGivesEverythingToThePlatformTeam(t *testing.T) {
	url := emptyDatabase(t)
	require.NoError(t, store.MigrateTo(url, 21))
	ctx := context.Background()
	owner, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer owner.Close(ctx)
	for _, sql := range []string{
		`INSERT INTO route_state (route) VALUES ('billing')`,
		`INSERT INTO api_tokens (name, role, secret_hash, created_by) VALUES ('ci', 'admin', '\x01', 'cli:root')`,
		`INSERT INTO audit_log (actor, action, target, outcome) VALUES ('cli:root', 'token.create', 'ci', 'ok')`,
		`INSERT INTO api_jobs (id, kind, actor, state) VALUES (gen_random_uuid(), 'replay', 'token:ci', 'succeeded')`,
	} {
		_, err := owner.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	v, err := store.Migrate(ctx, url)
	require.NoError(t, err)
	require.Equal(t, store.LatestVersion(), v)

	var route, token, audit, job string
	require.NoError(t, owner.QueryRow(ctx, `SELECT
		(SELECT team FROM routes WHERE name = 'billing'), (SELECT team FROM api_tokens WHERE name = 'ci'),
		(SELECT team FROM audit_log WHERE target = 'ci'), (SELECT team FROM api_jobs)`).Scan(&route, &token, &audit, &job))
	require.Equal(t, []string{store.PlatformTeam, store.PlatformTeam, store.PlatformTeam, store.PlatformTeam}, []string{route, token, audit, job})

	appURL := storetest.AppURL(t, url)
	db, err := store.Open(ctx, store.Config{URL: appURL, MaxConns: 2})
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.RequireSchema(ctx))
	warning, err := db.RequireIsolation(ctx)
	require.NoError(t, err)
	require.Empty(t, warning)
	tokens, err := db.TokenList(ctx)
	require.NoError(t, err)
	require.Len(t, tokens, 1)

	// Back to 21 and up again: the down migration undoes it all.
	db.Close()
	require.NoError(t, store.MigrateTo(url, 21))
	_, err = store.Migrate(ctx, url)
	require.NoError(t, err)
}

// TestRequireIsolationRefusesAnOwnerOnceTeamsExist: a role that bypasses
// row-level security (here the superuser the tests own the tables with)
// is only warned about while the platform team is alone, and refused once
// another team exists.
func TestRequireIsolationRefusesAnOwnerOnceTeamsExist(t *testing.T) {
	db, _ := storetest.Open(t)
	ctx := context.Background()
	warning, err := db.RequireIsolation(ctx)
	require.NoError(t, err)
	require.Contains(t, warning, "superuser")
	_, err = db.Pool().Exec(ctx, `INSERT INTO teams (name) VALUES ('payments')`)
	require.NoError(t, err)
	_, err = db.RequireIsolation(ctx)
	require.ErrorContains(t, err, "1 team(s) besides \"platform\"")
}

// EnsureAppRole refuses a role that row-level security would not hold:
// here one that owns a table, and the owner's own.
func TestEnsureAppRoleRefusesARoleThePoliciesDoNotHold(t *testing.T) {
	ownerURL := storetest.NewDatabase(t)
	appURL := storetest.AppURL(t, ownerURL)
	ctx := context.Background()
	owner, err := pgx.Connect(ctx, ownerURL)
	require.NoError(t, err)
	defer owner.Close(ctx)
	_, err = owner.Exec(ctx, `CREATE TABLE stray (x int); ALTER TABLE stray OWNER TO `+storetest.AppRole)
	require.NoError(t, err)
	_, err = store.EnsureAppRole(ctx, ownerURL, appURL)
	require.ErrorContains(t, err, "owns table stray")
	_, err = store.EnsureAppRole(ctx, ownerURL, ownerURL)
	require.ErrorContains(t, err, "the same role")
}
