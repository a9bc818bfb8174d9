package testutil

import (
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
)

// CutProxy is a TCP proxy to a server that a test can cut: Cut closes
// every connection through it and refuses new ones (each is accepted and
// closed at once, as a server going away looks to its clients) until
// Restore.
type CutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]bool
}

// NewCutProxy listens on a loopback port and forwards to target
// (host:port) until the test ends.
func NewCutProxy(t testing.TB, target string) *CutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &CutProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	done := make(chan struct{})
	go func() { defer close(done); p.serve() }()
	t.Cleanup(func() { ln.Close(); p.Cut(); <-done })
	return p
}

// Addr is the proxy's host:port.
func (p *CutProxy) Addr() string { return p.ln.Addr().String() }

// URL returns rawURL (a database URL) with its host:port replaced by the
// proxy's.
func (p *CutProxy) URL(t testing.TB, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.Addr()
	return u.String()
}

// Cut closes every connection through the proxy and refuses new ones.
func (p *CutProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// Restore lets connections through again.
func (p *CutProxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

func (p *CutProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.pipe(c)
	}
}

// track registers c unless the proxy is cut (then it closes c).
func (p *CutProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		c.Close()
		return false
	}
	p.conns[c] = true
	return true
}

func (p *CutProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *CutProxy) pipe(c net.Conn) {
	if !p.track(c) {
		return
	}
	defer p.untrack(c)
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	if !p.track(s) {
		c.Close()
		return
	}
	defer p.untrack(s)
	go func() { _, _ = io.Copy(s, c); s.Close(); c.Close() }()
	_, _ = io.Copy(c, s)
	s.Close()
	c.Close()
}
