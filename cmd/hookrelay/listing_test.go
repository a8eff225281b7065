package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	hamqp "github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/hookrelay/hookrelay/internal/webhook"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

// cliConfig writes a config for dbURL whose RabbitMQ names start with
// prefix, with the routes given as YAML flow mappings, and returns its path
// and the loaded config.
func cliConfig(t *testing.T, dbURL, prefix string, routes ...string) (string, *config.Config) {
	t.Helper()
	if len(routes) == 0 {
		routes = []string{`{name: billing, url: "http://127.0.0.1:9/", bindings: ["acme.#"], signing_secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}`}
	}
	path := filepath.Join(t.TempDir(), "config.yaml")
	content := fmt.Sprintf("database: {url: %q}\namqp: {url: %q, prefix: %q}\nroutes:\n", dbURL, testenv.AMQPURL(), prefix)
	for _, r := range routes {
		content += "  - " + r + "\n"
	}
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	cfg, err := config.Load(path, func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	return path, cfg
}

// runCLI runs the CLI with a config file and returns stdout and stderr.
func runCLI(t *testing.T, path string, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), append([]string{"--config", path}, args...), noEnv, &out, &errOut)
	return out.String(), errOut.String(), err
}

// A dead list that stops at its limit says how many the queue holds (issue
// 8, item 8): "10 of 12 shown", not "10 dead letter(s)".
func TestDeadListSaysHowManyItDidNotShow(t *testing.T) {
	t.Parallel()
	_, dbURL := storetest.Open(t)
	conn := amqptest.Dial(t)
	ch := amqptest.Channel(t, conn)
	path, cfg := cliConfig(t, dbURL, amqptest.Prefix(t))
	topo := setup.Topology(cfg)
	amqptest.DeleteTopology(t, topo)
	require.NoError(t, topo.Declare(ch))
	dead := hamqp.Names{Prefix: cfg.AMQP.Prefix}.DeadQueue("billing")
	for i := range 12 {
		id := uuid.NewString()
		require.NoError(t, ch.PublishWithContext(context.Background(), "", dead, false, false, amqp.Publishing{
			MessageId: id, Body: []byte(fmt.Sprintf(`{"n":%d}`, i)),
			Headers: amqp.Table{hamqp.HeaderEventID: id, hamqp.HeaderSource: "acme", "x-hookrelay-dead-reason": "max_attempts"},
		}))
	}
	amqptest.WaitCount(t, ch, dead, 12, 10*time.Second)

	out, _, err := runCLI(t, path, "dead", "list", "--route", "billing", "--limit", "10")
	require.NoError(t, err)
	t.Log("\n" + out)
	require.Equal(t, "10 of 12 shown (--limit N for more)", lastLine(out))
	require.Equal(t, 1+10+1, strings.Count(out, "\n"), "header, 10 rows, the count")

	out, _, err = runCLI(t, path, "dead", "list", "--route", "billing")
	require.NoError(t, err)
	require.Equal(t, "12 dead letter(s) in "+dead, lastLine(out))

	out, _, err = runCLI(t, path, "dead", "list", "--route", "billing", "--limit", "5", "--json")
	require.NoError(t, err)
	var list struct {
		Queue string            `json:"queue"`
		Total int               `json:"total"`
		Shown int               `json:"shown"`
		Items []json.RawMessage `json:"items"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &list), out)
	require.Equal(t, dead, list.Queue)
	require.Equal(t, 12, list.Total)
	require.Equal(t, 5, list.Shown)
	require.Len(t, list.Items, 5)
	amqptest.WaitCount(t, ch, dead, 12, 5*time.Second) // listing consumed nothing
}

// events list says how many events match when it stops at its limit.
func TestEventsListSaysHowManyItDidNotShow(t *testing.T) {
	t.Parallel()
	db, dbURL := storetest.Open(t)
	ctx := context.Background()
	for i := range 12 {
		_, _, err := db.EventInsert(ctx, &webhook.Event{
			ID: uuid.Must(uuid.NewV7()), Source: "acme", IdempotencyKey: fmt.Sprint("evt_", i), EventType: "invoice.paid",
			ContentType: "application/json", Body: []byte(`{}`), ReceivedAt: time.Now(),
		}, []string{"billing"})
		require.NoError(t, err)
	}
	path, _ := cliConfig(t, dbURL, "hookrelay")

	out, _, err := runCLI(t, path, "events", "list", "--limit", "10")
	require.NoError(t, err)
	require.Equal(t, "10 of 12 shown (--limit N for more)", lastLine(out))
	out, _, err = runCLI(t, path, "events", "list", "--source", "acme")
	require.NoError(t, err)
	require.Equal(t, "12 event(s)", lastLine(out))
	out, _, err = runCLI(t, path, "events", "list", "--source", "other")
	require.NoError(t, err)
	require.Equal(t, "0 event(s)", lastLine(out))

	out, _, err = runCLI(t, path, "events", "list", "--limit", "10", "--state", "pending", "--json")
	require.NoError(t, err)
	var list struct {
		Total int               `json:"total"`
		Shown int               `json:"shown"`
		Items []json.RawMessage `json:"items"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &list), out)
	require.Equal(t, 12, list.Total)
	require.Equal(t, 10, list.Shown)
	require.Len(t, list.Items, 10)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
