package main

import (
	"net"
	"sync"
)

// blackhole is a TCP forwarder in front of Postgres that can stop
// forwarding without closing anything: sockets stay open and bytes stop
// flowing both ways, as when a network path or a host hangs. That is the
// hard case for a client (nothing tells it the peer is gone); a closed
// socket is the easy one.
type blackhole struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	stalled bool
	resume  chan struct{} // closed on resume
}

func newBlackhole(target string) (*blackhole, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &blackhole{ln: ln, target: target, resume: make(chan struct{})}
	close(b.resume)
	go b.accept()
	return b, nil
}

func (b *blackhole) addr() string { return b.ln.Addr().String() }

func (b *blackhole) close() error { return b.ln.Close() }

// stall stops forwarding; new connections are accepted and then hang too.
func (b *blackhole) stall() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.stalled {
		b.stalled = true
		b.resume = make(chan struct{})
	}
}

// unstall forwards again whatever is waiting.
func (b *blackhole) unstall() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stalled {
		b.stalled = false
		close(b.resume)
	}
}

// gate returns a channel that is closed while traffic may flow.
func (b *blackhole) gate() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.resume
}

func (b *blackhole) accept() {
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		go b.forward(c)
	}
}

func (b *blackhole) forward(client net.Conn) {
	<-b.gate()
	server, err := net.Dial("tcp", b.target)
	if err != nil {
		client.Close()
		return
	}
	done := make(chan struct{}, 2)
	go b.copy(server, client, done)
	go b.copy(client, server, done)
	<-done
	client.Close()
	server.Close()
	<-done
}

// copy moves bytes from src to dst, waiting at the gate before each write.
func (b *blackhole) copy(dst, src net.Conn, done chan<- struct{}) {
	defer func() { done <- struct{}{} }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			<-b.gate()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a closed socket: the other direction ends too
		}
	}
}
