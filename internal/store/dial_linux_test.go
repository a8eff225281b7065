package store_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// Item 11: a pooled connection whose peer goes silent fails on its own,
// also when no call with a deadline waits on it: keepalive probes start
// after 10s of silence, 3 unanswered probes 5s apart end it, and sent data
// left unacknowledged for 20s ends it too (TCP_USER_TIMEOUT).
func TestPoolConnectionsDetectSilentPeers(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := db.Pool().Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	tcp, ok := conn.Conn().PgConn().Conn().(*net.TCPConn)
	require.True(t, ok, "test database is reached over TCP, got %T", conn.Conn().PgConn().Conn())
	raw, err := tcp.SyscallConn()
	require.NoError(t, err)

	got := map[string]int{}
	var gerr error
	require.NoError(t, raw.Control(func(fd uintptr) {
		for name, opt := range map[string][2]int{
			"SO_KEEPALIVE":     {unix.SOL_SOCKET, unix.SO_KEEPALIVE},
			"TCP_KEEPIDLE":     {unix.IPPROTO_TCP, unix.TCP_KEEPIDLE},
			"TCP_KEEPINTVL":    {unix.IPPROTO_TCP, unix.TCP_KEEPINTVL},
			"TCP_KEEPCNT":      {unix.IPPROTO_TCP, unix.TCP_KEEPCNT},
			"TCP_USER_TIMEOUT": {unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT},
		} {
			v, err := unix.GetsockoptInt(int(fd), opt[0], opt[1])
			if err != nil {
				gerr = err
				return
			}
			got[name] = v
		}
	}))
	require.NoError(t, gerr)
	require.Equal(t, map[string]int{
		"SO_KEEPALIVE":     1,
		"TCP_KEEPIDLE":     10,
		"TCP_KEEPINTVL":    5,
		"TCP_KEEPCNT":      3,
		"TCP_USER_TIMEOUT": 20000,
	}, got)

	// The server's end of the connection notices a vanished client as
	// soon (and then drops the locks that client held).
	server := map[string]string{}
	for _, name := range []string{"tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count", "tcp_user_timeout"} {
		var v string
		require.NoError(t, conn.QueryRow(ctx, "SHOW "+name).Scan(&v))
		server[name] = v
	}
	require.Equal(t, map[string]string{
		"tcp_keepalives_idle": "10", "tcp_keepalives_interval": "5", "tcp_keepalives_count": "3", "tcp_user_timeout": "20000",
	}, server)
}
