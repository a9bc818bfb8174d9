package fleettest

import (
	"bytes"
	"net"
	"sync"
	"testing"
	"time"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/internal/adbsim"
	"phonefleet/internal/sim"
	"phonefleet/testutil"
	"phonefleet/workers"
)

// ADBPhone starts a sim phone behind a device-side adb daemon
// (internal/adbsim) and connects it to the adb server at server (from
// testutil.ADBServer), waiting until the server lists it as a device.
// The daemon closes when the test ends. serial is the phone's own
// ro.serialno; the adb serial is the daemon's Serial().
func ADBPhone(t testing.TB, server, serial string) *adbsim.Daemon {
	t.Helper()
	d := ADBDaemon(t, serial)
	testutil.ConnectADB(t, server, d.Serial())
	return d
}

// ADBDaemon starts a sim phone (ro.serialno serial) behind a device-side
// adb daemon, not connected to any adb server; it closes when the test
// ends.
func ADBDaemon(t testing.TB, serial string) *adbsim.Daemon {
	t.Helper()
	p, err := sim.New(sim.DefaultModel, serial)
	if err != nil {
		t.Fatal(err)
	}
	d, err := adbsim.Start(p, adbsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// RegisterADB registers the adb device serial in the organisation (as
// `phonefleet devices add --backend adb --serial SERIAL` does), waits
// for the read models, and returns its id; DeviceIDs gets it too.
func (e *Env) RegisterADB(t testing.TB, serial string) string {
	t.Helper()
	ids, err := e.Fleet.RegisterDevices().Handle(testutil.Context(t), fleet.RegisterDevices{OrgID: e.OrgID,
		Backend: domain.BackendADB, Serial: serial, Count: 1})
	if err != nil {
		t.Fatalf("register adb device %s: %v", serial, err)
	}
	if len(ids) != 1 {
		t.Fatalf("register adb device %s: got ids %v; want one new device", serial, ids)
	}
	e.DeviceIDs = append(e.DeviceIDs, ids[0])
	e.Settle(t)
	return ids[0]
}

// StartADBDiscovery runs adb device discovery (workers.ADBDiscovery) for
// the organisation against the fleet's adb server until the fleet
// stops, as the service does with SERVICE_ADB_DISCOVER: devices the
// server reports are registered, and recorded offline and online as they
// go and come.
func (e *Env) StartADBDiscovery(t testing.TB) {
	t.Helper()
	w := workers.ADBDiscovery{Client: e.ADB.Client(), OrgID: e.OrgID, Pool: e.Pool, Logger: Quiet,
		Register: e.App.Fleet.RegisterDevices, Record: e.App.Fleet.RecordDeviceConnection,
		Changed: func(deviceID string, _ bool) { e.ADB.Forget(deviceID) }, Retry: 100 * time.Millisecond, Poll: 200 * time.Millisecond}
	e.done.Add(1)
	go func() { defer e.done.Done(); w.Run(e.runCtx) }()
}

// DeviceStatus returns the device's status as the devices read model has
// it (online, asleep, offline), after the read models caught up.
func (e *Env) DeviceStatus(t testing.TB, deviceID string) string {
	t.Helper()
	e.Settle(t)
	var s string
	if err := e.Pool.QueryRow(testutil.Context(t), `SELECT status FROM public.devices WHERE device_id = $1`, deviceID).Scan(&s); err != nil {
		t.Fatalf("status of %s: %v", deviceID, err)
	}
	return s
}

// WaitDeviceStatus waits (up to a minute) until the device's status is
// want.
func (e *Env) WaitDeviceStatus(t testing.TB, deviceID, want string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		got := e.DeviceStatus(t, deviceID)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("device %s: status %s after a minute; want %s", deviceID, got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Link is a TCP relay between an adb server and a device-side daemon, so
// a test can make the phone hang mid-call (Hold: bytes toward the phone
// stop in the relay) and then drop it (Cut). The adb server is connected
// to the relay's address, which is then the device's adb serial, and the
// relay dials the daemon anew for every connection, so a daemon that was
// killed and restarted on its port is reached again.
type Link struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	gate  chan struct{} // closed while traffic flows
	stuck chan struct{} // closed once a byte toward the phone waits at the gate
	match []byte        // the chunk that starts the hold
	held  bool          // chunks toward the phone wait at the gate
	conns []net.Conn
	wg    sync.WaitGroup
}

// NewLink relays connections on a free loopback port to target (a
// daemon's address) until the test ends.
func NewLink(t testing.TB, target string) *Link {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &Link{ln: ln, target: target, gate: make(chan struct{}), stuck: make(chan struct{})}
	close(l.gate)
	l.wg.Add(1)
	go l.accept()
	t.Cleanup(func() { _ = ln.Close(); l.Cut(); l.wg.Wait() })
	return l
}

// Addr is the relay's address: the serial the adb server gives the
// device after `adb connect` to it.
func (l *Link) Addr() string { return l.ln.Addr().String() }

// Hold stops traffic toward the phone from the first chunk holding
// match on (nil: from now on): that chunk and what follows it wait in
// the relay, as if the phone had frozen just then. An adb packet's
// payload travels in one chunk, so match can be a shell command's text.
func (l *Link) Hold(match []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gate, l.stuck, l.match, l.held = make(chan struct{}), make(chan struct{}), match, match == nil
}

// Stuck is closed once something sent toward the phone waits at the
// held gate (Hold before it).
func (l *Link) Stuck() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stuck
}

// Release lets traffic flow again.
func (l *Link) Release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held, l.match = false, nil
	select {
	case <-l.gate:
	default:
		close(l.gate)
	}
}

// Cut drops every relayed connection abruptly, as a phone leaving the
// network does, and lets new connections flow.
func (l *Link) Cut() {
	l.mu.Lock()
	conns := l.conns
	l.conns = nil
	l.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
	l.Release()
}

func (l *Link) accept() {
	defer l.wg.Done()
	for {
		down, err := l.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", l.target)
		if err != nil {
			_ = down.Close()
			continue
		}
		l.mu.Lock()
		l.conns = append(l.conns, down, up)
		l.mu.Unlock()
		l.wg.Add(2)
		go func() { defer l.wg.Done(); l.pipe(up, down, true) }()
		go func() { defer l.wg.Done(); l.pipe(down, up, false) }()
	}
}

// pipe copies src to dst; toward the phone, each chunk waits at the gate.
func (l *Link) pipe(dst, src net.Conn, towardPhone bool) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && towardPhone {
			l.mu.Lock()
			gate, stuck := l.gate, l.stuck
			if !l.held && l.match != nil && bytes.Contains(buf[:n], l.match) {
				l.held = true
			}
			wait := l.held
			if wait {
				select {
				case <-gate:
				case <-stuck:
				default:
					close(stuck)
				}
			}
			l.mu.Unlock()
			if wait {
				<-gate
			}
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
