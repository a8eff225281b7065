package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	hamqp "github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/webhook"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

// opsShell is a new shell whose ./config.yaml is the repository's, on a
// migrated database of its own and a RabbitMQ prefix of its own, with the
// senders' secrets unset.
func opsShell(t *testing.T) (*shell, *store.DB, string) {
	t.Helper()
	s := newShell(t)
	db, dbURL := storetest.Open(t)
	amqptest.Dial(t)
	prefix := amqptest.Prefix(t)
	path := s.writeConfig("config.yaml", repoConfig(t, dbURL, prefix))
	deleteTopologyOf(t, path)
	return s, db, prefix
}

// insertEvent stores an event of source demo received age ago, bound to
// billing, with its outbox row gone (as if published).
func insertEvent(t *testing.T, db *store.DB, key string, age time.Duration) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	id, _, err := db.EventInsert(ctx, &webhook.Event{
		ID: uuid.Must(uuid.NewV7()), Source: "demo", IdempotencyKey: key, EventType: "invoice.paid",
		ContentType: "application/json", Body: []byte(`{"id":"` + key + `"}`), ReceivedAt: time.Now().Add(-age),
	}, []string{"billing"})
	require.NoError(t, err)
	_, err = db.Pool().Exec(ctx, `DELETE FROM outbox WHERE event_id = $1`, id)
	require.NoError(t, err)
	return id
}

// attempt records an attempt of id to billing with outcome.
func attempt(t *testing.T, db *store.DB, id uuid.UUID, n, status int, outcome webhook.DeliveryState) {
	t.Helper()
	_, _, err := db.AttemptRecord(context.Background(), &webhook.Attempt{
		EventID: id, Route: "billing", Number: n, StartedAt: time.Now(), Duration: 12 * time.Millisecond,
		Status: status, Outcome: outcome, Error: map[bool]string{true: fmt.Sprintf("HTTP %d", status)}[status >= 300],
		RetryIn: time.Hour,
	})
	require.NoError(t, err)
}

// Issue 12, items 4 and 2: listings say how many they show of how many
// there are, and flags go anywhere (after the event id too).
func TestListingsStateTheirTotals(t *testing.T) {
	t.Parallel()
	s, db, _ := opsShell(t)
	var last uuid.UUID
	for i := range 12 {
		last = insertEvent(t, db, fmt.Sprint("evt_", i), time.Minute)
	}
	attempt(t, db, last, 1, 503, webhook.StateRetrying)

	res := s.run("hookrelay", "events", "list", "--limit", "10")
	require.Equal(t, 0, res.code, res)
	require.Equal(t, "10 of 12 shown (--limit N for more)", lastLine(res.stdout))
	res = s.run("hookrelay", "events", "list")
	require.Equal(t, "12 event(s)", lastLine(res.stdout))
	res = s.run("hookrelay", "events", "list", "--json", "--limit", "5")
	var list struct{ Total, Shown int }
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &list), res)
	require.Equal(t, 12, list.Total)
	require.Equal(t, 5, list.Shown)

	res = s.run("hookrelay", "events", "show", last.String(), "--json")
	require.Equal(t, 0, res.code, res)
	require.Contains(t, res.stdout, `"id": "`+last.String()+`"`)

	res = s.run("hookrelay", "routes")
	require.Equal(t, 0, res.code, res)
	require.Regexp(t, `billing\s+platform\s+config\s+\S+\.route\.billing\s+demo\.invoice\.\* demo\.payment\.#\s+11\s+1\s+0`, res.stdout)
	require.Equal(t, "1 route(s) configured, 0 more with deliveries in the database only", lastLine(res.stdout))
}

