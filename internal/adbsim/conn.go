package adbsim

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// errFlowControl is a WRTE sent before the previous one on its stream was
// acknowledged: protocol.txt says to close the connection.
var errFlowControl = errors.New("adbsim: WRTE before the previous WRTE was acknowledged")

// errUnknownCommand is a message whose command the protocol does not define.
var errUnknownCommand = errors.New("adbsim: unknown message command")

// conn is one transport connection from an adb server.
type conn struct {
	d   *Daemon
	nc  net.Conn
	ctx context.Context
	// cancel ends the services of this connection when it goes away.
	cancel context.CancelFunc

	// version is the negotiated protocol version (versionMin until the
	// server's CNXN), maxSend the largest body the server accepts.
	version atomic.Uint32
	maxSend atomic.Int64

	wmu sync.Mutex // one message on the wire at a time

	// The read loop alone changes these.
	connected bool // a CNXN arrived
	online    bool // streams may be opened
	token     []byte

	mu      sync.Mutex
	streams map[uint32]*stream
	nextID  uint32
	dead    bool
	wg      sync.WaitGroup // services
}

func newConn(d *Daemon, nc net.Conn, parent context.Context) *conn {
	ctx, cancel := context.WithCancel(parent)
	c := &conn{d: d, nc: nc, ctx: ctx, cancel: cancel, streams: map[uint32]*stream{}}
	c.version.Store(versionMin)
	c.maxSend.Store(maxPayloadV1)
	return c
}

// serve reads messages until the connection breaks or the server breaks
// the protocol, then drops every stream.
func (c *conn) serve() {
	defer c.shutdown()
	r := bufio.NewReaderSize(c.nc, 64*1024)
	for {
		m, err := readMessage(r, maxPayload)
		if err != nil {
			return
		}
		if err := c.handle(m); err != nil {
			return
		}
	}
}

func (c *conn) handle(m message) error {
	switch m.command {
	case cmdCNXN:
		return c.handleConnect(m)
	case cmdAUTH:
		return c.handleAuth(m)
	case cmdSYNC:
		return nil // obsolete; never sent on the wire
	case cmdOPEN, cmdOKAY, cmdWRTE, cmdCLSE:
	default:
		return fmt.Errorf("%w: %s", errUnknownCommand, m)
	}
	if !c.online {
		return nil // nothing but CNXN and AUTH before the connection is up
	}
	switch m.command {
	case cmdOPEN: // OPEN(remote-id, 0, "destination")
		if m.arg0 == 0 || m.arg1 != 0 {
			return nil
		}
		c.open(m.arg0, string(trimNULs(m.data)))
	case cmdOKAY: // READY(remote-id, local-id)
		if m.arg0 == 0 || m.arg1 == 0 {
			return nil
		}
		s := c.stream(m.arg1)
		switch {
		case s == nil:
			// The stream is gone here; tell the other side to drop it.
			return c.send(message{command: cmdCLSE, arg0: m.arg1, arg1: m.arg0})
		case s.remote == m.arg0:
			s.ready()
		}
	case cmdWRTE: // WRITE(remote-id, local-id, data)
		if m.arg0 == 0 || m.arg1 == 0 {
			return nil
		}
		if s := c.stream(m.arg1); s != nil && s.remote == m.arg0 {
			return s.deliver(m.data)
		}
	case cmdCLSE: // CLOSE(remote-id or 0, local-id)
		if m.arg1 == 0 {
			return nil
		}
		if s := c.stream(m.arg1); s != nil && (m.arg0 == 0 || s.remote == m.arg0) {
			c.forget(s)
			s.peerClose()
		}
	}
	return nil
}

// handleConnect answers the server's CNXN: with our own CNXN, or with an
// AUTH token when the daemon requires authentication. A second CNXN
// restarts the session, dropping its streams, as adbd does.
func (c *conn) handleConnect(m message) error {
	if m.arg0 < versionMin || m.arg1 == 0 {
		return fmt.Errorf("adbsim: CNXN with version %#x, maxdata %d", m.arg0, m.arg1)
	}
	c.dropStreams()
	c.version.Store(min(m.arg0, versionSkipChecksum))
	c.maxSend.Store(int64(min(m.arg1, maxPayload)))
	c.connected = true
	if c.d.opts.RequireAuth && !c.online {
		c.token = make([]byte, 20)
		_, _ = rand.Read(c.token)
		return c.send(message{command: cmdAUTH, arg0: authToken, data: c.token})
	}
	return c.goOnline()
}

// handleAuth accepts any signature or public key: the daemon exercises
// the exchange without checking keys. An AUTH the server sends unasked is
// answered the same way.
func (c *conn) handleAuth(m message) error {
	if !c.connected {
		return nil
	}
	switch m.arg0 {
	case authSignature, authRSAPublicKey:
		return c.goOnline()
	}
	return fmt.Errorf("adbsim: AUTH of type %d sent to a device", m.arg0)
}

func (c *conn) goOnline() error {
	c.online = true
	return c.send(message{command: cmdCNXN, arg0: versionSkipChecksum, arg1: maxPayload, data: []byte(c.d.banner())})
}

