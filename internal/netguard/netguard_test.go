package netguard_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/netguard"
	"github.com/hookrelay/hookrelay/internal/netguard/netguardtest"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/stretchr/testify/require"
)

// Every kind of address a team's route may not reach is refused, named
// by its class, IPv4-mapped forms as their IPv4 address; public
// addresses pass, and so do the operator's allowed networks (and only
// they).
func TestGuardRefusesTheRelaysOwnSide(t *testing.T) {
	t.Parallel()
	g := netguard.New(nil)
	for class, addrs := range map[string][]string{
		"loopback":    {"127.0.0.1", "127.255.0.9", "::1", "::ffff:127.0.0.1"},
		"private":     {"10.0.0.5", "172.16.3.4", "172.31.255.1", "192.168.1.1", "::ffff:10.0.0.5", "fd12:3456::5", "fc00::1"},
		"shared":      {"100.64.0.7", "100.127.255.254"},
		"link-local":  {"169.254.169.254", "169.254.0.1", "fe80::1", "fe80::1%eth0", "::ffff:169.254.169.254"},
		"unspecified": {"0.0.0.0", "0.1.2.3", "::", "::ffff:0.0.0.0"},
		"multicast":   {"224.0.0.251", "239.255.255.250", "ff02::1", "ff05::2"},
		"special-purpose": {"255.255.255.255", "240.0.0.1", "192.0.2.1", "198.18.0.1", "192.0.0.8", "2001:db8::1",
			"64:ff9b::a00:5", "2002:a00:5::1", "2001::1", "::127.0.0.1"},
	} {
		for _, addr := range addrs {
			err := g.Check(netip.MustParseAddr(addr))
			var r *netguard.RefusedError
			require.ErrorAs(t, err, &r, addr)
			require.Equal(t, class, r.Class, addr)
			require.Equal(t, "destination refused: "+class+" address", err.Error(), "the text names no address: %s", addr)
		}
	}
	for _, addr := range []string{"8.8.8.8", "1.1.1.1", "93.184.215.14", "100.63.255.255", "100.128.0.1", "172.32.0.1",
		"169.255.0.1", "2606:4700:4700::1111", "2a00:1450:4001::200e", "::ffff:8.8.8.8"} {
		require.NoError(t, g.Check(netip.MustParseAddr(addr)), addr)
	}

	allowing := netguard.New([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.20.0.0/16"),
		netip.MustParsePrefix("fd00:1::/32")})
	for _, addr := range []string{"127.0.0.1", "::ffff:127.0.0.1", "10.20.7.1", "fd00:1::5", "8.8.8.8"} {
		require.NoError(t, allowing.Check(netip.MustParseAddr(addr)), addr)
	}
	for _, addr := range []string{"10.21.0.1", "::1", "fd00:2::5", "169.254.169.254", "192.168.1.1"} {
		require.Error(t, allowing.Check(netip.MustParseAddr(addr)), addr)
	}

	// The relay machine's own addresses are refused whatever their range,
	// unless allowed.
	own := netguard.New([]netip.Prefix{netip.MustParsePrefix("10.20.0.0/16")},
		netip.MustParseAddr("8.8.4.4"), netip.MustParseAddr("10.20.0.9"))
	var r *netguard.RefusedError
	require.ErrorAs(t, own.Check(netip.MustParseAddr("::ffff:8.8.4.4")), &r)
	require.Equal(t, "relay-machine", r.Class)
	require.Equal(t, "8.8.4.4 is a relay-machine address (an address of the relay's own machine)", r.Detail())
	require.NoError(t, own.Check(netip.MustParseAddr("10.20.0.9")))
	require.NoError(t, own.Check(netip.MustParseAddr("8.8.8.8")))
	addrs, err := netguard.OwnAddrs()
	require.NoError(t, err)
	for _, a := range addrs {
		require.False(t, a.IsLoopback(), "loopback is a class of its own: %s", a)
	}
}

// Detail says what the one who gave the destination gave: the literal
// address, or the name (not what it resolves to), with the class.
func TestRefusedErrorDetail(t *testing.T) {
	t.Parallel()
	g := netguard.New(nil)
	err := g.Check(netip.MustParseAddr("::ffff:10.0.0.5"))
	var r *netguard.RefusedError
	require.ErrorAs(t, err, &r)
	require.Equal(t, "10.0.0.5 is a private address (RFC 1918 or RFC 4193: the relay's own network)", r.Detail())
	r = &netguard.RefusedError{Addr: netip.MustParseAddr("0.0.0.0"), Class: "unspecified", Name: "db.internal"}
	require.Equal(t, "db.internal resolves to an unspecified address (the relay's own machine)", r.Detail())
}

