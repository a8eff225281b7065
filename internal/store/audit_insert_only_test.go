package store_test

import (
	"context"
	"testing"

	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// requireAuditInsertOnly: logged in as appURL, with every team's reach
// and with one team's, the audit log takes rows and shows them, and no
// row can be changed or removed (permission denied, 42501).
func requireAuditInsertOnly(t *testing.T, appURL string) {
	t.Helper()
	ctx := context.Background()
	for _, team := range []string{store.TeamAll, store.PlatformTeam} {
		cfg, err := pgx.ParseConfig(appURL)
		require.NoError(t, err)
		cfg.RuntimeParams["hookrelay.team"] = team
		app, err := pgx.ConnectConfig(ctx, cfg)
		require.NoError(t, err)
		var id int64
		require.NoError(t, app.QueryRow(ctx, `INSERT INTO audit_log (actor, action, target, outcome) VALUES ('token:x', 'purge', '', 'ok') RETURNING id`).Scan(&id), team)
		var n int
		require.NoError(t, app.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE id = $1`, id).Scan(&n), team)
		require.Equal(t, 1, n, team)
		for _, sql := range []string{
			`UPDATE audit_log SET outcome = 'failed' WHERE id = $1`,
			`DELETE FROM audit_log WHERE id = $1`,
		} {
			_, err := app.Exec(ctx, sql, id)
			requirePgCode(t, err, "42501")
		}
		_, err = app.Exec(ctx, `TRUNCATE audit_log`)
		requirePgCode(t, err, "42501")
		require.NoError(t, app.Close(ctx))
	}
}

// Issue 38, hardening: the processes' role adds audit rows and reads
// them, and can neither change nor delete one: what an operator did
// stays written, whatever a process that is broken into does.
func TestApplicationRoleCannotChangeTheAuditLog(t *testing.T) {
	ownerURL := storetest.NewDatabase(t)
	requireAuditInsertOnly(t, storetest.AppURL(t, ownerURL))
}

// A database whose processes' role was granted every right on the audit
// log by an earlier hookrelay migrate loses the right to change it with
// the migration, before any EnsureAppRole runs again.
func TestMigrationTakesBackTheRightToChangeTheAuditLog(t *testing.T) {
	url := emptyDatabase(t)
	require.NoError(t, store.MigrateTo(url, 24))
	appURL := storetest.AppURLOf(url)
	ctx := context.Background()
	owner, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer owner.Close(ctx)
	_, err = owner.Exec(ctx, `DO $$ BEGIN CREATE ROLE `+storetest.AppRole+` LOGIN PASSWORD '`+storetest.AppRole+`';
		EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$`)
	require.NoError(t, err, "the role is made once per cluster")
	_, err = owner.Exec(ctx, `GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON audit_log TO `+storetest.AppRole)
	require.NoError(t, err, "as the release before granted (the role is made once per cluster)")
	_, err = owner.Exec(ctx, `GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO `+storetest.AppRole)
	require.NoError(t, err)
	_, err = store.Migrate(ctx, url)
	require.NoError(t, err)
	requireAuditInsertOnly(t, appURL)
}
