package ops_test

import (
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/routeset"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/stretchr/testify/require"
)

// newRouteService is ops over a real Postgres database (its own), able to
// make routes at run time: a secrets key, the config's route rules, no
// route of the config.
func newRouteService(t *testing.T) (*ops.Service, *store.DB) {
	t.Helper()
	db, _ := storetest.Open(t)
	key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	keyring, err := routeset.NewKeyring(key, nil)
	require.NoError(t, err)
	return &ops.Service{
		Store:     db,
		RoutesNow: func() *routeset.Set { return routeset.Of() },
		QueueOf:   func(route string) string { return "hookrelay.route." + route },
		Config: &config.Config{
			AMQP:       config.AMQP{ConsumerTimeout: 30 * time.Minute},
			Database:   config.Database{QueryTimeout: 5 * time.Second},
			Outbox:     config.Outbox{PublishTimeout: 10 * time.Second},
			Dispatcher: config.Dispatcher{LeaseMargin: 10 * time.Second},
			Retry:      config.Retry{Backoff: []time.Duration{time.Second}},
			Secrets:    config.Secrets{Key: key, Overlap: time.Hour},
		},
		Keyring: keyring,
	}, db
}

// auditRows reads every audit row, oldest first.
func auditRows(t *testing.T, svc *ops.Service) []ops.AuditEntry {
	t.Helper()
	rows, _, err := svc.AuditList(actorCtx(), store.AuditFilter{Limit: ops.MaxPageLimit})
	require.NoError(t, err)
	for i, j := 0, len(rows)-1; i < j; i, j = i+1, j-1 {
		rows[i], rows[j] = rows[j], rows[i]
	}
	return rows
}

// Issue 38, security 2: a route's URL may carry credentials and a token
// in its query; the route view hides them, and so does the audit log,
// which any viewer reads: the update's row holds the URL as the view
// shows it, and no row holds the secret parts.
func TestRouteAuditRowsShowTheURLAsTheRouteViewDoes(t *testing.T) {
	t.Parallel()
	svc, _ := newRouteService(t)
	ctx := actorCtx()
	first, second := "https://alice:s3cret-pw@203.0.113.10/hooks?token=q-t0ken", "https://bob:0ther-pw@203.0.113.11/in?key=k3y-value#frag"
	_, err := svc.RouteCreate(ctx, "ledger", ops.RouteInput{URL: &first, Bindings: []string{"acme.invoice.*"}})
	require.NoError(t, err)
	concurrency := 2
	d, err := svc.RouteUpdate(ctx, "ledger", ops.RouteInput{URL: &second, Concurrency: &concurrency})
	require.NoError(t, err)
	view, err := svc.RouteGet(ctx, "ledger")
	require.NoError(t, err)
	require.Equal(t, d.Settings.URL, view.Settings.URL)

	rows := auditRows(t, svc)
	require.Len(t, rows, 2)
	update := rows[1]
	require.Equal(t, "route.update", update.Action)
	require.Equal(t, view.Settings.URL, update.Args["url"], "the URL as the route view shows it")
	require.EqualValues(t, 2, update.Args["concurrency"])
	raw, err := json.Marshal(rows)
	require.NoError(t, err)
	for _, secret := range []string{"s3cret-pw", "q-t0ken", "0ther-pw", "k3y-value", "frag", "alice", "bob"} {
		require.NotContains(t, string(raw), secret, "the audit log holds no part of a URL the view hides")
	}
}

// Issue 38, security 7: every action the audit log records is one its
// filter takes: the route actions made here (all of them) each find their
// own row, as the CLI, the API (?action=) and the console filter.
func TestEveryAuditedRouteActionIsFilterable(t *testing.T) {
	t.Parallel()
	svc, _ := newRouteService(t)
	ctx := actorCtx()
	url := "https://203.0.113.10/hooks"
	_, err := svc.RouteCreate(ctx, "ledger", ops.RouteInput{URL: &url, Bindings: []string{"acme.invoice.*"}})
	require.NoError(t, err)
	timeout := "3s"
	_, err = svc.RouteUpdate(ctx, "ledger", ops.RouteInput{Timeout: &timeout})
	require.NoError(t, err)
	_, err = svc.RouteRotateSecret(ctx, "ledger", nil)
	require.NoError(t, err)
	_, err = svc.RouteReseal(ctx)
	require.NoError(t, err)
	_, err = svc.RouteDelete(ctx, "ledger", "")
	require.NoError(t, err)

	rows := auditRows(t, svc)
	var written []string
	for _, row := range rows {
		written = append(written, row.Action)
		f, err := ops.AuditFilterFlags{Action: row.Action}.Filter()
		require.NoError(t, err, "the audit log writes %s: its filter must take it", row.Action)
		f.Limit = 10
		got, total, err := svc.AuditList(ctx, f)
		require.NoError(t, err)
		require.EqualValues(t, 1, total, row.Action)
		require.Equal(t, row.ID, got[0].ID, row.Action)
	}
	require.Equal(t, []string{"route.create", "route.update", "route.rotate_secret", "route.reseal", "route.delete"}, written)
}
