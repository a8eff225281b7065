package amqp_test

import (
	"context"
	"sync"
	"testing"
	"time"

	hamqp "github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/testenv"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// Issue 8, item 14: a publish whose confirm times out gets its basic.return
// late. That return must not be blamed on the next publish, which was
// routed and confirmed.
func TestLateReturnIsNotBlamedOnTheNextPublish(t *testing.T) {
	t.Parallel()
	ch := amqptest.Channel(t, amqptest.Dial(t))
	prefix := amqptest.Prefix(t)
	out := prefix + ".out"
	amqptest.DeleteTopology(t, hamqp.Topology{Queues: []hamqp.Queue{{Name: out}}})
	_, err := ch.QueueDeclare(out, true, false, false, false, nil)
	require.NoError(t, err)
	proxy := newHoldProxy(t, testenv.AMQPURL())
	pub := hamqp.NewConfirmPublisher(hamqp.ConfirmPublisherConfig{
		Dialer: amqptest.Dialer(t, proxy.URL()), ConnectionName: "test-late-return", ConfirmTimeout: 300 * time.Millisecond,
		Logger: zerolog.New(zerolog.NewTestWriter(t)),
	})
	t.Cleanup(func() { require.NoError(t, pub.Close()) })
	ctx := context.Background()
	// A first publish opens the channel the held one will use.
	require.NoError(t, pub.Publish(ctx, "", out, amqp.Publishing{Body: []byte("warm-up")}))

	// The broker's return and ack of the unroutable message are held until
	// its confirm wait has timed out.
	proxy.Hold()
	err = pub.Publish(ctx, "", prefix+".nowhere", amqp.Publishing{Body: []byte("unroutable")})
	proxy.Release()
	require.ErrorContains(t, err, "no confirm within 300ms")

	require.NoError(t, pub.Publish(ctx, "", out, amqp.Publishing{Body: []byte("routed")}),
		"the routed message was confirmed; the earlier message's late return is not its own")
	amqptest.WaitCount(t, ch, out, 2, 5*time.Second)
}

// Concurrent publishes do not wait for each other's confirms, and each gets
// its own answer: a return goes to the publish it belongs to.
func TestConcurrentPublishesGetTheirOwnAnswers(t *testing.T) {
	t.Parallel()
	ch := amqptest.Channel(t, amqptest.Dial(t))
	prefix := amqptest.Prefix(t)
	out := prefix + ".out"
	amqptest.DeleteTopology(t, hamqp.Topology{Queues: []hamqp.Queue{{Name: out, Args: amqp.Table{"x-queue-type": "quorum"}}}})
	_, err := ch.QueueDeclare(out, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	require.NoError(t, err)
	pub := hamqp.NewConfirmPublisher(hamqp.ConfirmPublisherConfig{
		Dialer: amqptest.Dialer(t), ConnectionName: "test-concurrent", ConfirmTimeout: 5 * time.Second,
		Logger: zerolog.New(zerolog.NewTestWriter(t)),
	})
	t.Cleanup(func() { require.NoError(t, pub.Close()) })

	const n = 40
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := out
			if i%2 == 1 {
				key = prefix + ".nowhere"
			}
			errs[i] = pub.Publish(context.Background(), "", key, amqp.Publishing{Body: []byte{byte(i)}})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if i%2 == 1 {
			require.ErrorContains(t, err, "returned: NO_ROUTE", "publish %d was unroutable", i)
		} else {
			require.NoError(t, err, "publish %d was routed", i)
		}
	}
	amqptest.WaitCount(t, ch, out, n/2, 5*time.Second)
}
