package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Issue 21: the receiver publishes the events it stored right after their
// commit; their outbox rows, held for outbox.direct_hold, are deleted once
// confirmed, and no outbox publisher claims them. Every event arrives,
// long before a hold of an hour would have let a publisher sweep it.
func TestReceiverPublishesItsEventsItself(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.cfg.Outbox.DirectHold = time.Hour
	h.start(app.ReceiverOptions{})
	var ids []string
	for i := range 5 {
		r := h.postSigned(fmt.Sprint("evt_direct_", i), "invoice.paid")
		require.Equal(t, http.StatusOK, r.status, r.Error)
		ids = append(ids, r.ID)
	}
	amqptest.WaitCount(t, h.ch, h.names.RouteQueue("billing"), 5, 20*time.Second)
	h.waitOutboxEmpty(20 * time.Second)
	require.ElementsMatch(t, ids, eventIDs(amqptest.Drain(t, h.ch, h.names.RouteQueue("billing"))))
	m := scrape(t, h.metricsBase)
	require.Equal(t, 5.0, m[`hookrelay_outbox_direct_total{outcome="published"}`])
	require.Zero(t, m[`hookrelay_outbox_direct_total{outcome="released"}`])
	require.Zero(t, m[`hookrelay_outbox_direct_total{outcome="overflow"}`])
}

// runKillAfterDirectPublishChild runs a receiver (config from the
// environment) that SIGKILLs itself right after the broker confirmed a
// direct publish and before its outbox rows are deleted.
func runKillAfterDirectPublishChild() {
	var cfg config.Config
	if err := json.Unmarshal([]byte(os.Getenv("HOOKRELAY_TEST_CHILD_CONFIG")), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "child config:", err)
		return
	}
	err := app.RunReceiver(context.Background(), &cfg, app.ReceiverOptions{
		Logger: zerologStderr(),
		AfterPublishFunc: func() {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal ends the process
		},
	})
	fmt.Fprintf(os.Stderr, "receiver returned instead of being killed: %v\n", err)
}

// Issue 21: a receiver killed between a direct publish's confirm and the
// delete of its row loses nothing: the row, held, stays in the outbox, and
// once its hold has passed another receiver's publisher sends it again (a
// duplicate message, which a dispatcher drops; never a loss).
func TestReceiverKilledAfterDirectPublishRepublishes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.cfg.Outbox.DirectHold = 6 * time.Second
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	child := *h.cfg
	child.Receiver.Listen = addr
	raw, err := json.Marshal(&child)
	require.NoError(t, err)

	cctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, os.Args[0])
	cmd.Env = append(os.Environ(), "HOOKRELAY_TEST_CHILD=receiver-kill-after-direct-publish", "HOOKRELAY_TEST_CHILD_CONFIG="+string(raw))
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	// The child answers 503 while it starts; the post that is stored
	// kills it, perhaps before its answer is written: the database says
	// what was stored.
	h.base = "http://" + addr
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		select {
		case err := <-exited:
			exited <- err
			return // checked below
		default:
		}
		r, err := h.tryPostSigned("evt_direct_kill", "invoice.paid")
		if err == nil {
			require.NotEqual(c, http.StatusServiceUnavailable, r.status, "starting")
		}
		require.NoError(c, h.db.Pool().QueryRow(context.Background(), `SELECT 1 FROM events`).Scan(new(int)), "the event is stored")
	}, testenv.Scaled(30*time.Second), 50*time.Millisecond, "the child stores the event")
	var werr error
	select {
	case werr = <-exited:
	case <-time.After(testenv.Scaled(30 * time.Second)):
		t.Fatalf("the child was not killed:\n%s", out.String())
	}
	var exitErr *exec.ExitError
	require.True(t, errors.As(werr, &exitErr), "child must be killed, got %v\n%s", werr, out.String())
	ws, ok := exitErr.Sys().(syscall.WaitStatus)
	require.True(t, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL, "child ended by %v\n%s", werr, out.String())

	// The publish was confirmed, the delete never happened: the row is
	// still held.
	var held bool
	require.NoError(t, h.db.Pool().QueryRow(context.Background(),
		`SELECT next_try_at > now() FROM outbox`).Scan(&held), "the row survives the kill")
	require.True(t, held, "the row is still held")
	require.Equal(t, 1, amqptest.Count(t, h.ch, h.names.RouteQueue("billing")))

	// Another receiver's publisher sends it again once the hold passed.
	h.start(app.ReceiverOptions{})
	h.waitOutboxEmpty(30 * time.Second)
	amqptest.WaitCount(t, h.ch, h.names.RouteQueue("billing"), 2, 10*time.Second)
	msgs := amqptest.Drain(t, h.ch, h.names.RouteQueue("billing"))
	require.Len(t, msgs, 2)
	require.Equal(t, msgs[0].MessageId, msgs[1].MessageId, "the same event, twice")
}