// open starts the service named by dest on a new stream, or refuses it
// with CLSE(0, remote-id).
func (c *conn) open(remote uint32, dest string) {
	svc, kind := c.d.service(dest)
	if svc == nil {
		_ = c.send(message{command: cmdCLSE, arg0: 0, arg1: remote})
		return
	}
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	c.nextID++
	s := newStream(c, c.nextID, remote)
	c.streams[s.local] = s
	c.wg.Add(1)
	c.mu.Unlock()
	c.d.count(func(st *Stats) { st.Streams[kind]++ })
	if err := c.send(message{command: cmdOKAY, arg0: s.local, arg1: remote}); err != nil {
		c.wg.Done()
		return
	}
	go func() {
		defer c.wg.Done()
		defer s.Close()
		svc(c.ctx, s)
	}()
}

func (c *conn) stream(local uint32) *stream {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streams[local]
}

func (c *conn) forget(s *stream) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.streams[s.local] == s {
		delete(c.streams, s.local)
	}
}

// dropStreams ends every stream without a word, as when the connection
// restarts.
func (c *conn) dropStreams() {
	c.mu.Lock()
	all := c.streams
	c.streams = map[uint32]*stream{}
	c.mu.Unlock()
	for _, s := range all {
		s.peerClose()
	}
}

// send writes one message; a write error kills the connection.
func (c *conn) send(m message) error {
	b := m.encode(c.version.Load())
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if _, err := c.nc.Write(b); err != nil {
		_ = c.nc.Close()
		return err
	}
	return nil
}

// kill closes the socket; the read loop then shuts the connection down.
func (c *conn) kill() { _ = c.nc.Close() }

func (c *conn) shutdown() {
	_ = c.nc.Close()
	c.cancel()
	c.mu.Lock()
	c.dead = true
	c.mu.Unlock()
	c.dropStreams()
	c.wg.Wait()
}

func trimNULs(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	return b
}

// stream is one end of an adb stream: an io.ReadWriteCloser for a
// service. Flow control is adb's: a WRTE may go out only after the
// previous one was acknowledged with OKAY, and the daemon acknowledges a
// WRTE from the server once the service has read all of it, so a slow
// service holds the sender back without blocking other streams.
type stream struct {
	c             *conn
	local, remote uint32

	mu   sync.Mutex
	cond *sync.Cond
	// canSend: the last WRTE was acknowledged (OPEN counts as a READY).
	canSend bool
	// in is the unread rest of the server's last WRTE, pending until read.
	in      []byte
	pending bool
	// peerClosed: CLSE arrived or the connection died; closed: Close ran.
	peerClosed, closed bool
}

func newStream(c *conn, local, remote uint32) *stream {
	s := &stream{c: c, local: local, remote: remote, canSend: true}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// deliver takes a WRTE's body from the server.
func (s *stream) deliver(data []byte) error {
	s.mu.Lock()
	if s.pending {
		s.mu.Unlock()
		return errFlowControl
	}
	if s.closed || len(data) == 0 {
		s.mu.Unlock()
		return s.c.send(message{command: cmdOKAY, arg0: s.local, arg1: s.remote})
	}
	s.in, s.pending = data, true
	s.cond.Broadcast()
	s.mu.Unlock()
	return nil
}

func (s *stream) ready() {
	s.mu.Lock()
	s.canSend = true
	s.cond.Broadcast()
	s.mu.Unlock()
}

func (s *stream) peerClose() {
	s.mu.Lock()
	s.peerClosed = true
	s.cond.Broadcast()
	s.mu.Unlock()
}

// Read returns what the server wrote; io.EOF once it closed the stream.
func (s *stream) Read(p []byte) (int, error) {
	s.mu.Lock()
	for len(s.in) == 0 && !s.peerClosed {
		s.cond.Wait()
	}
	if len(s.in) == 0 {
		s.mu.Unlock()
		return 0, io.EOF
	}
	n := copy(p, s.in)
	s.in = s.in[n:]
	ack := len(s.in) == 0 && !s.peerClosed
	if len(s.in) == 0 {
		s.pending = false
	}
	s.mu.Unlock()
	if ack {
		if err := s.c.send(message{command: cmdOKAY, arg0: s.local, arg1: s.remote}); err != nil {
			return n, nil // the next call sees the stream closed
		}
	}
	return n, nil
}

// errStreamClosed is a write to a stream the server closed.
var errStreamClosed = errors.New("adbsim: stream closed")

// Write sends p in WRTE messages no longer than the server accepts, each
// after the previous one was acknowledged.
func (s *stream) Write(p []byte) (int, error) {
	total := 0
	for len(p) > 0 {
		s.mu.Lock()
		for !s.canSend && !s.peerClosed {
			s.cond.Wait()
		}
		if s.peerClosed {
			s.mu.Unlock()
			return total, errStreamClosed
		}
		s.canSend = false
		s.mu.Unlock()
		n := min(len(p), int(s.c.maxSend.Load()))
		if err := s.c.send(message{command: cmdWRTE, arg0: s.local, arg1: s.remote, data: p[:n]}); err != nil {
			return total, err
		}
		p, total = p[n:], total+n
	}
	return total, nil
}

// Close waits for the last WRTE to be acknowledged, so the server holds
// all the output, then sends CLSE (unless the server closed first).
func (s *stream) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for !s.canSend && !s.peerClosed {
		s.cond.Wait()
	}
	peerClosed := s.peerClosed
	s.peerClosed = true
	s.cond.Broadcast()
	s.mu.Unlock()
	s.c.forget(s)
	if peerClosed {
		return nil
	}
	return s.c.send(message{command: cmdCLSE, arg0: s.local, arg1: s.remote})
}
