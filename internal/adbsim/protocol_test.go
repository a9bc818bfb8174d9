package adbsim

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"phonefleet/internal/sim"
)

func TestMessageEncoding(t *testing.T) {
	m := message{command: cmdWRTE, arg0: 7, arg1: 9, data: []byte("hello")}
	t.Run("old peers get a checksum, new ones zero", func(t *testing.T) {
		old := m.encode(versionMin)
		if got, want := binary.LittleEndian.Uint32(old[16:]), checksum([]byte("hello")); got != want || want != 532 {
			t.Fatalf("checksum = %d; want %d (532, the byte sum)", got, want)
		}
		if got := binary.LittleEndian.Uint32(m.encode(versionSkipChecksum)[16:]); got != 0 {
			t.Fatalf("checksum for a new peer = %d; want 0", got)
		}
		if got := binary.LittleEndian.Uint32(old[20:]); got != cmdWRTE^0xffffffff {
			t.Fatalf("magic = %#x; want the command's complement", got)
		}
	})
	t.Run("round trip", func(t *testing.T) {
		for _, v := range []uint32{versionMin, versionSkipChecksum} {
			got, err := readMessage(bytes.NewReader(m.encode(v)), maxPayload)
			if err != nil || got.command != m.command || got.arg0 != 7 || got.arg1 != 9 || string(got.data) != "hello" {
				t.Fatalf("version %#x: got %v, %v; want %v", v, got, err, m)
			}
		}
	})
	corrupt := func(off int, v uint32) []byte {
		b := m.encode(versionMin)
		binary.LittleEndian.PutUint32(b[off:], v)
		return b
	}
	for _, c := range []struct {
		name string
		wire []byte
		want error
	}{
		{"bad magic", corrupt(20, 0x12345678), errBadMagic},
		{"bad checksum", corrupt(16, 533), errBadChecksum},
		{"body longer than announced", corrupt(12, maxPayload+1), errTooLong},
		{"truncated body", m.encode(versionMin)[:headerSize+2], io.ErrUnexpectedEOF},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := readMessage(bytes.NewReader(c.wire), maxPayload); !errors.Is(err, c.want) {
				t.Fatalf("err = %v; want %v", err, c.want)
			}
		})
	}
}

// host is a hand-driven adb server end for protocol tests.
type host struct {
	t  *testing.T
	nc net.Conn
	r  *bufio.Reader
}

