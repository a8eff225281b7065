package store

import (
	"context"
	"fmt"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TCP settings of every pool connection. A call with a deadline fails at
// its deadline whatever the network does (see DB.bound); these settings
// are for what waits without one: an idle pooled connection, the LISTEN
// connection, and a peer that vanished while the kernel still holds unsent
// bytes. Go's default is a first probe after 15s idle and 9 probes (more
// than 2 minutes), and Linux's default for unacknowledged data is about 15
// minutes of retransmissions.
const (
	// keepAliveIdle is the silence before the first probe. Probes are a
	// few bytes each; 10s costs nothing and notices a dead peer early.
	keepAliveIdle = 10 * time.Second
	// keepAliveInterval and keepAliveCount: three unanswered probes 5s
	// apart declare the peer dead, about 25s after the last sign of life.
	keepAliveInterval = 5 * time.Second
	keepAliveCount    = 3
	// tcpUserTimeout (Linux) closes a connection whose sent data stays
	// unacknowledged this long. It also caps the keepalive detection above.
	// A live peer's kernel acknowledges within a round trip, however busy
	// Postgres is, so 20s is far above any healthy delay.
	tcpUserTimeout = 20 * time.Second
)

// dialFunc returns the pool's dialer. The connect timeout comes from the
// context pgx gives it (ConnConfig.ConnectTimeout).
func dialFunc() pgconn.DialFunc {
	d := &net.Dialer{
		KeepAliveConfig: net.KeepAliveConfig{
			Enable:   true,
			Idle:     keepAliveIdle,
			Interval: keepAliveInterval,
			Count:    keepAliveCount,
		},
		Control: func(network, _ string, c syscall.RawConn) error {
			if !strings.HasPrefix(network, "tcp") {
				return nil // a unix socket has no TCP options
			}
			return setUserTimeout(c, tcpUserTimeout)
		},
	}
	return d.DialContext
}

// serverKeepalive gives the server's end of a new connection the same
// settings. A client that vanished in a transaction (an outbox claim, a
// delivery lock held during an attempt) otherwise keeps its row locks until
// the server's OS gives up on the socket: two hours by default on Linux.
// They are set with SET after connecting rather than as startup parameters,
// which connection poolers such as PgBouncer refuse; a setting given in the
// database URL is left alone. Postgres ignores them on a Unix socket.
func serverKeepalive(params map[string]string) func(context.Context, *pgx.Conn) error {
	settings := []struct {
		name  string
		value int64
	}{
		{"tcp_keepalives_idle", int64(keepAliveIdle / time.Second)},
		{"tcp_keepalives_interval", int64(keepAliveInterval / time.Second)},
		{"tcp_keepalives_count", keepAliveCount},
		{"tcp_user_timeout", tcpUserTimeout.Milliseconds()},
	}
	var sql strings.Builder
	for _, s := range settings {
		if _, set := params[s.name]; !set {
			fmt.Fprintf(&sql, "SET %s = %d;", s.name, s.value)
		}
	}
	return func(ctx context.Context, conn *pgx.Conn) error {
		if sql.Len() == 0 {
			return nil
		}
		if _, err := conn.Exec(ctx, sql.String()); err != nil {
			return fmt.Errorf("setting server keepalive: %w", err)
		}
		return nil
	}
}
