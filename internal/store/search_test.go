package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// Issue 42: a search by a nested body field finds exactly the matching
// events, across two day partitions, through the index, and none of
// another team's (the search's function reads with the migration role's
// reach and applies the caller's).
func TestSearchFindsANestedFieldAcrossDaysAndNoneOfAnotherTeams(t *testing.T) {
	ownerURL, appURL := rlsDatabase(t)
	ctx := context.Background()
	owner, err := pgx.Connect(ctx, ownerURL)
	require.NoError(t, err)
	defer owner.Close(ctx)
	now := time.Now().UTC()
	yesterday := now.Add(-24 * time.Hour)
	_, err = owner.Exec(ctx, `SELECT hookrelay_ensure_partitions($1::date, $2::date)`, now.Add(-72*time.Hour).Format(time.DateOnly), now.Format(time.DateOnly))
	require.NoError(t, err)
	insert := func(source, key, body string, at time.Time) {
		t.Helper()
		_, err := owner.Exec(ctx, `
			INSERT INTO events (id, source, idempotency_key, event_type, body, keyed, received_at)
			VALUES (hookrelay_uuid7($4), $1, $2, 'charge.succeeded', convert_to($3, 'UTF8'), true, $4)`, source, key, body, at)
		require.NoError(t, err, key)
	}
	insert("team-a-source", "a-today", `{"data":{"object":{"customer":"cus_Q8x","amount":5}}}`, now.Add(-time.Minute))
	insert("team-a-source", "a-yesterday", ` {"data":{"object":{"customer":"cus_Q8x","amount":7}}}`, yesterday.Add(time.Hour))
	insert("team-a-source", "a-other", `{"data":{"object":{"customer":"cus_other"}}}`, now.Add(-2*time.Minute))
	insert("team-a-source", "a-nested-deeper", `{"data":{"object":{"x":{"customer":"cus_Q8x"}}}}`, now.Add(-3*time.Minute))
	insert("team-a-source", "a-form", `customer=cus_Q8x`, now.Add(-4*time.Minute))
	insert("team-a-source", "a-broken", `{"data":{"object":{"customer":"cus_Q8x"`, now.Add(-5*time.Minute))
	insert("team-a-source", "a-too-old", `{"data":{"object":{"customer":"cus_Q8x"}}}`, now.Add(-3*24*time.Hour))
	insert("team-b-source", "b-today", `{"data":{"object":{"customer":"cus_Q8x"}}}`, now.Add(-30*time.Second))

	db, err := store.Open(ctx, store.Config{URL: appURL, MaxConns: 2, TeamFromContext: true})
	require.NoError(t, err)
	defer db.Close()
	search := func(team, where string, limit int, before store.ReplayCursor) []string {
		t.Helper()
		s, err := ops.CompileSearch(where)
		require.NoError(t, err)
		f := store.EventFilter{Since: now.Add(-2 * 24 * time.Hour), Search: s, Limit: limit, Before: before}
		rows, err := db.EventList(store.WithTeam(ctx, team), f)
		require.NoError(t, err, "%s searching %s", team, where)
		keys := []string{}
		for _, r := range rows {
			keys = append(keys, r.IdempotencyKey)
		}
		return keys
	}
	const customer = `body.data.object.customer == "cus_Q8x"`
	require.Equal(t, []string{"a-today", "a-yesterday"}, search("team-a", customer, 10, store.ReplayCursor{}),
		"both days' matches, newest first; not another customer's, not one nested elsewhere, not a form body, not another team's, not one before the window")
	require.Equal(t, []string{"b-today"}, search("team-b", customer, 10, store.ReplayCursor{}))
	require.Equal(t, []string{"b-today", "a-today", "a-yesterday"}, search(store.TeamAll, customer, 10, store.ReplayCursor{}))
	require.Empty(t, search("", customer, 10, store.ReplayCursor{}), "no team finds nothing")
	require.Equal(t, []string{"a-yesterday"}, search("team-a", customer+` && body.data.object.amount > 5`, 10, store.ReplayCursor{}),
		"the rest of the expression judges what the index found")
	require.Equal(t, []string{"a-today", "a-other", "a-yesterday"}, search("team-a", `body.data.object.customer.startsWith("cus_")`, 10, store.ReplayCursor{}),
		"an expression the index cannot serve reads the window")

	// Paging: the cursor of the first page's last event gives the rest.
	first := search("team-a", customer, 1, store.ReplayCursor{})
	require.Equal(t, []string{"a-today"}, first)
	var cur store.ReplayCursor
	require.NoError(t, owner.QueryRow(ctx, `SELECT received_at, id FROM events WHERE idempotency_key = 'a-today'`).Scan(&cur.ReceivedAt, &cur.ID))
	require.Equal(t, []string{"a-yesterday"}, search("team-a", customer, 1, cur))

	s, err := ops.CompileSearch(customer)
	require.NoError(t, err)
	n, err := db.EventCountByFilter(store.WithTeam(ctx, "team-a"), store.EventFilter{Since: now.Add(-48 * time.Hour), Search: s}, 0)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	cands, err := db.ReplayCandidatesPage(store.WithTeam(ctx, "team-a"), store.EventFilter{Since: now.Add(-48 * time.Hour), Search: s}, store.ReplayCursor{}, 10)
	require.NoError(t, err)
	require.Len(t, cands, 2)
	require.True(t, cands[0].ReceivedAt.Before(cands[1].ReceivedAt), "a replay selects oldest first")
	_, err = db.EventList(store.WithTeam(ctx, "team-a"), store.EventFilter{Search: s})
	require.ErrorIs(t, err, store.ErrSearchWindow)

	// Called directly as team A, the function names none of team B's.
	cfg, err := pgx.ParseConfig(appURL)
	require.NoError(t, err)
	cfg.RuntimeParams["hookrelay.team"] = "team-a"
	app, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer app.Close(ctx)
	var found int
	require.NoError(t, app.QueryRow(ctx, `
		SELECT count(*) FROM hookrelay_event_ids_by_body('{"data":{"object":{"customer":"cus_Q8x"}}}', now() - interval '2 days', now() + interval '1 hour',
			'00000000-0000-0000-0000-000000000000', 'ffffffff-ffff-ffff-ffff-ffffffffffff', NULL, NULL, true, 100)`).Scan(&found))
	require.Equal(t, 2, found)
}