func dialHost(t *testing.T, opts Options) (*host, *Daemon) {
	t.Helper()
	p, err := sim.New(sim.DefaultModel, "SIM-PROTO")
	if err != nil {
		t.Fatal(err)
	}
	d, err := Start(p, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	nc, err := net.Dial("tcp", d.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	// A safety net against a hung test, not a timing assertion.
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	return &host{t: t, nc: nc, r: bufio.NewReader(nc)}, d
}

func (h *host) send(m message) {
	h.t.Helper()
	if _, err := h.nc.Write(m.encode(versionMin)); err != nil {
		h.t.Fatalf("send %v: %v", m, err)
	}
}

func (h *host) recv() message {
	h.t.Helper()
	m, err := readMessage(h.r, maxPayload)
	if err != nil {
		h.t.Fatalf("recv: %v", err)
	}
	return m
}

func (h *host) expect(command, arg0, arg1 uint32) message {
	h.t.Helper()
	m := h.recv()
	if m.command != command || (arg0 != 0 && m.arg0 != arg0) || m.arg1 != arg1 {
		h.t.Fatalf("got %v; want %s(%d, %d)", m, commandName(command), arg0, arg1)
	}
	return m
}

// connect does the CNXN exchange announcing maxdata.
func (h *host) connect(maxdata uint32) message {
	h.t.Helper()
	h.send(message{command: cmdCNXN, arg0: versionSkipChecksum, arg1: maxdata, data: []byte("host::features=shell_v2,cmd")})
	return h.expect(cmdCNXN, versionSkipChecksum, maxPayload)
}

// closed reports whether the daemon closed the connection.
func (h *host) closed() bool {
	_, err := h.r.ReadByte()
	return err != nil
}

// run opens dest as stream local and collects its output until CLSE,
// acknowledging every WRTE.
func (h *host) run(local uint32, dest string) string {
	h.t.Helper()
	h.send(message{command: cmdOPEN, arg0: local, data: []byte(dest + "\x00")})
	remote := h.expect(cmdOKAY, 0, local).arg0
	var out strings.Builder
	for {
		m := h.recv()
		switch {
		case m.command == cmdWRTE && m.arg1 == local:
			out.Write(m.data)
			h.send(message{command: cmdOKAY, arg0: local, arg1: remote})
		case m.command == cmdCLSE && m.arg1 == local:
			return out.String()
		default:
			h.t.Fatalf("unexpected %v while running %s", m, dest)
		}
	}
}

func TestHandshake(t *testing.T) {
	t.Run("CNXN is answered with CNXN and the banner", func(t *testing.T) {
		h, _ := dialHost(t, Options{})
		m := h.connect(maxPayload)
		if b := string(m.data); !strings.HasPrefix(b, "device::ro.product.name=pixel7;ro.product.model=Pixel 7;") ||
			!strings.HasSuffix(b, "features=shell_v2,cmd") {
			t.Fatalf("banner = %q", b)
		}
	})
	t.Run("messages before CNXN are ignored", func(t *testing.T) {
		h, _ := dialHost(t, Options{})
		h.send(message{command: cmdOPEN, arg0: 1, data: []byte("shell:echo x\x00")})
		h.connect(maxPayload) // the first answer is the CNXN, not the OPEN's
	})
	t.Run("AUTH when required, then CNXN for any signature", func(t *testing.T) {
		h, _ := dialHost(t, Options{RequireAuth: true})
		h.send(message{command: cmdCNXN, arg0: versionSkipChecksum, arg1: maxPayload, data: []byte("host::")})
		tok := h.expect(cmdAUTH, authToken, 0)
		if len(tok.data) != 20 {
			t.Fatalf("token of %d bytes; want 20", len(tok.data))
		}
		h.send(message{command: cmdAUTH, arg0: authSignature, data: []byte("any signature")})
		h.expect(cmdCNXN, versionSkipChecksum, maxPayload)
		if got := h.run(1, "shell:echo ok"); got != "ok\n" {
			t.Fatalf("after AUTH: %q", got)
		}
	})
}

func TestStreams(t *testing.T) {
	t.Run("exec runs a command and closes", func(t *testing.T) {
		h, _ := dialHost(t, Options{})
		h.connect(maxPayload)
		if got := h.run(1, "exec:echo hi && wm size"); got != "hi\nPhysical size: 1080x2400\n" {
			t.Fatalf("exec output %q", got)
		}
	})
	t.Run("an unknown service is refused with CLSE(0, id)", func(t *testing.T) {
		h, _ := dialHost(t, Options{})
		h.connect(maxPayload)
		h.send(message{command: cmdOPEN, arg0: 5, data: []byte("sync:\x00")})
		h.expect(cmdCLSE, 0, 5)
	})
	t.Run("no second WRTE before the first is acknowledged", func(t *testing.T) {
		h, d := dialHost(t, Options{})
		h.connect(4096) // the PNG needs many 4 KiB messages
		h.send(message{command: cmdOPEN, arg0: 1, data: []byte("exec:screencap -p\x00")})
		remote := h.expect(cmdOKAY, 0, 1).arg0
		first := h.expect(cmdWRTE, remote, 1)
		if len(first.data) != 4096 {
			t.Fatalf("first WRTE of %d bytes; want the 4096 the host accepts", len(first.data))
		}
		// Without an OKAY the daemon must hold stream 1 back: the next
		// messages are all the second stream's.
		if got := h.run(2, "exec:echo other"); got != "other\n" {
			t.Fatalf("second stream: %q", got)
		}
		png := first.data
		h.send(message{command: cmdOKAY, arg0: 1, arg1: remote})
		for {
			m := h.recv()
			if m.command == cmdCLSE {
				break
			}
			if m.command != cmdWRTE {
				t.Fatalf("got %v", m)
			}
			png = append(png, m.data...)
			h.send(message{command: cmdOKAY, arg0: 1, arg1: remote})
		}
		want, _ := d.Phone().Screenshot()
		if !bytes.Equal(png, want) {
			t.Fatalf("reassembled %d bytes; want the %d-byte screenshot", len(png), len(want))
		}
	})
	t.Run("a WRTE is acknowledged once the service read it", func(t *testing.T) {
		h, d := dialHost(t, Options{})
		h.connect(maxPayload)
		apk, _ := sim.CatalogAPK(sim.PkgCounter)
		h.send(message{command: cmdOPEN, arg0: 1, data: []byte("exec:cmd package 'install' -S " + itoa(len(apk)) + "\x00")})
		remote := h.expect(cmdOKAY, 0, 1).arg0
		half := len(apk) / 2
		h.send(message{command: cmdWRTE, arg0: 1, arg1: remote, data: apk[:half]})
		h.expect(cmdOKAY, remote, 1)
		h.send(message{command: cmdWRTE, arg0: 1, arg1: remote, data: apk[half:]})
		h.expect(cmdOKAY, remote, 1)
		if m := h.expect(cmdWRTE, remote, 1); string(m.data) != "Success\n" {
			t.Fatalf("install answered %q", m.data)
		}
		h.send(message{command: cmdOKAY, arg0: 1, arg1: remote})
		h.expect(cmdCLSE, remote, 1)
		if !installed(d.Phone(), sim.PkgCounter) {
			t.Fatalf("counter not installed")
		}
	})
	t.Run("a WRTE before the OKAY closes the connection", func(t *testing.T) {
		h, _ := dialHost(t, Options{})
		h.connect(maxPayload)
		h.send(message{command: cmdOPEN, arg0: 1, data: []byte("exec:sleep 10\x00")}) // never reads
		remote := h.expect(cmdOKAY, 0, 1).arg0
		h.send(message{command: cmdWRTE, arg0: 1, arg1: remote, data: []byte("a")})
		h.send(message{command: cmdWRTE, arg0: 1, arg1: remote, data: []byte("b")})
		if !h.closed() {
			t.Fatalf("the connection survived a flow-control violation")
		}
	})
	t.Run("a bad message closes the connection", func(t *testing.T) {
		h, _ := dialHost(t, Options{})
		h.connect(maxPayload)
		b := message{command: cmdOKAY, arg0: 1, arg1: 1}.encode(versionMin)
		b[20] ^= 0xff // break the magic
		if _, err := h.nc.Write(b); err != nil {
			t.Fatal(err)
		}
		if !h.closed() {
			t.Fatalf("the connection survived a bad magic")
		}
	})
	t.Run("an unknown command closes the connection", func(t *testing.T) {
		h, _ := dialHost(t, Options{})
		h.connect(maxPayload)
		h.send(message{command: 0x4b4b4b4b})
		if !h.closed() {
			t.Fatalf("the connection survived an unknown command")
		}
	})
	t.Run("shell_v2 frames stdout, stderr and the exit status", func(t *testing.T) {
		h, _ := dialHost(t, Options{})
		h.connect(maxPayload)
		out := []byte(h.run(1, "shell,v2,raw:echo hi; nope; exit 3"))
		var packets []string
		for len(out) >= 5 {
			n := int(binary.LittleEndian.Uint32(out[1:]))
			packets = append(packets, string(rune('0'+out[0]))+":"+string(out[5:5+n]))
			out = out[5+n:]
		}
		want := []string{"1:hi\n", "2:/system/bin/sh: nope: inaccessible or not found\n", "3:\x03"}
		if strings.Join(packets, "|") != strings.Join(want, "|") {
			t.Fatalf("packets %q; want %q", packets, want)
		}
	})
	t.Run("kill drops the connection without CLSE", func(t *testing.T) {
		h, d := dialHost(t, Options{})
		h.connect(maxPayload)
		h.send(message{command: cmdOPEN, arg0: 1, data: []byte("shell:\x00")})
		h.expect(cmdOKAY, 0, 1)
		h.expect(cmdWRTE, 0, 1) // the prompt
		d.Kill()
		if !h.closed() {
			t.Fatalf("connection open after Kill")
		}
		if _, err := net.Dial("tcp", d.Addr()); err == nil {
			t.Fatalf("still listening after Kill")
		}
	})
}

func installed(p *sim.Phone, pkg string) bool {
	for _, a := range p.InstalledApps() {
		if a.Package == pkg {
			return true
		}
	}
	return false
}

func itoa(n int) string { return strconv.Itoa(n) }
