package app_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// TestMain doubles as the child process of the tests that kill one, when
// the environment says so. A child that returns instead of being killed
// exits 0; its parent requires death by SIGKILL and shows its output.
func TestMain(m *testing.M) {
	switch os.Getenv("HOOKRELAY_TEST_CHILD") {
	case "kill-after-publish":
		runKillAfterPublishChild()
		return
	case "dispatcher":
		runDispatcherChild()
		return
	}
	code := m.Run()
	testenv.RemoveBinaries()
	os.Exit(code)
}

// runKillAfterPublishChild runs a receiver that SIGKILLs itself right after
// the broker confirmed a batch and before the outbox rows are deleted.
func runKillAfterPublishChild() {
	cfg := &config.Config{
		Database: config.Database{URL: os.Getenv("HOOKRELAY_TEST_CHILD_DB"), MaxConns: 4},
		AMQP:     config.AMQP{URL: testenv.AMQPURL(), Prefix: os.Getenv("HOOKRELAY_TEST_CHILD_PREFIX")},
		Receiver: config.Receiver{Listen: "127.0.0.1:0", MaxBodyBytes: 4096, ShutdownTimeout: time.Second},
		Outbox:   config.Outbox{BatchSize: 10, PollInterval: 100 * time.Millisecond, PublishTimeout: 5 * time.Second},
		Routes:   []config.Route{{Name: "billing", URL: "http://127.0.0.1:9/", Bindings: []string{"acme.invoice.*"}}},
	}
	err := app.RunReceiver(context.Background(), cfg, app.ReceiverOptions{
		Logger: zerolog.New(os.Stderr),
		AfterPublishFunc: func() {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal ends the process
		},
	})
	fmt.Fprintf(os.Stderr, "receiver returned instead of being killed: %v\n", err)
}

func TestPublisherKilledBeforeDeleteRepublishes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	id, _, err := h.db.EventInsert(ctx, &webhook.Event{
		ID: uuid.Must(uuid.NewV7()), Source: "acme", IdempotencyKey: "evt_kill", EventType: "invoice.paid",
		ContentType: "application/json", Headers: http.Header{}, Body: []byte(`{"id":"evt_kill"}`), ReceivedAt: time.Now(),
	}, nil)
	require.NoError(t, err)

	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, os.Args[0])
	cmd.Env = append(os.Environ(),
		"HOOKRELAY_TEST_CHILD=kill-after-publish",
		"HOOKRELAY_TEST_CHILD_DB="+h.dbURL,
		"HOOKRELAY_TEST_CHILD_PREFIX="+h.names.Prefix,
	)
	out, err := cmd.CombinedOutput()
	var exitErr *exec.ExitError
	require.True(t, errors.As(err, &exitErr), "child must be killed, got %v\n%s", err, out)
	ws, ok := exitErr.Sys().(syscall.WaitStatus)
	require.True(t, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL, "child ended by %v\n%s", err, out)

	// The publish was confirmed, the delete never happened.
	require.EqualValues(t, 1, h.outboxBacklog(), "the row survives the crash")
	require.Equal(t, 1, amqptest.Count(t, h.ch, h.names.RouteQueue("billing")))

	// A new publisher sends it again: a duplicate message, never a loss.
	h.start(app.ReceiverOptions{})
	h.waitOutboxEmpty(15 * time.Second)
	msgs := amqptest.Drain(t, h.ch, h.names.RouteQueue("billing"))
	require.Equal(t, []string{id.String(), id.String()}, eventIDs(msgs))
}

func zerologStderr() zerolog.Logger { return zerolog.New(os.Stderr).Level(zerolog.WarnLevel) }
