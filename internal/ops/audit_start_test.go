package ops_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/routeset"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/stretchr/testify/require"
)

// errCrash stands for the process dying half-way through a change: what
// the audit log holds by then is what a crash leaves.
var errCrash = errors.New("the process died here")

// crashingStore is the real store, but for the first step of a purge and
// of a replay's enqueue, where it reads what the audit log holds then
// and "dies".
type crashingStore struct {
	*store.DB
	seen *[]store.AuditEntry
}

func (s crashingStore) look(ctx context.Context) {
	rows, _, err := s.AuditList(ctx, store.AuditFilter{Limit: 100})
	if err == nil {
		*s.seen = rows
	}
}

func (s crashingStore) Purge(ctx context.Context, _ store.PurgeConfig) (store.PurgeResult, error) {
	s.look(ctx)
	return store.PurgeResult{}, errCrash
}

func (s crashingStore) ReplayEnqueueBy(ctx context.Context, _ uuid.UUID, _ []store.ReplayPair, _, _ bool) ([]store.ReplayPair, error) {
	s.look(ctx)
	return nil, errCrash
}

// crashingDeadLetters "dies" as a requeue starts moving letters.
type crashingDeadLetters struct {
	ops.DeadLetters
	st crashingStore
}

func (d crashingDeadLetters) Requeue(ctx context.Context, _ string, _ int, _ func(int, int)) (int, error) {
	d.st.look(ctx)
	return 0, errCrash
}

// Issue 38, hardening: a replay, a purge and a requeue span many
// transactions, so each writes its audit row before it changes anything
// (outcome "started", committed in Postgres) and a second row when it
// ends (the log is added to, never changed): a process that dies half-way
// leaves the change's row behind, never a change nobody logged.
func TestLongChangesAreAuditedBeforeTheyStart(t *testing.T) {
	t.Parallel()
	svc, db := newRouteService(t)
	var seen []store.AuditEntry
	st := crashingStore{DB: db, seen: &seen}
	svc.Store = st
	svc.DeadLetters = crashingDeadLetters{st: st}
	svc.RoutesNow = func() *routeset.Set {
		return routeset.Of(config.Route{Name: "billing", Bindings: []string{"acme.invoice.*"}})
	}
	ctx := actorCtx()
	// An event billing never had: a replay enqueues it.
	ev := &webhook.Event{ID: uuid.Must(uuid.NewV7()), Source: "acme", IdempotencyKey: "evt_1", EventType: "invoice.paid",
		ContentType: "application/json", Headers: http.Header{}, Body: []byte(`{}`), ReceivedAt: time.Now()}
	id, _, err := db.EventInsert(ctx, ev, nil)
	require.NoError(t, err)

	for _, c := range []struct {
		action string
		run    func() error
	}{
		{"replay", func() error { _, err := svc.Replay(ctx, ops.ReplayRequest{EventID: id}); return err }},
		{"purge", func() error { _, err := svc.Purge(ctx, ops.PurgeRequest{OlderThan: 24 * time.Hour}); return err }},
		{"dead.requeue", func() error { _, err := svc.DeadRequeue(ctx, "billing", 0, nil); return err }},
	} {
		seen = nil
		require.ErrorIs(t, c.run(), errCrash, c.action)
		require.NotEmpty(t, seen, "%s: the change began with its audit row written", c.action)
		started := seen[0]
		require.Equal(t, c.action, started.Action)
		require.Equal(t, "started", started.Outcome, "%s: the row written before the change", c.action)

		rows, _, err := db.AuditList(ctx, store.AuditFilter{Action: c.action, Limit: 10})
		require.NoError(t, err)
		require.Len(t, rows, 2, "%s: the start and, as a second row, how it ended", c.action)
		end := rows[0]
		require.Equal(t, "failed", end.Outcome, c.action)
		require.Equal(t, started.Args, end.Args, c.action)
		require.EqualValues(t, started.ID, end.Result["started"], "%s: the end row names its start", c.action)
		require.Equal(t, rows[1].ID, started.ID)
		require.Equal(t, "started", rows[1].Outcome, "%s: the start row is as written", c.action)
	}

	// A request refused at once (an unknown event, an unknown route)
	// changed nothing: no row.
	_, err = svc.Replay(ctx, ops.ReplayRequest{EventID: uuid.Must(uuid.NewV7())})
	require.ErrorIs(t, err, ops.ErrNotFound)
	_, err = svc.Replay(ctx, ops.ReplayRequest{Filter: store.EventFilter{Route: "nosuch"}})
	require.ErrorIs(t, err, ops.ErrUnknownRoute)
	_, total, err := db.AuditList(ctx, store.AuditFilter{Action: "replay", Limit: 10})
	require.NoError(t, err)
	require.EqualValues(t, 2, total, "the refusals wrote nothing")
}
