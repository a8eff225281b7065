package store

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// appendOnly are the tables the processes' role adds rows to and reads,
// and never changes: what an operator did stays written (migration 25).
var appendOnly = map[string]bool{"audit_log": true}

// AppRole reports what EnsureAppRole did.
type AppRole struct {
	Name    string
	Created bool
	// Tables counts the tables the role was granted rows of.
	Tables int
}

// EnsureAppRole makes the role of appURL the one the processes log in as:
// it connects to ownerURL (the migration role, which owns the tables),
// creates the role when missing (LOGIN, with appURL's password), grants it
// the rows of every table that is not a partition (a partition is reached
// through its parent, whose policies then apply; the audit log's to add
// and read only), the sequences and the
// two partition functions and the search by body, and checks that row-level security holds it:
// not a superuser, no BYPASSRLS, no table of its own. Last it logs in as
// appURL. Safe to run again; run after every Migrate, since a migration
// may add a table.
func EnsureAppRole(ctx context.Context, ownerURL, appURL string) (AppRole, error) {
	var out AppRole
	app, err := url.Parse(appURL)
	if err != nil || app.User == nil || app.User.Username() == "" {
		return out, errors.New("database.url names no user: the processes need a role of their own")
	}
	out.Name = app.User.Username()
	oc, err := pgx.ParseConfig(ownerURL)
	if err != nil {
		return out, fmt.Errorf("parsing database.migrate_url %s: %w", Redact(ownerURL), errors.Unwrap(err))
	}
	if oc.User == out.Name {
		return out, fmt.Errorf("database.url and database.migrate_url log in as the same role %q: the processes must log in as a role that owns no table, "+
			"for row-level security to hold them. Either set database.url to a role of its own that owns nothing (hookrelay migrate creates it "+
			"with the URL's user and password, as in config.yaml: postgres://hookrelay_app:PASSWORD@HOST/DB), or, for a relay of the platform team alone, "+
			"leave database.migrate_url empty (the processes then log in as the owner, and warn so at start)", out.Name)
	}
	conn, err := pgx.Connect(ctx, ownerURL)
	if err != nil {
		return out, fmt.Errorf("database.migrate_url: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))

	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)`, out.Name).Scan(&exists); err != nil {
		return out, fmt.Errorf("reading roles: %w", err)
	}
	if !exists {
		create := `CREATE ROLE ` + pgx.Identifier{out.Name}.Sanitize() + ` LOGIN`
		if pw, set := app.User.Password(); set {
			// A literal: CREATE ROLE takes no parameters. Quoted as
			// format('%L') does, by Postgres itself.
			var lit string
			if err := conn.QueryRow(ctx, `SELECT quote_literal($1::text)`, pw).Scan(&lit); err != nil {
				return out, fmt.Errorf("quoting the password: %w", err)
			}
			create += ` PASSWORD ` + lit
		}
		if _, err := conn.Exec(ctx, create); err != nil {
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || (pgErr.Code != "42710" && pgErr.Code != "23505") { // made at the same time
				return out, fmt.Errorf("creating role %q (the migration role needs CREATEROLE, or create it by hand: CREATE ROLE %s LOGIN PASSWORD '...'): %w",
					out.Name, out.Name, err)
			}
		} else {
			out.Created = true
		}
	}
	bypass, err := roleBypass(ctx, conn, out.Name)
	if err != nil {
		return out, err
	}
	if bypass != "" {
		return out, fmt.Errorf("role %q of database.url: row-level security does not hold it (%s); it must be no superuser, without BYPASSRLS, and own no table (ALTER ... OWNER TO the migration role)", out.Name, bypass)
	}

	role := pgx.Identifier{out.Name}.Sanitize()
	rows, err := conn.Query(ctx, `
		SELECT c.relname FROM pg_class c
		WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
		ORDER BY 1`)
	if err != nil {
		return out, fmt.Errorf("listing tables: %w", err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return out, fmt.Errorf("listing tables: %w", err)
	}
	var schema, database string
	if err := conn.QueryRow(ctx, `SELECT current_schema(), current_database()`).Scan(&schema, &database); err != nil {
		return out, fmt.Errorf("reading the schema: %w", err)
	}
	grants := []string{
		`GRANT CONNECT ON DATABASE ` + pgx.Identifier{database}.Sanitize() + ` TO ` + role,
		`GRANT USAGE ON SCHEMA ` + pgx.Identifier{schema}.Sanitize() + ` TO ` + role,
		`GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA ` + pgx.Identifier{schema}.Sanitize() + ` TO ` + role,
		`GRANT EXECUTE ON FUNCTION hookrelay_ensure_partitions(date, date), hookrelay_drop_day(date), ` +
			`hookrelay_event_ids_by_body(jsonb, timestamptz, timestamptz, uuid, uuid, timestamptz, uuid, boolean, int), ` +
			`hookrelay_emit(text, text, text, jsonb, interval) TO ` + role,
	}
	for _, t := range tables {
		table := pgx.Identifier{t}.Sanitize()
		if appendOnly[t] {
			grants = append(grants, `GRANT SELECT, INSERT ON `+table+` TO `+role,
				`REVOKE UPDATE, DELETE, TRUNCATE ON `+table+` FROM `+role) // what an earlier release gave
			continue
		}
		grants = append(grants, `GRANT SELECT, INSERT, UPDATE, DELETE ON `+table+` TO `+role)
	}
	if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, g := range grants {
			if _, err := tx.Exec(ctx, g); err != nil {
				return fmt.Errorf("%s: %w", g, err)
			}
		}
		return nil
	}); err != nil {
		return out, fmt.Errorf("granting role %q: %w", out.Name, err)
	}
	out.Tables = len(tables)

	ac, err := pgx.Connect(ctx, appURL)
	if err != nil {
		return out, fmt.Errorf("database.url cannot log in as %q: %w", out.Name, err)
	}
	return out, ac.Close(ctx)
}