// At save: a literal address is checked as it is; a name by every address
// it resolves to now, any one refused refusing it; a name that does not
// resolve passes (the dialer checks what it connects to).
func TestCheckHost(t *testing.T) {
	t.Parallel()
	g := netguard.New(nil)
	lookup := netguardtest.LookupFunc(map[string][]netip.Addr{
		"metadata.test": {netip.MustParseAddr("169.254.169.254")},
		"mixed.test":    {netip.MustParseAddr("8.8.8.8"), netip.MustParseAddr("10.0.0.5")},
		"public.test":   {netip.MustParseAddr("8.8.8.8"), netip.MustParseAddr("2606:4700:4700::1111")},
		"six.test":      {netip.MustParseAddr("fd00::7")},
	})
	ctx := t.Context()
	for host, class := range map[string]string{
		"127.0.0.1": "loopback", "::1": "loopback", "fe80::1%eth0": "link-local",
		"metadata.test": "link-local", "mixed.test": "private", "six.test": "private", "localhost": "loopback",
	} {
		err := g.CheckHost(ctx, host, lookup)
		var r *netguard.RefusedError
		require.ErrorAs(t, err, &r, host)
		require.Equal(t, class, r.Class, host)
		if _, lerr := netip.ParseAddr(host); lerr != nil {
			require.Equal(t, host, r.Name)
			require.Contains(t, r.Detail(), host+" resolves to a "+class+" address")
		}
	}
	for _, host := range []string{"8.8.8.8", "public.test", "nowhere.test"} {
		require.NoError(t, g.CheckHost(ctx, host, lookup), host)
	}
}

// errTripwire stops a test's dial to anything beyond loopback that the
// guard let through: no test sends a packet there.
var errTripwire = errors.New("test tripwire: a dial beyond loopback got past the guard")

// dialer dials through g's Control, with the tripwire after it, resolving
// names with hosts.
func dialer(g *netguard.Guard, hosts map[string][]netip.Addr) *net.Dialer {
	return &net.Dialer{
		Timeout:  testenv.Scaled(5 * time.Second),
		Resolver: netguardtest.Resolver(hosts),
		Control: func(network, address string, c syscall.RawConn) error {
			if err := g.Control(network, address, c); err != nil {
				return err
			}
			if ap, err := netip.ParseAddrPort(address); err != nil || !ap.Addr().Unmap().IsLoopback() {
				return errTripwire
			}
			return nil
		},
	}
}

// accepted reports the remote address of each connection ln accepts.
func accepted(t *testing.T, ln net.Listener) <-chan string {
	out := make(chan string, 64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			out <- c.RemoteAddr().String()
			_ = c.Close()
		}
	}()
	t.Cleanup(func() { _ = ln.Close() })
	return out
}

// At connect time the dialer's Control sees each resolved address and
// refuses before connecting: a name that resolves to loopback (a
// rebinding: the name may have resolved elsewhere when the route was
// saved) never reaches the listener there; to a private or the metadata
// address, the dial is refused before any packet; with loopback allowed,
// the same dial connects.
func TestControlRefusesAtConnectTime(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	conns := accepted(t, ln)
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	hosts := map[string][]netip.Addr{
		"rebind.test":   {netip.MustParseAddr("127.0.0.1")},
		"private.test":  {netip.MustParseAddr("10.0.0.5")},
		"metadata.test": {netip.MustParseAddr("169.254.169.254")},
		"six.test":      {netip.MustParseAddr("fe80::1")},
	}
	d := dialer(netguard.New(nil), hosts)
	ctx, cancel := context.WithTimeout(t.Context(), testenv.Scaled(10*time.Second))
	defer cancel()
	for host, class := range map[string]string{
		"rebind.test": "loopback", "private.test": "private", "metadata.test": "link-local", "six.test": "link-local",
		"127.0.0.1": "loopback", "[::ffff:127.0.0.1]": "loopback", "10.0.0.5": "private", "169.254.169.254": "link-local",
	} {
		c, err := d.DialContext(ctx, "tcp", host+":"+port)
		if c != nil {
			_ = c.Close()
		}
		require.NotErrorIs(t, err, errTripwire, host)
		var r *netguard.RefusedError
		require.ErrorAs(t, err, &r, host)
		require.Equal(t, class, r.Class, host)
	}
	// Shorthand forms of 127.0.0.1 are names to Go, never addresses:
	// they do not resolve (and no query leaves: the resolver is in
	// memory), so nothing connects.
	for _, host := range []string{"2130706433", "0x7f.0.0.1", "127.1", "017700000001"} {
		c, err := d.DialContext(ctx, "tcp", host+":"+port)
		if c != nil {
			_ = c.Close()
		}
		var dnsErr *net.DNSError
		require.ErrorAs(t, err, &dnsErr, host)
	}

	// Accepted in order: a refused dial that had connected would come
	// before the allowed one.
	allowed := dialer(netguard.New([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}), hosts)
	c, err := allowed.DialContext(ctx, "tcp", "rebind.test:"+port)
	require.NoError(t, err)
	defer c.Close()
	select {
	case remote := <-conns:
		require.Equal(t, c.LocalAddr().String(), remote, "the first connection the listener saw is the allowed one")
	case <-ctx.Done():
		t.Fatal("the allowed dial never reached the listener")
	}
}
