package app_test

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	hamqp "github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/stretchr/testify/require"
)

// A cluster's node list with a dead node first: both binaries start on the
// node that answers, ingest, publish and deliver, and report that node.
func TestAMQPURLsWithADeadNodeListedFirst(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := "amqp://guest:guest@" + ln.Addr().String() + "/"
	require.NoError(t, ln.Close())
	live := testenv.AMQPURL()
	h.cfg.AMQP.URL = ""
	h.cfg.AMQP.URLs = []string{dead, live}

	dest := newDestination(t, func(http.ResponseWriter, *http.Request, []byte, string, int) int { return http.StatusOK })
	h.cfg.Routes[0].URL = dest.url("billing")
	h.start(app.ReceiverOptions{})
	h.startDispatcher(app.DispatcherOptions{})

	for _, id := range []string{"evt_c1", "evt_c2", "evt_c3"} {
		require.Equal(t, http.StatusOK, h.postSigned(id, "invoice.paid").status)
	}
	dest.waitFor(20*time.Second, "three deliveries", func(rs []received) bool { return len(rs) == 3 })
	require.Len(t, dest.successes(), 3)

	// Each binary reports the node its connections are on: the live one.
	for _, base := range []string{h.metricsBase, h.dispatcherBase} {
		on := connectedNodes(t, base)
		require.NotEmpty(t, on, "%s reports its connections' node", base)
		for conn, node := range on {
			require.Equal(t, hamqp.Node(live), node, "connection %s", conn)
		}
	}
}

// connectedNodes reads hookrelay_rabbitmq_connected_node from base: the
// node of each connection.
func connectedNodes(t *testing.T, base string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for series, v := range scrape(t, base) {
		name, labels, ok := strings.Cut(series, "{")
		if !ok || name != "hookrelay_rabbitmq_connected_node" || v != 1 {
			continue
		}
		var conn, node string
		for _, kv := range strings.Split(strings.TrimSuffix(labels, "}"), ",") {
			k, val, _ := strings.Cut(kv, "=")
			switch k {
			case "connection":
				conn = strings.Trim(val, `"`)
			case "node":
				node = strings.Trim(val, `"`)
			}
		}
		out[conn] = node
	}
	return out
}

// On a three-node cluster, the node the dispatcher consumes from is killed
// mid-run: its connection moves to another node within 10 s, and every
// event is delivered exactly once, as the destination counts.
func TestDispatcherMovesWhenItsNodeIsKilled(t *testing.T) {
	t.Parallel()
	cl := testenv.RequireCluster(t)
	h := newHarness(t)
	h.cfg.AMQP.URL, h.cfg.AMQP.URLs = "", cl.AMQPURLs
	h.cfg.AMQP.ManagementURL, h.cfg.AMQP.ManagementURLs = "", cl.ManagementURLs
	dest := newDestination(t, func(http.ResponseWriter, *http.Request, []byte, string, int) int { return http.StatusOK })
	h.cfg.Routes[0].URL = dest.url("billing")
	h.start(app.ReceiverOptions{})
	h.startDispatcher(app.DispatcherOptions{})

	const total = 300
	sent := 0
	send := func(n int) {
		for range n {
			sent++
			require.Equal(t, http.StatusOK, h.postSigned(fmt.Sprintf("evt_node_%03d", sent), "invoice.paid").status)
		}
	}
	send(100)
	dest.waitFor(30*time.Second, "deliveries under way", func(rs []received) bool { return len(rs) >= 30 })

	consumer := consumerNode(t, h.dispatcherBase)
	n := cl.NodeIndex(consumer)
	require.NotZero(t, n, "the consumers' node %s is one of the cluster's", consumer)
	cl.Run(t, "kill", strconv.Itoa(n))
	killed := time.Now()
	t.Cleanup(func() { cl.Run(t, "start", strconv.Itoa(n)) })
	t.Logf("killed node %d (%s), the dispatcher's consumers' node, after %d deliveries", n, consumer, len(dest.snapshot()))

	// Keep sending while the dispatcher moves.
	var moved time.Duration
	for moved == 0 {
		if sent < total {
			send(10)
		}
		if now := consumerNode(t, h.dispatcherBase); now != "" && now != consumer {
			moved = time.Since(killed)
			t.Logf("consumers moved to %s after %s", now, moved.Round(time.Millisecond))
		}
		require.Less(t, time.Since(killed), 10*time.Second, "the dispatcher's consumers did not move off the dead node within 10s")
	}
	send(total - sent)

	dest.waitFor(60*time.Second, "every event", func(rs []received) bool { return len(dest.successes()) == total })
	for pair, n := range dest.successes() {
		require.Equal(t, 1, n, "pair %s delivered once", pair)
	}
	require.Len(t, dest.snapshot(), total, "one POST per event, nothing again")
}

// consumerNode is the node the dispatcher's consuming connection is on, ""
// while it has none.
func consumerNode(t *testing.T, base string) string {
	t.Helper()
	for conn, node := range connectedNodes(t, base) {
		if strings.HasPrefix(conn, "hookrelay-dispatcher ") {
			return node
		}
	}
	return ""
}
