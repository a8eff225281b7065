package amqp_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	hamqp "github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// One batch may carry several rows of one event (a replay to several
// routes). A return must mark the row that was returned, not another row of
// the same event: otherwise the unroutable row would be deleted as if
// confirmed.
func TestPublishMatchesReturnsToTheirRow(t *testing.T) {
	t.Parallel()
	conn := amqptest.Dial(t)
	prefix := amqptest.Prefix(t)
	topo := hamqp.BuildTopology(hamqp.TopologyConfig{Prefix: prefix, Routes: []hamqp.RouteConfig{{Name: "a", Bindings: []string{"x.#"}}}})
	amqptest.DeleteTopology(t, topo)
	names := hamqp.Names{Prefix: prefix}
	confirms := hamqp.NewConfirmsCounter(prometheus.NewRegistry())
	p := hamqp.NewPublisher(hamqp.PublisherConfig{
		Dialer: amqptest.Dialer(t), TopologyFunc: func() hamqp.Topology { return topo }, Exchange: names.Events(), Names: names,
		ConfirmTimeout: 5 * time.Second, MaxBatch: 10, ConnectionName: "test", Logger: zerolog.Nop(), Confirms: confirms,
	})
	t.Cleanup(func() { _ = p.Close() })

	id := uuid.Must(uuid.NewV7())
	msg := func(outboxID int64, route string) webhook.Message {
		return webhook.Message{OutboxID: outboxID, EventID: id, RoutingKey: "x.y", Route: route, Source: "x", EventType: "y", Body: []byte("{}"), ReceivedAt: time.Now()}
	}
	outcomes, err := p.Publish(context.Background(), []webhook.Message{msg(1, "missing"), msg(2, "a"), msg(3, "")})
	require.NoError(t, err)
	require.Equal(t, []hamqp.Outcome{hamqp.Returned, hamqp.Acked, hamqp.Acked}, outcomes, "only the row whose queue does not exist stays")
	require.Equal(t, 1.0, testutil.ToFloat64(confirms.WithLabelValues("returned")))
	require.Equal(t, 2.0, testutil.ToFloat64(confirms.WithLabelValues("ack")))

	amqptest.WaitCount(t, amqptest.Channel(t, conn), names.RouteQueue("a"), 2, 5*time.Second)
}
