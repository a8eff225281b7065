package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/stretchr/testify/require"
)

// Issue 38, first-time user 6: the sender's id finds an event from the
// shell as the console's find box does: events show takes it (asking for
// --source when two sources used it), events list --key lists its events.
func TestEventsBySendersID(t *testing.T) {
	t.Parallel()
	s, db, _ := opsShell(t)
	id := insertEvent(t, db, "evt_2", time.Minute)
	other := insertEvent(t, db, "evt_3", 0)

	res := s.run("hookrelay", "events", "show", "evt_2")
	require.Equal(t, 0, res.code, res)
	require.Contains(t, res.stdout, "event      "+id.String())
	require.Contains(t, res.stdout, "key        evt_2")

	res = s.run("hookrelay", "events", "list", "--key", "evt_2")
	require.Equal(t, 0, res.code, res)
	require.Contains(t, res.stdout, id.String())
	require.NotContains(t, res.stdout, other.String())
	require.Contains(t, res.stdout, "1 event(s)")
	res = s.run("hookrelay", "events", "list", "--key", "evt_2", "--json")
	require.Equal(t, 0, res.code, res)
	var list ops.EventList
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &list))
	require.Equal(t, int64(1), list.Total)
	require.Equal(t, id, list.Items[0].ID)

	// A second source used the same id: show asks which.
	acme, _, err := db.EventInsert(context.Background(), &webhook.Event{
		ID: uuid.Must(uuid.NewV7()), Source: "acme", IdempotencyKey: "evt_2", EventType: "order.paid",
		ContentType: "application/json", Body: []byte(`{}`), ReceivedAt: time.Now(),
	}, nil)
	require.NoError(t, err)
	res = s.run("hookrelay", "events", "show", "evt_2")
	require.Equal(t, 1, res.code, res)
	require.Contains(t, res.stderr, `"evt_2" is the id of 2 events, of sources acme, demo: give --source`)
	res = s.run("hookrelay", "events", "show", "evt_2", "--source", "acme")
	require.Equal(t, 0, res.code, res)
	require.Contains(t, res.stdout, "event      "+acme.String())
	res = s.run("hookrelay", "events", "list", "--key", "evt_2")
	require.Equal(t, 0, res.code, res)
	require.Contains(t, res.stdout, "2 event(s)")

	// Our own id still works, and an id nothing has is said so.
	res = s.run("hookrelay", "events", "show", other.String())
	require.Equal(t, 0, res.code, res)
	require.Contains(t, res.stdout, "key        evt_3")
	res = s.run("hookrelay", "events", "show", "evt_404")
	require.Equal(t, 1, res.code, res)
	require.Contains(t, res.stderr, `no event has our id or the sender's id "evt_404"`)
}
