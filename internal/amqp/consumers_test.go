package amqp_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	hamqp "github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/hookrelay/hookrelay/internal/webhook"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A group stopped by a change of its route (its version) takes no message
// with it: a message the broker sent a consumer just before the consumer's
// cancel reached it goes back to the queue, and the group's next version
// delivers it. Kept in the stopped consumer's channel, it waited there
// until the connection closed (a transformation fixed, then a requeue: the
// requeued letter was never delivered). Messages are published while the
// idle consumers of version 1 are told to stop, so that some reach a
// consumer between its stop and the broker's cancel.
func TestChangedGroupLeavesNoMessageBehind(t *testing.T) {
	t.Parallel()
	conn := amqptest.Dial(t)
	queue := amqptest.Prefix(t) + ".route.changed"
	ch, err := conn.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	require.NoError(t, err)
	t.Cleanup(func() {
		if _, err := ch.QueueDelete(queue, false, false, false); err != nil {
			t.Logf("cleanup: deleting %s: %v", queue, err)
		}
	})

	var mu sync.Mutex
	got := map[string]bool{}
	handle := func(_ context.Context, m webhook.RouteMessage, _ <-chan struct{}) error {
		mu.Lock()
		defer mu.Unlock()
		got[string(m.Body)] = true
		return nil
	}
	const rounds, perRound, concurrency = 10, 20, 8
	c := hamqp.NewConsumers(hamqp.ConsumersConfig{Dialer: amqptest.Dialer(t), ConnectionName: "consumers-test",
		Groups: []hamqp.ConsumerGroup{{Queue: queue, Concurrency: concurrency, Version: 0, Handle: handle}},
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		q, err := conn.Channel()
		require.NoError(c, err)
		defer q.Close()
		info, err := q.QueueDeclarePassive(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
		require.NoError(c, err)
		assert.Equal(c, concurrency, info.Consumers)
	}, testenv.Scaled(10*time.Second), 10*time.Millisecond, "version 0 consumes")

	sent := 0
	for round := 1; round <= rounds; round++ {
		c.SetGroups([]hamqp.ConsumerGroup{{Queue: queue, Concurrency: concurrency, Version: int64(round), Handle: handle}})
		for range perRound {
			sent++
			require.NoError(t, ch.PublishWithContext(t.Context(), "", queue, false, false, amqp.Publishing{Body: []byte(fmt.Sprint(sent))}))
		}
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		mu.Lock()
		defer mu.Unlock()
		assert.Len(c, got, sent)
	}, testenv.Scaled(10*time.Second), 20*time.Millisecond, "every message delivered: none stayed with a stopped consumer")
}