// Issue 12, items 5 and 9: nothing is printed as done before it is done:
// dead requeue without --route is a usage error before anything else, and
// one that cannot reach the broker prints no count. dead list shows a
// missing status as "-" and times to the second, like events show.
func TestDeadLettersSayNothingBeforeItIsDone(t *testing.T) {
	t.Parallel()
	s, _, prefix := opsShell(t)
	res := s.run("hookrelay", "dead", "requeue")
	require.Equal(t, 2, res.code, res)
	require.Empty(t, res.stdout)
	require.Contains(t, res.stderr, `required flag(s) "route" not set`)

	res = s.run("hookrelay", "topology", "apply")
	require.Equal(t, 0, res.code, res)
	conn := amqptest.Dial(t)
	ch := amqptest.Channel(t, conn)
	dead := hamqp.Names{Prefix: prefix}.DeadQueue("billing")
	id := uuid.NewString()
	require.NoError(t, ch.PublishWithContext(context.Background(), "", dead, false, false, amqp.Publishing{
		MessageId: id, Body: []byte(`{}`),
		Headers: amqp.Table{
			hamqp.HeaderEventID: id, hamqp.HeaderSource: "demo", hamqp.HeaderEventType: "invoice.paid",
			hamqp.HeaderAttempts: int32(9), hamqp.HeaderLastStatus: int32(0), hamqp.HeaderLastError: "dial tcp: connection refused",
			hamqp.HeaderLastAttemptAt: "2026-11-27T14:00:05.123456789Z", hamqp.HeaderDeadReason: "max_attempts",
		},
	}))
	amqptest.WaitCount(t, ch, dead, 1, 10*time.Second)
	res = s.run("hookrelay", "dead", "list", "--route", "billing")
	require.Equal(t, 0, res.code, res)
	t.Log("\n" + res.stdout)
	require.Regexp(t, regexp.MustCompile(id+`\s+missing\s+demo\s+invoice\.paid\s+9\s+-\s+dial tcp: connection refused\s+2026-11-27T14:00:05Z\s+max_attempts`), res.stdout)
	require.Equal(t, "1 dead letter(s) in "+dead, lastLine(res.stdout))

	s.env["HOOKRELAY_AMQP_URL"] = "amqp://guest:guest@127.0.0.1:1/"
	res = s.run("hookrelay", "dead", "requeue", "--route", "billing")
	require.Equal(t, 1, res.code, res)
	require.Empty(t, res.stdout, "no count before it moved anything")
	require.Contains(t, res.stderr, "connecting to rabbitmq")
	delete(s.env, "HOOKRELAY_AMQP_URL")
	res = s.run("hookrelay", "dead", "requeue", "--route", "billing")
	require.Equal(t, 0, res.code, res)
	require.Equal(t, fmt.Sprintf("requeued 1 message(s) from %s to %s.route.billing\n", dead, prefix), res.stdout)
	require.Contains(t, res.stderr, "requeue: 1 of 1 message(s) moved", "progress on stderr")
}

// Issue 12, item 6: purge refuses an age under an hour without --force,
// asks (or, without a terminal, refuses) unless --yes, prints durations as
// written, and its dry run counts exactly what the real run then deletes.
func TestPurgeDryRunConfirmAndForce(t *testing.T) {
	t.Parallel()
	s, db, _ := opsShell(t)
	// 40 and 10 days old and delivered: deleted (their ids are of today, so
	// row by row, and their keys stay); dead: kept; 45 minutes: too young.
	for i := range 3 {
		attempt(t, db, insertEvent(t, db, fmt.Sprint("evt_old_", i), 40*24*time.Hour), 1, 200, webhook.StateDelivered)
	}
	for i := range 2 {
		attempt(t, db, insertEvent(t, db, fmt.Sprint("evt_mid_", i), 10*24*time.Hour), 1, 200, webhook.StateDelivered)
	}
	attempt(t, db, insertEvent(t, db, "evt_dead", 10*24*time.Hour), 1, 410, webhook.StateDead)
	young := insertEvent(t, db, "evt_young", 45*time.Minute)
	attempt(t, db, young, 1, 200, webhook.StateDelivered)

	res := s.run("hookrelay", "purge", "--older-than", "1m")
	require.Equal(t, 2, res.code, res)
	require.Contains(t, res.stderr, "--older-than 1m is 1 minute, under 1h")
	require.Contains(t, res.stderr, "--force")

	res = s.run("hookrelay", "purge", "--older-than", "7d")
	require.Equal(t, 2, res.code, res)
	require.Contains(t, res.stderr, "refusing to purge 5 deliveries and 5 events without --yes")
	require.Empty(t, res.stdout)

	dry := s.run("hookrelay", "purge", "--older-than", "7d", "--batch", "2", "--dry-run")
	require.Equal(t, 0, dry.code, dry)
	t.Log("\n" + dry.stdout)
	require.Equal(t, "would purge: 5 deliveries (with their attempts), 5 events deleted (0 days dropped whole, the rest in 3 batches); 0 dedupe keys older than 30d deleted\n"+
		"kept: 1 events older than 7d with something undelivered (in flight or dead; --include-dead to purge dead ones too)\n", dry.stdout)
	var events int
	require.NoError(t, db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM events WHERE purged_at IS NULL`).Scan(&events))
	require.Equal(t, 7, events, "the dry run changed nothing")

	res = s.run("hookrelay", "purge", "--older-than", "7d", "--batch", "2", "--yes")
	require.Equal(t, 0, res.code, res)
	require.Equal(t, strings.Replace(dry.stdout, "would purge:", "purged:", 1), res.stdout, "the dry run counted what the purge did")
	require.Contains(t, res.stderr, "purge: ", "progress on stderr")
	require.NoError(t, db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM events`).Scan(&events))
	require.Equal(t, 2, events, "5 deleted; the dead one and the young one kept")

	res = s.run("hookrelay", "purge", "--older-than", "30m", "--force", "--yes")
	require.Equal(t, 0, res.code, res)
	require.Contains(t, res.stdout, "purged: 1 deliveries (with their attempts), 1 events deleted")
}
