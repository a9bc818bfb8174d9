package gatewayhub_test

import (
	"encoding/json"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/testutil"
)

// blackhole is a TCP proxy that can stop forwarding without closing
// anything: from Freeze on, what either side sends is read and dropped, and
// both connections stay open — a half-open path, as a dead NAT or a cut
// cable leaves it.
type blackhole struct {
	ln     net.Listener
	target string
	frozen atomic.Bool

	mu    sync.Mutex
	conns []net.Conn
}

func newBlackhole(t *testing.T, target string) *blackhole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{ln: ln, target: target}
	go b.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, c := range b.conns {
			_ = c.Close()
		}
	})
	return b
}

// URL is the proxy's address as an http URL.
func (b *blackhole) URL() string { return "http://" + b.ln.Addr().String() }

// Freeze stops forwarding in both directions; nothing is closed.
func (b *blackhole) Freeze() { b.frozen.Store(true) }

func (b *blackhole) accept() {
	for {
		in, err := b.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", b.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		b.mu.Lock()
		b.conns = append(b.conns, in, out)
		b.mu.Unlock()
		go b.pipe(out, in)
		go b.pipe(in, out)
	}
}

func (b *blackhole) pipe(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !b.frozen.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// A gateway tunnel whose path stops carrying anything, without either end
// closing it, is evicted by the default heartbeats within a few seconds:
// the instance drops the tunnel and the gateway's claim, the gateway's own
// end gives up too, and the gateway reconnecting to another instance is
// served there at once, its device driven through it. Before heartbeats
// were tightened (10 s pings, 5 s timeout, two misses) this took ~25 s.
func TestHubEvictsAHalfOpenTunnelWithinSeconds(t *testing.T) {
	// The bound for the default heartbeats (2 s interval, 3 misses: at
	// most ~8 s) with room for the hub's claim check and a loaded machine.
	const bound = 14 * time.Second
	e := newHubEnv(t)
	a, b := e.instance(t, instanceOptions{}), e.instance(t, instanceOptions{})
	key := domain.GatewayHostKey(e.gatewayID)
	proxy := newBlackhole(t, a.url[len("http://"):])
	g := newFakeGateway(t, "sim-1")
	peer, ids := g.mustConnect(t, proxy.URL(), e.credential)
	dev := ids["sim-1"]
	if !a.hub.Holds(key) {
		t.Fatal("the first instance does not serve the gateway")
	}

	proxy.Freeze()
	frozenAt := time.Now()
	for a.hub.Holds(key) {
		if time.Since(frozenAt) > bound {
			t.Fatalf("the first instance still serves the half-open tunnel %v after it stopped carrying anything; want it evicted within %v",
				time.Since(frozenAt).Round(time.Second), bound)
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case <-peer.Done():
	case <-time.After(bound - time.Since(frozenAt)):
		t.Fatalf("the gateway's end of the half-open tunnel is still open after %v", bound)
	}
	evicted := time.Since(frozenAt)
	t.Logf("half-open tunnel evicted after %v", evicted.Round(100*time.Millisecond))

	// The gateway reconnects, to the other instance: it is served there
	// at once (the claim is free), and its device acts.
	if _, w, err := g.connect(t, b.url, e.credential); err != nil || len(w.Devices) != 1 || w.Devices[0].DeviceID != dev {
		t.Fatalf("reconnecting to the second instance: %+v (%v); want the device %s served", w, err, dev)
	}
	if !b.hub.Holds(key) || a.hub.Holds(key) {
		t.Fatalf("after the reconnect: first holds %v, second %v; want only the second", a.hub.Holds(key), b.hub.Holds(key))
	}
	eventually(t, "the device is online again", func() bool { return e.status(t, dev) == domain.DeviceOnline })
	leaseID := e.lease(t, b, dev)
	out, err := b.fl.PerformAction().Handle(testutil.Context(t), fleet.PerformAction{Auth: e.operator, DeviceID: dev,
		LeaseID: leaseID, Action: "key", Arguments: json.RawMessage(`{"key":"HOME"}`), IdempotencyKey: "after-eviction"})
	if err != nil || out.Receipt.State != domain.ReceiptCommitted {
		t.Fatalf("acting through the second instance: %+v (%v); want committed", out.Receipt, err)
	}
}
