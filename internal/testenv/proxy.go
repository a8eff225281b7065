package testenv

import (
	"errors"
	"net"
	"sync"
	"testing"
)

// Proxy is a TCP proxy in front of a real service, so a test can cut the
// network between hookrelay and Postgres or RabbitMQ and restore it, or
// stall it, without stopping the shared service.
type Proxy struct {
	t      testing.TB
	target string
	addr   string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	stall chan struct{} // non-nil while stalled; Resume closes it
	wg    sync.WaitGroup
}

// NewProxy listens on a free loopback port and forwards to target
// ("host:port"). It is closed when t ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &Proxy{t: t, target: target, addr: ln.Addr().String(), conns: map[net.Conn]struct{}{}}
	p.serve(ln)
	t.Cleanup(func() {
		p.Cut()
		p.wg.Wait()
	})
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.addr }

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.pipe(c)
			}()
		}
	}()
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) pipe(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	if !p.track(client) || !p.track(server) {
		client.Close()
		server.Close()
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	copyClose := func(dst, src net.Conn) {
		defer wg.Done()
		p.forward(dst, src)
		dst.Close()
		src.Close()
	}
	go copyClose(server, client)
	go copyClose(client, server)
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, client)
	delete(p.conns, server)
	p.mu.Unlock()
}

// forward copies src to dst until either fails. While the proxy is stalled
// it holds what it read instead of writing it, and stops reading.
func (p *Proxy) forward(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			gate := p.stall
			p.mu.Unlock()
			if gate != nil {
				<-gate
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a closed socket: the pipe ends either way
		}
	}
}

// Stall stops forwarding in both directions without closing anything: every
// socket stays open and connected, new connections are accepted, and bytes
// simply stop arriving, as on a network path that black-holes packets (the
// hard case: nothing tells the client the peer is gone). Bytes already read
// are held and delivered after Resume, in order.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stall == nil {
		p.stall = make(chan struct{})
	}
}

// Resume forwards again, starting with the bytes held during the stall.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resumeLocked()
}

func (p *Proxy) resumeLocked() {
	if p.stall != nil {
		close(p.stall)
		p.stall = nil
	}
}

// Cut closes the listener (new connections are refused) and every open
// connection, as a network failure would. It also ends a stall.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resumeLocked()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
}

// Restore listens again on the same address.
func (p *Proxy) Restore() {
	p.t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		if errors.Is(err, net.ErrClosed) {
			return
		}
		p.t.Fatalf("proxy re-listen on %s: %v", p.addr, err)
	}
	p.serve(ln)
}
