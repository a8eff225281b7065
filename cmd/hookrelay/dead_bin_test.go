package main

import (
	"context"
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"github.com/google/uuid"
	hamqp "github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/webhook"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

// Issue 18, item 12: after a replay delivered a dead pair, its dead letter
// is stale. dead list shows each letter's pair state from Postgres, can
// show one state only, and dead drop --delivered removes the letters whose
// pair is delivered, leaving every other.
func TestDeadLettersShowAndDropByPairState(t *testing.T) {
	t.Parallel()
	s, db, prefix := opsShell(t)
	res := s.run("hookrelay", "topology", "apply")
	require.Equal(t, 0, res.code, res)
	// topology apply goes through ops: its start and its end are audited,
	// with what it declared.
	var rows int
	var result string
	require.NoError(t, db.Pool().QueryRow(context.Background(),
		`SELECT count(*), max(result::text) FILTER (WHERE outcome = 'ok') FROM audit_log WHERE action = 'topology.apply' AND actor LIKE 'cli:%'`).Scan(&rows, &result))
	require.Equal(t, 2, rows, "started, then ok")
	require.Contains(t, result, `"queues"`)
	conn := amqptest.Dial(t)
	ch := amqptest.Channel(t, conn)
	dead := hamqp.Names{Prefix: prefix}.DeadQueue("billing")

	replayed := insertEvent(t, db, "evt_replayed", time.Minute) // dead, then delivered by a replay
	attempt(t, db, replayed, 1, 410, webhook.StateDead)
	attempt(t, db, replayed, 2, 200, webhook.StateDelivered)
	stillDead := insertEvent(t, db, "evt_dead", time.Minute)
	attempt(t, db, stillDead, 1, 410, webhook.StateDead)
	purged := uuid.Must(uuid.NewV7()) // its event is gone from Postgres
	letter := func(id uuid.UUID) {
		require.NoError(t, ch.PublishWithContext(context.Background(), "", dead, false, false, amqp.Publishing{
			MessageId: id.String(), Body: []byte(`{}`),
			Headers: amqp.Table{hamqp.HeaderEventID: id.String(), hamqp.HeaderSource: "demo", hamqp.HeaderEventType: "invoice.paid",
				hamqp.HeaderAttempts: int32(1), hamqp.HeaderLastStatus: int32(410), hamqp.HeaderDeadReason: "no_retry_status"},
		}))
	}
	for _, id := range []uuid.UUID{replayed, stillDead, purged} {
		letter(id)
	}
	amqptest.WaitCount(t, ch, dead, 3, 10*time.Second)

	res = s.run("hookrelay", "dead", "list", "--route", "billing")
	require.Equal(t, 0, res.code, res)
	t.Log("\n" + res.stdout)
	require.Regexp(t, `EVENT\s+STATE\s+SOURCE`, res.stdout)
	require.Regexp(t, regexp.MustCompile(replayed.String()+`\s+delivered\s+demo`), res.stdout)
	require.Regexp(t, regexp.MustCompile(stillDead.String()+`\s+dead\s+demo`), res.stdout)
	require.Regexp(t, regexp.MustCompile(purged.String()+`\s+missing\s+demo`), res.stdout)
	require.Equal(t, "3 dead letter(s) in "+dead, lastLine(res.stdout))

	res = s.run("hookrelay", "dead", "list", "--route", "billing", "--state", "delivered", "--json")
	require.Equal(t, 0, res.code, res)
	var list struct {
		Total, Shown, Read int
		Items              []struct {
			EventID string `json:"event_id"`
			State   string `json:"state"`
		}
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &list), res.stdout)
	require.Equal(t, 3, list.Total)
	require.Equal(t, 3, list.Read)
	require.Equal(t, 1, list.Shown)
	require.Equal(t, replayed.String(), list.Items[0].EventID)
	require.Equal(t, "delivered", list.Items[0].State)

	res = s.run("hookrelay", "dead", "list", "--route", "billing", "--state", "gone")
	require.Equal(t, 2, res.code, res)
	require.Contains(t, res.stderr, `--state must be one of pending, retrying, delivered, dead, stale, missing`)

	res = s.run("hookrelay", "dead", "drop", "--route", "billing")
	require.Equal(t, 2, res.code, res)
	require.Contains(t, res.stderr, "--delivered")

	res = s.run("hookrelay", "dead", "drop", "--route", "billing", "--delivered", "--dry-run")
	require.Equal(t, 0, res.code, res)
	require.Equal(t, "would drop 1 of 3 dead letter(s) in "+dead+" (their pair is delivered)\n", res.stdout)
	amqptest.WaitCount(t, ch, dead, 3, 5*time.Second)

	res = s.run("hookrelay", "dead", "drop", "--route", "billing", "--delivered")
	require.Equal(t, 0, res.code, res)
	require.Equal(t, "dropped 1 of 3 dead letter(s) in "+dead+" (their pair is delivered)\n", res.stdout)
	amqptest.WaitCount(t, ch, dead, 2, 5*time.Second)

	res = s.run("hookrelay", "dead", "list", "--route", "billing")
	require.Equal(t, 0, res.code, res)
	require.NotContains(t, res.stdout, replayed.String())
	require.Contains(t, res.stdout, stillDead.String())
	require.Contains(t, res.stdout, purged.String())
	require.Equal(t, "2 dead letter(s) in "+dead, lastLine(res.stdout))
}
