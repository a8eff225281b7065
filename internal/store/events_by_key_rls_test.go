package store_test

import (
	"context"
	"testing"

	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// Issue 38, hardening: the console's find box (EventsByKey) works for a
// team's token, under row-level security: a team finds, by the sender's
// id, the events it sees (its own source's, and the platform's delivered
// to its routes), and another team's key answers as a key of nothing.
func TestTeamFindsTheEventsItSeesByKey(t *testing.T) {
	ownerURL, appURL := rlsDatabase(t)
	ctx := context.Background()
	owner, err := pgx.Connect(ctx, ownerURL)
	require.NoError(t, err)
	defer owner.Close(ctx)
	// The platform's event delivered to both teams' routes has its keys
	// too, as every ingested event does.
	_, err = owner.Exec(ctx, `INSERT INTO event_keys (source, idempotency_key, event_id)
		SELECT source, idempotency_key, id FROM events WHERE idempotency_key = 'evt_shared'`)
	require.NoError(t, err)

	db, err := store.Open(ctx, store.Config{URL: appURL, MaxConns: 2, TeamFromContext: true})
	require.NoError(t, err)
	defer db.Close()
	find := func(team, key string) []string {
		t.Helper()
		rows, err := db.EventsByKey(store.WithTeam(ctx, team), key, 10)
		require.NoError(t, err, "%s finding %s", team, key)
		var out []string
		for _, r := range rows {
			out = append(out, r.Source+" "+r.IdempotencyKey)
		}
		return out
	}
	require.Equal(t, []string{"team-a-source team-a-source-key"}, find("team-a", "team-a-source-key"), "its own source's event")
	require.Equal(t, []string{"stripe evt_shared"}, find("team-a", "evt_shared"), "the platform's event delivered to its route")
	require.Empty(t, find("team-a", "team-b-source-key"), "another team's key answers as nothing")
	require.Empty(t, find("team-a", "no-such-key"))
	require.Empty(t, find("", "team-a-source-key"), "no team sees nothing")
	require.Equal(t, []string{"team-b-source team-b-source-key"}, find("team-b", "team-b-source-key"))
	require.Equal(t, []string{"team-a-source team-a-source-key"}, find(store.TeamAll, "team-a-source-key"), "the platform finds every team's")

	// The lookup's reach ends with it: in the same transaction, the team
	// sees its own rows only, as before; a direct call answers the same.
	cfg, err := pgx.ParseConfig(appURL)
	require.NoError(t, err)
	cfg.RuntimeParams["hookrelay.team"] = "team-a"
	app, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer app.Close(ctx)
	tx, err := app.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var n int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM hookrelay_event_ids_by_key('team-b-source-key')`).Scan(&n))
	require.Zero(t, n, "another team's key answers nothing, called directly too")
	var team string
	require.NoError(t, tx.QueryRow(ctx, `SELECT current_setting('hookrelay.team')`).Scan(&team))
	require.Equal(t, "team-a", team)
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&n))
	require.Equal(t, 2, n, "team A's own event and the shared one, as before the lookup")
}
