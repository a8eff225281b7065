package amqp_test

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	hamqp "github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// deadNode returns an amqp URL on a loopback port where nothing listens.
func deadNode(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return "amqp://guest:guest@" + addr + "/"
}

func TestDialerSkipsDeadNodes(t *testing.T) {
	t.Parallel()
	amqptest.Dial(t) // skips or fails without a broker
	live := testenv.AMQPURL()
	dead1, dead2 := deadNode(t), deadNode(t)
	reg := prometheus.NewRegistry()
	gauge := hamqp.NewNodeGauge(reg)
	d, err := hamqp.NewDialer(hamqp.DialerConfig{URLs: []string{dead1, live, dead2}, Nodes: gauge})
	require.NoError(t, err)

	// Whatever node it starts at, every dial ends on the live one.
	for range 5 {
		conn, err := d.Dial("dialer-test")
		require.NoError(t, err)
		require.Equal(t, hamqp.Node(live), conn.Node)
		require.Equal(t, 1, testutil.CollectAndCount(reg, "hookrelay_rabbitmq_connected_node"))
		require.Contains(t, gather(t, reg), `connection="dialer-test",node="`+hamqp.Node(live)+`"`)
		require.NoError(t, conn.Close())
		// The series goes when the library reports the close, which it
		// does on its reader goroutine, after Close has returned.
		require.Eventually(t, func() bool { return testutil.CollectAndCount(reg, "hookrelay_rabbitmq_connected_node") == 0 },
			testenv.Scaled(5*time.Second), 5*time.Millisecond, "a closed connection is on no node")
	}
}

func TestDialerReportsEveryNode(t *testing.T) {
	t.Parallel()
	dead1, dead2 := deadNode(t), deadNode(t)
	d, err := hamqp.NewDialer(hamqp.DialerConfig{URLs: []string{dead1, dead2}})
	require.NoError(t, err)
	_, err = d.Dial("dialer-test")
	require.Error(t, err)
	for _, u := range []string{dead1, dead2} {
		require.Contains(t, err.Error(), hamqp.Node(u))
	}
	require.NotContains(t, err.Error(), "guest:guest", "no credentials in errors")
	require.NotErrorIs(t, err, hamqp.ErrRefused, "an unreachable node is worth trying again")
}

func TestDialerNamesRefusedCredentials(t *testing.T) {
	t.Parallel()
	amqptest.Dial(t)
	u, err := url.Parse(testenv.AMQPURL())
	require.NoError(t, err)
	u.User = url.UserPassword("guest", "wrong-password")
	d, err := hamqp.NewDialer(hamqp.DialerConfig{URLs: []string{u.String()}})
	require.NoError(t, err)
	_, err = d.Dial("dialer-test")
	require.Error(t, err)
	require.Contains(t, err.Error(), "credentials refused")
	require.NotContains(t, err.Error(), "wrong-password")
	require.ErrorIs(t, err, hamqp.ErrRefused, "a refusal is not worth trying again")
}

func TestNode(t *testing.T) {
	t.Parallel()
	require.Equal(t, "rmq1:5672", hamqp.Node("amqp://u:p@rmq1/"))
	require.Equal(t, "rmq1:5671", hamqp.Node("amqps://u:p@rmq1/vhost"))
	require.Equal(t, "10.0.0.1:5700", hamqp.Node("amqp://10.0.0.1:5700"))
}

func TestTLSConfigLoad(t *testing.T) {
	t.Parallel()
	cfg, err := hamqp.TLSConfig{}.Load()
	require.NoError(t, err)
	require.Nil(t, cfg, "no TLS settings: amqps uses the system roots")
	cfg, err = hamqp.TLSConfig{ServerName: "rmq.internal"}.Load()
	require.NoError(t, err)
	require.Equal(t, "rmq.internal", cfg.ServerName)
	_, err = hamqp.TLSConfig{CAFile: "/etc/hostname"}.Load()
	require.ErrorContains(t, err, "holds no PEM certificate")
	_, err = hamqp.TLSConfig{CertFile: "/etc/hostname"}.Load()
	require.ErrorContains(t, err, "cert_file and key_file go together")
}

func gather(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var b strings.Builder
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				b.WriteString(l.GetName() + `="` + l.GetValue() + `",`)
			}
		}
	}
	return b.String()
}

func TestManagementMovesToTheNextNode(t *testing.T) {
	t.Parallel()
	amqptest.RequireManagement(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := "http://" + ln.Addr().String()
	require.NoError(t, ln.Close())
	m, err := hamqp.NewManagement([]string{dead, testenv.ManagementURL()}, testenv.AMQPURL())
	require.NoError(t, err)
	out, err := m.Do(context.Background(), http.MethodGet, "vhosts/{vhost}", nil)
	require.NoError(t, err)
	require.Contains(t, string(out), `"name":"/"`)

	_, err = m.Do(context.Background(), http.MethodGet, "queues/{vhost}/no-such-queue-"+amqptest.Prefix(t), nil)
	require.ErrorContains(t, err, "HTTP 404", "a 4xx is the answer, not a node failure")
}
