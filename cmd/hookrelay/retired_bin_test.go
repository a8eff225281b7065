package main

import (
	"context"
	"encoding/base64"
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

// Issue 38, first-time user 7: after routes delete --dead-letter the
// route retires, its dead-letter queue stays "for the operator": dead
// list reads it, dead requeue refuses (there is no queue to go back to)
// saying what to do, dead drop --all removes the letters (a route there
// is keeps its own), and routes says where they are.
func TestRetiredRouteDeadLettersFromTheCLI(t *testing.T) {
	t.Parallel()
	s, db, prefix := opsShell(t)
	s.env["HOOKRELAY_SECRETS_KEY"] = base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	res := s.run("hookrelay", "routes", "create", "ledger", "--url", "http://127.0.0.1:9/hooks", "--binding", "demo.invoice.*")
	require.Equal(t, 0, res.code, res)
	dead := hamqp.Names{Prefix: prefix}.DeadQueue("ledger")
	t.Cleanup(func() { deleteQueues(t, dead) })

	// Two pairs parked on ledger, their letters in its dead-letter queue;
	// then the route is deleted and retired (as its dispatchers do once
	// nothing of it is undelivered).
	conn := amqptest.Dial(t)
	ch := amqptest.Channel(t, conn)
	_, err := ch.QueueDeclare(dead, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	require.NoError(t, err)
	var ids []uuid.UUID
	for _, key := range []string{"evt_l1", "evt_l2"} {
		id, _, err := db.EventInsert(context.Background(), &webhook.Event{
			ID: uuid.Must(uuid.NewV7()), Source: "demo", IdempotencyKey: key, EventType: "invoice.paid",
			ContentType: "application/json", Body: []byte(`{}`), ReceivedAt: time.Now(),
		}, []string{"ledger"})
		require.NoError(t, err)
		_, _, err = db.AttemptRecord(context.Background(), &webhook.Attempt{
			EventID: id, Route: "ledger", Number: 1, StartedAt: time.Now(), Outcome: webhook.StateDead,
			Error: "route deleted: moved to its dead letters",
		})
		require.NoError(t, err)
		require.NoError(t, ch.PublishWithContext(context.Background(), "", dead, false, false, amqp.Publishing{
			MessageId: id.String(), Body: []byte(`{}`),
			Headers: amqp.Table{hamqp.HeaderEventID: id.String(), hamqp.HeaderSource: "demo", hamqp.HeaderEventType: "invoice.paid",
				hamqp.HeaderAttempts: int32(1), hamqp.HeaderDeadReason: "route_deleted"},
		}))
		ids = append(ids, id)
	}
	amqptest.WaitCount(t, ch, dead, 2, 10*time.Second)
	res = s.run("hookrelay", "routes", "delete", "ledger")
	require.Equal(t, 0, res.code, res)
	_, err = db.Pool().Exec(context.Background(), `UPDATE routes SET retired_at = now() WHERE name = 'ledger'`)
	require.NoError(t, err)

	res = s.run("hookrelay", "routes")
	require.Equal(t, 0, res.code, res)
	require.Regexp(t, `ledger\s+platform\s+deleted\(\w*\)\s+\(retired\)\s+-\s+0\s+0\s+2\n`, res.stdout)
	require.Contains(t, res.stdout, "ledger was deleted; its dead letters stay: hookrelay dead list --route ledger, dead drop --route ledger --all")

	res = s.run("hookrelay", "dead", "list", "--route", "ledger")
	require.Equal(t, 0, res.code, res)
	for _, id := range ids {
		require.Regexp(t, regexp.MustCompile(id.String()+`\s+dead\s+demo\s+invoice\.paid\s+1\s+-\s`), res.stdout)
	}
	require.Contains(t, res.stdout, "2 dead letter(s) in "+dead)
	require.Contains(t, res.stdout, "route ledger was deleted: its letters can be read and dropped (dead drop --route ledger --all), not requeued")

	res = s.run("hookrelay", "dead", "requeue", "--route", "ledger")
	require.Equal(t, 1, res.code, res)
	require.Contains(t, res.stderr, "route ledger was deleted: its dead letters have no queue to go back to")
	amqptest.WaitCount(t, ch, dead, 2, 5*time.Second)

	res = s.run("hookrelay", "dead", "drop", "--route", "billing", "--all")
	require.Equal(t, 1, res.code, res)
	require.Contains(t, res.stderr, "route billing is not deleted")
	res = s.run("hookrelay", "dead", "drop", "--route", "ledger", "--all", "--delivered")
	require.Equal(t, 2, res.code, res)
	res = s.run("hookrelay", "dead", "drop", "--route", "ledger", "--all", "--dry-run")
	require.Equal(t, 0, res.code, res)
	require.Equal(t, "would drop 2 of 2 dead letter(s) in "+dead+" (the route was deleted)\n", res.stdout)
	amqptest.WaitCount(t, ch, dead, 2, 5*time.Second)
	res = s.run("hookrelay", "dead", "drop", "--route", "ledger", "--all")
	require.Equal(t, 0, res.code, res)
	require.Equal(t, "dropped 2 of 2 dead letter(s) in "+dead+" (the route was deleted)\n", res.stdout)
	amqptest.WaitCount(t, ch, dead, 0, 5*time.Second)
	res = s.run("hookrelay", "audit", "--action", "dead.drop")
	require.Equal(t, 0, res.code, res)
	require.Contains(t, res.stdout, "ledger")
}
