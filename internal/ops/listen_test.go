package ops_test

import (
	"context"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/stretchr/testify/require"
)

// A stream whose start came before Listen first read the store (the API
// announced "ready" to its client first) takes each event received since
// that start: one accepted in between is sent, as live, and one received
// before the start is not.
func TestListenTakesEventsFromTheStreamsStart(t *testing.T) {
	t.Parallel()
	svc, st, _ := newService(t) // its clock is days past the events
	before := st.add("acme", "invoice.paid", map[string]string{"billing": "pending"})
	between := st.add("acme", "invoice.paid", map[string]string{"billing": "pending"})
	start := before.receivedAt.Add(500 * time.Millisecond)

	ctx, cancel := context.WithTimeout(actorCtx(), testenv.Scaled(5*time.Second))
	defer cancel()
	var got []ops.ListenEvent
	err := svc.Listen(ctx, ops.ListenRequest{Pattern: "acme.invoice.*", Start: start}, func(ev ops.ListenEvent) error {
		got = append(got, ev)
		cancel() // the first event sent ends the stream: oldest first, it is the one to check
		return nil
	})
	require.ErrorIs(t, err, context.Canceled, "an event was sent")
	require.Len(t, got, 1)
	require.Equal(t, between.id, got[0].ID, "the event received after the start, not the one before it")
	require.False(t, got[0].Replayed, "received after the stream's start: live")
}
