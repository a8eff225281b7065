package amqp_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	hamqp "github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/hookrelay/hookrelay/internal/webhook"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Issue 25: a retry copy from the outbox goes to the retry tier of its
// delay, which the publisher declares when its own topology lacks it (a
// tier added to the dispatchers' config first), and comes back to its
// route queue when the delay has passed, with its place in the series.
func TestPublishRetryCopyThroughItsTier(t *testing.T) {
	t.Parallel()
	conn := amqptest.Dial(t)
	ch := amqptest.Channel(t, conn)
	prefix := amqptest.Prefix(t)
	names := hamqp.Names{Prefix: prefix}
	topo := hamqp.BuildTopology(hamqp.TopologyConfig{Prefix: prefix, Routes: []hamqp.RouteConfig{{Name: "a", Bindings: []string{"x.#"}}}})
	amqptest.DeleteTopology(t, topo)
	amqptest.DeleteTopology(t, names.TierTopology(300*time.Millisecond))
	p := hamqp.NewPublisher(hamqp.PublisherConfig{
		Dialer: amqptest.Dialer(t), TopologyFunc: func() hamqp.Topology { return topo }, Exchange: names.Events(), Names: names,
		ConfirmTimeout: 5 * time.Second, MaxBatch: 10, ConnectionName: "test", Logger: zerolog.Nop(),
	})
	t.Cleanup(func() { _ = p.Close() })

	id := uuid.Must(uuid.NewV7())
	first := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	outcomes, err := p.Publish(context.Background(), []webhook.Message{{
		OutboxID: 1, EventID: id, RoutingKey: "x.y", Route: "a", Gen: 2, Attempt: 3,
		RetryIn: 300 * time.Millisecond, FirstAttemptAt: first,
		Source: "x", EventType: "y", ContentType: "application/json", Body: []byte("{}"), ReceivedAt: time.Now(),
	}})
	require.NoError(t, err)
	require.Equal(t, []hamqp.Outcome{hamqp.Acked}, outcomes)

	amqptest.WaitCount(t, ch, names.RouteQueue("a"), 1, 10*time.Second)
	msgs := amqptest.Drain(t, ch, names.RouteQueue("a"))
	require.Len(t, msgs, 1)
	m := msgs[0]
	require.Equal(t, id.String(), m.MessageId)
	require.Equal(t, int32(3), m.Headers[hamqp.HeaderAttempt])
	require.Equal(t, int64(2), m.Headers[hamqp.HeaderGen])
	require.Equal(t, "2026-12-01T10:00:00Z", m.Headers[hamqp.HeaderFirstAttemptAt])
	deaths, ok := m.Headers["x-death"].([]any)
	require.True(t, ok && len(deaths) == 1, "dead-lettered once, by the tier: %v", m.Headers["x-death"])
	require.Equal(t, names.Retry(300*time.Millisecond), deaths[0].(amqp.Table)["queue"])
}

// Issue 25: the management API counts a tier's messages that expired and
// wait to be dead-lettered (here: their route queue is gone), which
// the reconciler reads as copies still in the broker.
func TestQueueStatsCountDeadLettering(t *testing.T) {
	t.Parallel()
	amqptest.RequireManagement(t)
	conn := amqptest.Dial(t)
	ch := amqptest.Channel(t, conn)
	prefix := amqptest.Prefix(t)
	names := hamqp.Names{Prefix: prefix}
	tier := names.TierTopology(100 * time.Millisecond)
	amqptest.DeleteTopology(t, tier)
	require.NoError(t, tier.Declare(ch))
	// The route queue does not exist: the tier cannot dead-letter to it,
	// and keeps the expired messages until it can.
	for range 3 {
		require.NoError(t, ch.PublishWithContext(context.Background(), names.Retry(100*time.Millisecond), names.RouteQueue("gone"), false, false,
			amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte("x")}))
	}

	m, err := hamqp.NewManagement([]string{testenv.ManagementURL()}, testenv.AMQPURL())
	require.NoError(t, err)
	// RabbitMQ's statistics lag by up to about 10 s.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		stats, err := m.QueueStats(context.Background(), names.RetryPrefix())
		require.NoError(c, err)
		require.Len(c, stats, 1, "only the tier matches the prefix")
		require.Equal(c, names.Retry(100*time.Millisecond), stats[0].Name)
		require.Equal(c, 3, stats[0].DeadLettering)
		require.Zero(c, stats[0].Ready)
	}, testenv.Scaled(30*time.Second), 500*time.Millisecond)
}

// Issue 18, item 11: a management API that does not answer is named by
// its setting.
func TestManagementUnreachableNamesTheSetting(t *testing.T) {
	t.Parallel()
	m, err := hamqp.NewManagement([]string{"http://127.0.0.1:1"}, "amqp://guest:guest@127.0.0.1:5672/")
	require.NoError(t, err)
	_, err = m.Do(context.Background(), "GET", "overview", nil)
	require.ErrorContains(t, err, "no node answered (check amqp.management_url/management_urls")
	require.ErrorContains(t, err, "127.0.0.1:1")
}
