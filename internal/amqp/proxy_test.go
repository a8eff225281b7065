package amqp_test

import (
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
)

// holdProxy forwards TCP to the broker and can hold the broker's frames on
// their way to the client (Hold) and let them through again (Release), so a
// test can make a confirm arrive after the client stopped waiting for it.
// Nothing is lost or reordered: held bytes wait in the proxy.
type holdProxy struct {
	url string

	mu     sync.Mutex
	held   bool
	cond   *sync.Cond
	closed bool
	conns  []net.Conn
}

// newHoldProxy proxies the broker at rawURL; URL is the address to use.
func newHoldProxy(t *testing.T, rawURL string) *holdProxy {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("parsing %q: %v", rawURL, err)
	}
	target := u.Host
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	u.Host = ln.Addr().String()
	p := &holdProxy{url: u.String()}
	p.cond = sync.NewCond(&p.mu)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				client.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, client, server)
			p.mu.Unlock()
			wg.Add(2)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(server, client)
				server.Close()
				client.Close()
			}()
			go func() {
				defer wg.Done()
				p.forward(client, server)
				server.Close()
				client.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		p.closed = true
		p.held = false
		p.cond.Broadcast()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		wg.Wait()
	})
	return p
}

// forward copies broker → client, waiting while the proxy holds.
func (p *holdProxy) forward(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.held && !p.closed {
				p.cond.Wait()
			}
			p.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// URL is the AMQP URL through the proxy.
func (p *holdProxy) URL() string { return p.url }

// Hold stops forwarding the broker's frames to the client.
func (p *holdProxy) Hold() {
	p.mu.Lock()
	p.held = true
	p.mu.Unlock()
}

// Release forwards everything held, and what follows.
func (p *holdProxy) Release() {
	p.mu.Lock()
	p.held = false
	p.cond.Broadcast()
	p.mu.Unlock()
}
