// Package amqptest gives each test its own RabbitMQ names (a random prefix)
// and removes what the test declared when it ends.
package amqptest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	hamqp "github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/testenv"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Prefix returns a name prefix unique to this test.
func Prefix(t testing.TB) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "hrtest-" + hex.EncodeToString(b)
}

// Dial connects to the test broker, skipping or failing per
// testenv.Require when it does not answer. The connection is closed when t
// ends.
func Dial(t testing.TB) *amqp.Connection {
	t.Helper()
	var conn *amqp.Connection
	testenv.Require(t, "rabbitmq", func() error {
		var err error
		conn, err = amqp.Dial(testenv.AMQPURL())
		return err
	})
	t.Cleanup(func() { conn.Close() })
	return conn
}

// Channel opens a plain channel on conn, closed when t ends.
func Channel(t testing.TB, conn *amqp.Connection) *amqp.Channel {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("opening channel: %v", err)
	}
	t.Cleanup(func() { ch.Close() })
	return ch
}

// DeleteTopology removes topo's queues and exchanges when t ends.
func DeleteTopology(t testing.TB, topo hamqp.Topology) {
	t.Helper()
	DeleteTopologyOf(t, func() hamqp.Topology { return topo })
}

// DeleteTopologyOf removes the queues and exchanges of the topology topo
// returns when t ends: the one a test has then (routes it added after
// it began included), not the one it started with.
func DeleteTopologyOf(t testing.TB, topoOf func() hamqp.Topology) {
	t.Helper()
	t.Cleanup(func() {
		topo := topoOf()
		conn, err := amqp.Dial(testenv.AMQPURL())
		if err != nil {
			t.Errorf("cleanup: connecting: %v", err)
			return
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			t.Errorf("cleanup: channel: %v", err)
			return
		}
		for _, q := range topo.Queues {
			if _, err := ch.QueueDelete(q.Name, false, false, false); err != nil {
				t.Errorf("cleanup: deleting queue %s: %v", q.Name, err)
				return
			}
		}
		for _, e := range topo.Exchanges {
			if err := ch.ExchangeDelete(e.Name, false, false); err != nil {
				t.Errorf("cleanup: deleting exchange %s: %v", e.Name, err)
				return
			}
		}
		for _, p := range topo.Policies {
			req, err := http.NewRequest(http.MethodDelete, testenv.ManagementURL()+"/api/policies/%2F/"+url.PathEscape(p.Name), nil)
			if err != nil {
				t.Errorf("cleanup: %v", err)
				return
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("cleanup: deleting policy %s: %v", p.Name, err)
				return
			}
			resp.Body.Close()
		}
	})
}

// Count returns the number of ready messages in queue.
func Count(t testing.TB, ch *amqp.Channel, queue string) int {
	t.Helper()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("inspecting queue %s: %v", queue, err)
	}
	return q.Messages
}

// WaitCount waits until queue holds want ready messages, failing t after
// timeout.
func WaitCount(t testing.TB, ch *amqp.Channel, queue string, want int, timeout time.Duration) {
	t.Helper()
	deadline := time.After(testenv.Scaled(timeout))
	tick := time.NewTicker(20 * time.Millisecond) // the broker offers no event for a count; poll it
	defer tick.Stop()
	for {
		got := Count(t, ch, queue)
		if got == want {
			return
		}
		select {
		case <-deadline:
			t.Fatalf("queue %s holds %d messages, want %d (waited %s)", queue, got, want, timeout)
		case <-tick.C:
		}
	}
}

// Drain gets every ready message from queue (acking each) and returns them.
func Drain(t testing.TB, ch *amqp.Channel, queue string) []amqp.Delivery {
	t.Helper()
	var out []amqp.Delivery
	for {
		d, ok, err := ch.Get(queue, false)
		if err != nil {
			t.Fatalf("getting from %s: %v", queue, err)
		}
		if !ok {
			return out
		}
		if err := d.Ack(false); err != nil {
			t.Fatalf("acking: %v", err)
		}
		out = append(out, d)
	}
}

// RequireManagement skips or fails t when the management API does not
// answer.
func RequireManagement(t testing.TB) {
	t.Helper()
	testenv.Require(t, "rabbitmq management API", func() error {
		resp, err := http.Get(testenv.ManagementURL() + "/api/overview")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /api/overview: %s", resp.Status)
		}
		return nil
	})
}

// Dialer returns a Dialer over urls (the test broker when none are given).
func Dialer(t testing.TB, urls ...string) *hamqp.Dialer {
	t.Helper()
	if len(urls) == 0 {
		urls = []string{testenv.AMQPURL()}
	}
	d, err := hamqp.NewDialer(hamqp.DialerConfig{URLs: urls})
	if err != nil {
		t.Fatalf("dialer: %v", err)
	}
	return d
}
