package amqp_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	hamqp "github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/webhook"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

// Requeueing chosen dead letters moves every copy of each chosen event
// (a pair that died again leaves two) and nothing else: the others stay
// in the dead-letter queue, in their order.
func TestRequeueChosenDeadLetters(t *testing.T) {
	t.Parallel()
	conn := amqptest.Dial(t)
	ch := amqptest.Channel(t, conn)
	prefix := amqptest.Prefix(t)
	names := hamqp.Names{Prefix: prefix}
	topo := hamqp.BuildTopology(hamqp.TopologyConfig{Prefix: prefix, Routes: []hamqp.RouteConfig{{Name: "a", Bindings: []string{"x.#"}}}})
	amqptest.DeleteTopology(t, topo)
	require.NoError(t, topo.Declare(ch))

	a, b, c, d := uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString()
	for _, id := range []string{a, b, a, c, d} { // a twice: its old letter and its new one
		require.NoError(t, ch.PublishWithContext(context.Background(), "", names.DeadQueue("a"), false, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent, Body: []byte(id), Headers: amqp.Table{hamqp.HeaderEventID: id},
		}))
	}
	amqptest.WaitCount(t, ch, names.DeadQueue("a"), 5, 10*time.Second)

	dl := hamqp.NewDeadLetters(amqptest.Dialer(t), names, "test")
	var reads []int
	moved, err := dl.RequeueEvents(context.Background(), "a", map[string]bool{a: true, d: true}, func(_, read int) { reads = append(reads, read) })
	require.NoError(t, err)
	require.Equal(t, 3, moved, "both copies of a, and d")
	require.Equal(t, []int{1, 2, 3, 4, 5}, reads, "the whole queue read once")

	amqptest.WaitCount(t, ch, names.RouteQueue("a"), 3, 10*time.Second)
	var back []string
	for _, m := range amqptest.Drain(t, ch, names.RouteQueue("a")) {
		back = append(back, string(m.Body))
	}
	slices.Sort(back)
	want := []string{a, a, d}
	slices.Sort(want)
	require.Equal(t, want, back)
	var left []string
	for _, m := range amqptest.Drain(t, ch, names.DeadQueue("a")) {
		left = append(left, string(m.Body))
	}
	require.Equal(t, []string{b, c}, left, "the others stay, in their order")
}

// A dead-letter queue that does not exist holds no letters: a route made
// at run time and deleted before any dispatcher declared its queues has
// none to read, drop or requeue, and saying so is not a broker failure.
func TestMissingDeadLetterQueueHoldsNone(t *testing.T) {
	t.Parallel()
	names := hamqp.Names{Prefix: amqptest.Prefix(t)}
	dl := hamqp.NewDeadLetters(amqptest.Dialer(t), names, "test")

	visited := 0
	total, err := dl.Scan(context.Background(), "never-declared", 10, func(items []webhook.DeadLetterInfo) ([]bool, bool, error) {
		visited += len(items)
		return nil, false, nil
	})
	require.NoError(t, err)
	require.Equal(t, 0, total)
	require.Equal(t, 0, visited)
	for _, limit := range []int{0, 5} {
		moved, err := dl.Requeue(context.Background(), "never-declared", limit, nil)
		require.NoError(t, err, "limit %d", limit)
		require.Equal(t, 0, moved, "limit %d", limit)
	}
	moved, err := dl.RequeueEvents(context.Background(), "never-declared", map[string]bool{uuid.NewString(): true}, nil)
	require.NoError(t, err)
	require.Equal(t, 0, moved)

	// Answering "none" declared nothing: the queue is still missing.
	ch := amqptest.Channel(t, amqptest.Dial(t))
	_, err = ch.QueueDeclarePassive(names.DeadQueue("never-declared"), true, false, false, false, nil)
	var ae *amqp.Error
	require.ErrorAs(t, err, &ae)
	require.Equal(t, amqp.NotFound, ae.Code)
}
