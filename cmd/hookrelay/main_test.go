package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/stretchr/testify/require"
)

// cliRun runs the CLI against a config for dbURL and returns its output.
func cliRun(t *testing.T, dbURL string, args ...string) (string, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	cfg := fmt.Sprintf(`
database: {url: %q}
amqp: {url: "amqp://guest:guest@127.0.0.1:5672/"}
routes:
  - {name: billing, url: "http://127.0.0.1:9/", bindings: ["acme.#"], signing_secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}
`, dbURL)
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))
	var out bytes.Buffer
	err := run(context.Background(), append([]string{"--config", path}, args...), noEnv, &out, io.Discard)
	return out.String(), err
}

func TestEventsShowPrintsEveryAttempt(t *testing.T) {
	t.Parallel()
	db, dbURL := storetest.Open(t)
	ctx := context.Background()
	id, _, err := db.EventInsert(ctx, &webhook.Event{
		ID: uuid.Must(uuid.NewV7()), Source: "acme", IdempotencyKey: "evt_show", EventType: "invoice.paid",
		ContentType: "application/json", Body: []byte(`{"id":"evt_show"}`), ReceivedAt: time.Now(),
	}, []string{"billing"})
	require.NoError(t, err)
	attempts := []*webhook.Attempt{
		{Number: 1, Status: 503, ResponseBody: []byte(`{"error":"busy, try later"}`), ResponseHeaders: http.Header{"Retry-After": {"1"}}, Error: "HTTP 503", Outcome: webhook.StateRetrying},
		{Number: 2, Error: "timeout after 10s", Outcome: webhook.StateRetrying},
		{Number: 3, Status: 200, ResponseBody: []byte(`{"ok":true}`), Outcome: webhook.StateDelivered},
	}
	for i, a := range attempts {
		a.EventID, a.Route, a.StartedAt, a.Duration = id, "billing", time.Now().Add(time.Duration(i)*time.Second), 42*time.Millisecond
		require.NoError(t, recordErr(db.AttemptRecord(ctx, a)))
	}

	out, err := cliRun(t, dbURL, "events", "show", id.String())
	require.NoError(t, err)
	t.Log("\n" + out)
	require.Contains(t, out, "route billing: delivered after 3 attempt(s)")
	for _, want := range []string{"503", `{"error":"busy, try later"}`, "timeout after 10s", "200", `{"ok":true}`, "42ms"} {
		require.Contains(t, out, want)
	}

	out, err = cliRun(t, dbURL, "events", "show", "--json", id.String())
	require.NoError(t, err)
	var ev ops.EventDetail
	require.NoError(t, json.Unmarshal([]byte(out), &ev), out)
	require.Equal(t, id, ev.ID)
	require.Len(t, ev.Deliveries, 1)
	rows := ev.Deliveries[0].AttemptRows
	require.Len(t, rows, 3)
	require.Equal(t, 503, *rows[0].Status)
	require.Equal(t, "1", rows[0].ResponseHeaders.Get("Retry-After"))
	require.Nil(t, rows[1].Status)
	require.Equal(t, "delivered", rows[2].Outcome)

	out, err = cliRun(t, dbURL, "events", "list", "--state", "delivered", "--json")
	require.NoError(t, err)
	var list struct{ Items []ops.EventSummary }
	require.NoError(t, json.Unmarshal([]byte(out), &list), out)
	require.Len(t, list.Items, 1)
	out, err = cliRun(t, dbURL, "events", "list", "--source", "acme")
	require.NoError(t, err)
	require.Contains(t, out, "billing:delivered(3)")
	require.True(t, strings.HasSuffix(strings.TrimSpace(out), "1 event(s)"))
}

func TestCLIRejectsBadUsage(t *testing.T) {
	t.Parallel()
	_, dbURL := storetest.Open(t)
	for _, args := range [][]string{
		{"events", "show"},
		{"events", "show", "evt_1", "evt_2"}, // one id: ours, or the sender's (issue 38)
		{"events", "list", "--state", "lost"},
		{"events", "list", "--since", "yesterday"},
		{"replay"},
		{"purge", "--older-than", "30"},
		{"frobnicate"},
	} {
		_, err := cliRun(t, dbURL, args...)
		var ue *setup.UsageError
		require.ErrorAs(t, err, &ue, "%v", args)
	}
}

// noEnv is an empty environment: the config file alone counts.
func noEnv(string) (string, bool) { return "", false }

// recordErr keeps the error of AttemptRecord's results.
func recordErr(_ int64, _ bool, err error) error { return err }

// Issue 18, item 11: `hookrelay secret new` makes a route's signing
// secret, which the config accepts, and reads no config.
func TestSecretNew(t *testing.T) {
	t.Parallel()
	var secrets []string
	for range 2 {
		var out, errOut bytes.Buffer
		require.NoError(t, run(context.Background(), []string{"secret", "new"}, func(string) (string, bool) { return "", false }, &out, &errOut))
		s := strings.TrimSpace(out.String())
		require.True(t, strings.HasPrefix(s, "whsec_"), s)
		require.NoError(t, config.WhsecError(s))
		raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
		require.NoError(t, err)
		require.Len(t, raw, 32)
		secrets = append(secrets, s)
	}
	require.NotEqual(t, secrets[0], secrets[1])
}
