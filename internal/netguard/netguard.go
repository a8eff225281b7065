// Package netguard keeps a team's routes off the relay's own side. A
// Guard refuses destinations that are not globally reachable: loopback,
// private (RFC 1918, RFC 4193), shared (RFC 6598, carrier-grade NAT),
// link-local (the cloud's metadata service at 169.254.169.254 among
// them), unspecified, multicast, and the rest of IANA's special-purpose
// registries (documentation, benchmarking, reserved, NAT64, 6to4,
// Teredo), IPv4-mapped IPv6 forms included, and the relay machine's own
// addresses whatever their range; the operator's allowed networks pass. The ranges come from code.dny.dev/ssrf, generated from
// the IANA registries.
//
// A route's destination is checked twice: when it is saved (CheckHost: a
// literal address, or every address its name resolves to then), and by
// the delivery dialer (Control, as net.Dialer.Control), which sees each
// address the name resolves to at connect time, just before the connect:
// a name that resolves elsewhere later (DNS rebinding) is refused there.
package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"code.dny.dev/ssrf"
)

// Guard refuses the addresses a team's route may not reach. It is safe
// for concurrent use.
type Guard struct {
	allowed []netip.Prefix
	own     map[netip.Addr]bool
	ssrf    *ssrf.Guardian
}

// New returns a Guard that lets allowed through, whatever else they are
// (the operator's networks of the platform's own internal destinations),
// and refuses own too (the relay's machine's addresses, OwnAddrs:
// reachable from the machine itself whatever their range).
func New(allowed []netip.Prefix, own ...netip.Addr) *Guard {
	g := &Guard{own: map[netip.Addr]bool{}}
	for _, p := range allowed {
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		g.allowed = append(g.allowed, p.Masked())
	}
	for _, a := range own {
		g.own[a.Unmap().WithZone("")] = true
	}
	// Any port and network: the guard is about where, not how (a team's
	// destination may listen on 8443).
	g.ssrf = ssrf.New(ssrf.WithAnyPort(), ssrf.WithAnyNetwork())
	return g
}

// OwnAddrs returns the addresses of this machine's interfaces, loopback
// left out (a class of its own): a public one among them reaches the
// relay's own listeners.
func OwnAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("reading this machine's addresses: %w", err)
	}
	var out []netip.Addr
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		if ip, ok := netip.AddrFromSlice(n.IP); ok && !ip.Unmap().IsLoopback() {
			out = append(out, ip.Unmap())
		}
	}
	return out, nil
}

// Check returns a *RefusedError when a is refused, nil when it may be
// reached. An IPv4-mapped IPv6 address is checked as its IPv4 address, a
// zone is left out.
func (g *Guard) Check(a netip.Addr) error {
	a = a.Unmap().WithZone("")
	if !a.IsValid() {
		return &RefusedError{Class: "invalid"}
	}
	for _, p := range g.allowed {
		if p.Contains(a) {
			return nil
		}
	}
	if g.own[a] {
		return &RefusedError{Addr: a, Class: "relay-machine"}
	}
	if g.ssrf.SafeAddr(a) == nil {
		return nil
	}
	return &RefusedError{Addr: a, Class: class(a)}
}

// Control is a net.Dialer's Control: it refuses to connect to an address
// Check refuses. The dialer calls it for each address it tries, after the
// name was resolved and before the connect, so nothing is sent to a
// refused address.
func (g *Guard) Control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &RefusedError{Class: "invalid"}
	}
	return g.Check(ap.Addr())
}

// LookupFunc resolves a host name to its addresses, as
// (*net.Resolver).LookupNetIP with network "ip".
type LookupFunc func(ctx context.Context, network, host string) ([]netip.Addr, error)

// CheckHost checks a destination's host when a route is saved: a literal
// address itself, a name by every address lookup gives for it now (any
// one refused refuses it). A name that does not resolve now passes: the
// dialer checks each address it connects to.
func (g *Guard) CheckHost(ctx context.Context, host string, lookup LookupFunc) error {
	if a, err := netip.ParseAddr(host); err == nil {
		return g.Check(a)
	}
	addrs, err := lookup(ctx, "ip", host)
	if err != nil {
		return nil
	}
	for _, a := range addrs {
		if err := g.Check(a); err != nil {
			var r *RefusedError
			if errors.As(err, &r) {
				r.Name = host
			}
			return err
		}
	}
	return nil
}

// RefusedError is a destination a Guard refused. Its Error names the
// address's class only: what a failed delivery records, where a team
// reads it, says nothing of the address or the port.
type RefusedError struct {
	// Addr is the refused address (zero when unreadable).
	Addr netip.Addr
	// Class is the kind of address: loopback, private, shared,
	// link-local, unspecified, multicast, special-purpose, or relay-machine
	// (an address of the relay's machine).
	Class string
	// Name is the host name that resolved to Addr; "" for a literal
	// address.
	Name string
}

func (e *RefusedError) Error() string { return "destination refused: " + e.Class + " address" }

// DestinationRefused marks the error as a guard's refusal, for a package
// that does not import this one.
func (e *RefusedError) DestinationRefused() {}

// Detail says what was refused, for the one who gave the destination:
// the address (or the name and that it resolves to such an address, the
// address itself left out), its class and what the class is.
func (e *RefusedError) Detail() string {
	what := fmt.Sprintf("%s %s address", article(e.Class), e.Class)
	if n := notes[e.Class]; n != "" {
		what += " (" + n + ")"
	}
	if e.Name != "" {
		return e.Name + " resolves to " + what
	}
	return e.Addr.String() + " is " + what
}

func article(class string) string {
	if class == "unspecified" || class == "invalid" {
		return "an"
	}
	return "a"
}

var notes = map[string]string{
	"loopback":        "the relay's own machine",
	"relay-machine":   "an address of the relay's own machine",
	"unspecified":     "the relay's own machine",
	"private":         "RFC 1918 or RFC 4193: the relay's own network",
	"shared":          "RFC 6598, carrier-grade NAT",
	"link-local":      "the relay's own link, where cloud metadata services answer",
	"multicast":       "not a single destination",
	"special-purpose": "not globally reachable: IANA's special-purpose registry",
}

var (
	shared  = netip.MustParsePrefix("100.64.0.0/10")
	thisNet = netip.MustParsePrefix("0.0.0.0/8")
)

// class names the kind of a refused address.
func class(a netip.Addr) string {
	switch {
	case a.IsLoopback():
		return "loopback"
	case a.IsUnspecified() || thisNet.Contains(a):
		return "unspecified"
	case a.IsPrivate():
		return "private"
	case shared.Contains(a):
		return "shared"
	case a.IsLinkLocalUnicast():
		return "link-local"
	case a.IsMulticast():
		return "multicast"
	}
	return "special-purpose"
}
