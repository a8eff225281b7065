package app_test

import (
	"net"
	"net/http"
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
	for _, base := range []string{h.base, h.dispatcherBase} {
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
