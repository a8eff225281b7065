package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

// TestRecordingForwarderKeepsTheInvariantsItStandsFor holds the recording
// forwarder to what its phases claim it costs: every outcome committed
// before the ack (a failure too, and the requeued message POSTed again),
// and a message recorded as delivered acked with no new POST.
func TestRecordingForwarderKeepsTheInvariantsItStandsFor(t *testing.T) {
	requireServices(t)
	ctx := t.Context()
	suffix := strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	table, queue := "hrtest_outcomes_"+suffix, "hrtest-recorder-"+suffix

	db, err := pgx.Connect(ctx, testenv.AdminDatabaseURL())
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = db.Exec(context.Background(), `DROP TABLE IF EXISTS `+pgx.Identifier{table}.Sanitize())
		_ = db.Close(context.Background())
	})
	conn, err := dialAMQP(testenv.AMQPURL(), "hookrelay-bench-test")
	require.NoError(t, err)
	t.Cleanup(func() {
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(queue, false, false, false)
		}
		_ = conn.Close()
	})
	require.NoError(t, declareQuorum(conn, queue))

	// The destination fails the first POST of "m-fail", answers 2xx to
	// every other, and counts POSTs per message id.
	var (
		mu    sync.Mutex
		posts = map[string]int{}
	)
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		id := r.Header.Get("webhook-id")
		mu.Lock()
		posts[id]++
		n := posts[id]
		mu.Unlock()
		if id == "m-fail" && n == 1 {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(dest.Close)
	postsOf := func(id string) int {
		mu.Lock()
		defer mu.Unlock()
		return posts[id]
	}

	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Confirm(false))
	publish := func(id string) {
		t.Helper()
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, amqp.Publishing{
			MessageId: id, ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: []byte(`{"id":"` + id + `"}`)})
		require.NoError(t, err)
		ok, err := dc.WaitContext(ctx)
		require.NoError(t, err)
		require.True(t, ok, "the broker confirmed %s", id)
	}
	ids := []string{"m1", "m2", "m3", "m-fail"}
	for _, id := range ids {
		publish(id)
	}

	// One consumer: messages are handled in the queue's order, so the
	// message published last is handled after every one before it.
	fctx, stop := context.WithCancel(ctx)
	ready := &readyWriter{ready: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		done <- runBareForwarder(fctx, []string{"--amqp-url", testenv.AMQPURL(), "--queue", queue, "--concurrency", "1",
			"--url", dest.URL, "--secret", "whsec_" + "ZGVtby1zaWduaW5nLXNlY3JldC0xMjM0NTY3ODkw",
			"--database-url", testenv.AdminDatabaseURL(), "--max-conns", "2", "--table", table}, ready)
	}()
	t.Cleanup(func() {
		stop()
		<-done
	})
	select {
	case <-ready.ready:
	case err := <-done:
		t.Fatalf("the forwarder ended before it was ready: %v", err)
	case <-time.After(testenv.Scaled(30 * time.Second)):
		t.Fatal("the forwarder did not announce it was ready")
	}

	type outcome struct {
		delivered bool
		attempts  int
		status    int
	}
	outcomes := func() (map[string]outcome, error) {
		rows, err := db.Query(ctx, `SELECT message_id, delivered, attempts, last_status FROM `+pgx.Identifier{table}.Sanitize())
		if err != nil {
			return nil, err
		}
		out := map[string]outcome{}
		for rows.Next() {
			var (
				id string
				o  outcome
			)
			if err := rows.Scan(&id, &o.delivered, &o.attempts, &o.status); err != nil {
				return nil, err
			}
			out[id] = o
		}
		return out, rows.Err()
	}
	// Waits until id is recorded as delivered; the error of the last read
	// is kept for the failure message, never asserted in the condition.
	awaitDelivered := func(id string) {
		t.Helper()
		var lastErr error
		require.Eventually(t, func() bool {
			got, err := outcomes()
			lastErr = err
			return err == nil && got[id].delivered
		}, testenv.Scaled(30*time.Second), 20*time.Millisecond, "%s recorded as delivered (last read: %v)", id, lastErr)
	}
	for _, id := range ids {
		awaitDelivered(id)
	}

	// A copy of m1 after its 2xx is acked with no POST; m4, after it,
	// shows that the copy was handled.
	publish("m1")
	publish("m4")
	awaitDelivered("m4")

	got, err := outcomes()
	require.NoError(t, err)
	require.Equal(t, outcome{delivered: true, attempts: 1, status: 204}, got["m1"], "the copy of m1 changed nothing")
	require.Equal(t, outcome{delivered: true, attempts: 2, status: 204}, got["m-fail"], "the failure was recorded, then the retry")
	require.Equal(t, 1, postsOf("m1"), "m1 POSTed once, its copy not at all")
	require.Equal(t, 2, postsOf("m-fail"), "m-fail POSTed again after its failure")
	for _, id := range []string{"m2", "m3", "m4"} {
		require.Equal(t, 1, postsOf(id), id)
		require.Equal(t, outcome{delivered: true, attempts: 1, status: 204}, got[id], id)
	}
	n, err := queueReady(conn, queue)
	require.NoError(t, err)
	require.Zero(t, n, "no message is left waiting")
	require.Len(t, got, 5, fmt.Sprintf("outcomes: %v", got))
}

// readyWriter closes ready when a line "ready" is written.
type readyWriter struct {
	once  sync.Once
	ready chan struct{}
}

func (w *readyWriter) Write(p []byte) (int, error) {
	if strings.Contains(string(p), "ready") {
		w.once.Do(func() { close(w.ready) })
	}
	return len(p), nil
}
