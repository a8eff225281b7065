// Package netguardtest resolves host names the way a test chooses,
// without a network: a net.Resolver whose DNS server is a goroutine at
// the other end of an in-memory connection. A test makes a name resolve
// to a private address, or to one address when a route is saved and
// another when it is dialled (DNS rebinding), and no query leaves the
// process.
package netguardtest

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"strings"

	"golang.org/x/net/dns/dnsmessage"
)

// Resolver returns a resolver (pure Go) that answers names from hosts:
// their A and AAAA records, "no such host" for any other name. Names in
// /etc/hosts (localhost) are still read from there, as every Go resolver
// does first.
func Resolver(hosts map[string][]netip.Addr) *net.Resolver {
	zone := map[string][]netip.Addr{}
	for name, addrs := range hosts {
		zone[strings.ToLower(strings.TrimSuffix(name, "."))+"."] = addrs
	}
	return &net.Resolver{
		PreferGo: true,
		// Whatever server the system names (network, address), the
		// query goes to the goroutine: an in-memory stream, which the Go
		// resolver speaks as DNS over TCP.
		Dial: func(context.Context, string, string) (net.Conn, error) {
			client, server := net.Pipe()
			go serve(server, zone)
			return client, nil
		},
	}
}

// LookupFunc is Resolver's LookupNetIP, as netguard.CheckHost takes it.
func LookupFunc(hosts map[string][]netip.Addr) func(ctx context.Context, network, host string) ([]netip.Addr, error) {
	return Resolver(hosts).LookupNetIP
}

// serve answers the queries that arrive on c, each framed by its length
// (two bytes), until c is closed.
func serve(c net.Conn, zone map[string][]netip.Addr) {
	defer c.Close()
	for {
		var n uint16
		if err := binary.Read(c, binary.BigEndian, &n); err != nil {
			return
		}
		query := make([]byte, n)
		if _, err := io.ReadFull(c, query); err != nil {
			return
		}
		answer, err := answer(query, zone)
		if err != nil {
			return
		}
		framed := binary.BigEndian.AppendUint16(nil, uint16(len(answer)))
		if _, err := c.Write(append(framed, answer...)); err != nil {
			return
		}
	}
}

// answer builds the response to query from zone.
func answer(query []byte, zone map[string][]netip.Addr) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	addrs, known := zone[strings.ToLower(q.Name.String())]
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	if !known {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	for _, a := range addrs {
		rr := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 0}
		switch {
		case q.Type == dnsmessage.TypeA && a.Is4():
			err = b.AResource(rr, dnsmessage.AResource{A: a.As4()})
		case q.Type == dnsmessage.TypeAAAA && a.Is6():
			err = b.AAAAResource(rr, dnsmessage.AAAAResource{AAAA: a.As16()})
		}
		if err != nil {
			return nil, err
		}
	}
	return b.Finish()
}
