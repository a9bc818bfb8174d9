package adbsim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"

	"phonefleet/internal/sim"
)

// Options configure a Daemon.
type Options struct {
	// Addr is the TCP address to listen on; empty means 127.0.0.1 on a
	// free port.
	Addr string
	// RequireAuth makes the daemon answer the server's CNXN with an AUTH
	// token, as a phone does, before it connects. Any signature or public
	// key is accepted: the point is to exercise the exchange, not to
	// check keys.
	RequireAuth bool
}

// Daemon is one adb-reachable device: a listener speaking the adb
// transport protocol in front of one sim phone. Its methods are safe for
// concurrent use.
type Daemon struct {
	phone *sim.Phone
	opts  Options

	mu       sync.Mutex
	addr     string // fixed after the first listen, so Restart reuses the port
	ln       net.Listener
	conns    map[*conn]struct{}
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	closed   bool
	refusals []string
	stats    Stats

	fsMu  sync.Mutex
	files map[string][]byte
}

// Stats counts what the daemon has served since it started.
type Stats struct {
	// Connections is the number of transport connections accepted.
	Connections int
	// Streams counts opened streams by service: "shell" (v1),
	// "shell,v2", "exec".
	Streams map[string]int
	// Commands is the number of simple commands the shell has run.
	Commands int
}

// Start listens for the adb server in front of phone. Close (or Kill)
// stops it.
func Start(phone *sim.Phone, opts Options) (*Daemon, error) {
	if phone == nil {
		return nil, errors.New("adbsim: nil phone")
	}
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	d := &Daemon{phone: phone, opts: opts, addr: addr, files: map[string][]byte{},
		stats: Stats{Streams: map[string]int{}}}
	if err := d.listen(); err != nil {
		return nil, err
	}
	return d, nil
}

func (d *Daemon) listen() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errors.New("adbsim: daemon closed")
	}
	if d.ln != nil {
		return errors.New("adbsim: already listening")
	}
	ln, err := net.Listen("tcp", d.addr)
	if err != nil {
		return fmt.Errorf("adbsim: listen on %s: %w", d.addr, err)
	}
	d.ln, d.addr = ln, ln.Addr().String()
	d.conns = map[*conn]struct{}{}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	d.wg.Add(1)
	go d.accept(ln, d.ctx)
	return nil
}

func (d *Daemon) accept(ln net.Listener, ctx context.Context) {
	defer d.wg.Done()
	for {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		d.mu.Lock()
		if d.ln != ln {
			d.mu.Unlock()
			_ = nc.Close()
			return
		}
		c := newConn(d, nc, ctx)
		d.conns[c] = struct{}{}
		d.stats.Connections++
		d.wg.Add(1)
		d.mu.Unlock()
		go func() {
			defer d.wg.Done()
			c.serve()
			d.mu.Lock()
			delete(d.conns, c)
			d.mu.Unlock()
		}()
	}
}

// Addr returns the address the daemon listens on (host:port).
func (d *Daemon) Addr() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.addr
}

// Serial returns the name the adb server gives the device after
// `adb connect`: the address, 127.0.0.1:PORT.
func (d *Daemon) Serial() string { return d.Addr() }

// Phone returns the sim phone behind the daemon.
func (d *Daemon) Phone() *sim.Phone { return d.phone }

// Kill drops every connection abruptly (no CLSE, no goodbye), stops
// listening and waits for the daemon's goroutines to end, like a phone
// that leaves the network. The phone keeps its state; Restart brings the
// daemon back on the same port.
func (d *Daemon) Kill() {
	d.mu.Lock()
	ln, cancel := d.ln, d.cancel
	d.ln = nil
	conns := make([]*conn, 0, len(d.conns))
	for c := range d.conns {
		conns = append(conns, c)
	}
	d.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	if cancel != nil {
		cancel()
	}
	for _, c := range conns {
		c.kill()
	}
	d.wg.Wait()
}

// Restart listens again on the port of the first start, after Kill.
func (d *Daemon) Restart() error { return d.listen() }

// Close kills the daemon for good.
func (d *Daemon) Close() error {
	d.Kill()
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	return nil
}

// Refusals lists, oldest first, the inputs the sim phone refused while the
// device answered as a real one would (silently): "tap 5000 10: sim:
// coordinates outside the screen: …".
func (d *Daemon) Refusals() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.refusals)
}

// Stats returns counters of what the daemon has served.
func (d *Daemon) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.stats
	s.Streams = map[string]int{}
	for k, v := range d.stats.Streams {
		s.Streams[k] = v
	}
	return s
}

func (d *Daemon) refused(what string, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.refusals = append(d.refusals, what+": "+err.Error())
}

func (d *Daemon) count(f func(s *Stats)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f(&d.stats)
}

// banner is the CNXN identity: "device::" and the properties the adb
// server shows in `adb devices -l`, then the features. Only features the
// daemon implements are announced: shell_v2 (the shell protocol) and cmd
// (so `adb install` streams through exec:cmd package install -S).
func (d *Daemon) banner() string {
	p := d.props()
	return "device::ro.product.name=" + p["ro.product.name"] + ";ro.product.model=" + p["ro.product.model"] +
		";ro.product.device=" + p["ro.product.device"] + ";features=shell_v2,cmd"
}

// props are the device's system properties (getprop).
func (d *Daemon) props() map[string]string {
	m := d.phone.Model()
	name := strings.ToLower(m.Name)
	sdk := sim.APILevel(m.AndroidVersion)
	return map[string]string{
		"ro.product.model":                m.DisplayName,
		"ro.product.manufacturer":         m.Manufacturer,
		"ro.product.brand":                strings.ToLower(m.Manufacturer),
		"ro.product.name":                 name,
		"ro.product.device":               name,
		"ro.product.cpu.abi":              sim.ABIs()[0],
		"ro.product.cpu.abilist":          strings.Join(sim.ABIs(), ","),
		"ro.build.version.release":        m.AndroidVersion,
		"ro.build.version.sdk":            strconv.Itoa(sdk),
		"ro.build.type":                   "user",
		"ro.build.tags":                   "release-keys",
		"ro.build.fingerprint":            strings.ToLower(m.Manufacturer) + "/" + name + "/" + name + ":" + m.AndroidVersion + "/SIM1/1:user/release-keys",
		"ro.serialno":                     d.phone.Serial(),
		"ro.boot.serialno":                d.phone.Serial(),
		"ro.sf.lcd_density":               strconv.Itoa(m.DPI),
		"ro.debuggable":                   "0",
		"ro.secure":                       "1",
		"sys.boot_completed":              "1",
		"dev.bootcomplete":                "1",
		"persist.sys.timezone":            "UTC",
		"ro.product.locale":               "en-US",
		"service.adb.tcp.port":            "5555",
		"ro.build.version.codename":       "REL",
		"ro.build.display.id":             "SIM1",
		"ro.hardware":                     name,
		"ro.boot.hardware":                name,
		"init.svc.adbd":                   "running",
		"ro.adb.secure":                   "1",
		"ro.build.version.security_patch": "2025-01-05",
	}
}

// readFile and writeFile are the device's small file system
// (/sdcard/window_dump.xml, APKs for pm install, redirections).
func (d *Daemon) readFile(path string) ([]byte, bool) {
	d.fsMu.Lock()
	defer d.fsMu.Unlock()
	b, ok := d.files[path]
	return slices.Clone(b), ok
}

func (d *Daemon) writeFile(path string, data []byte, appendTo bool) {
	d.fsMu.Lock()
	defer d.fsMu.Unlock()
	if appendTo {
		d.files[path] = append(d.files[path], data...)
		return
	}
	d.files[path] = slices.Clone(data)
}

func (d *Daemon) removeFile(path string) bool {
	d.fsMu.Lock()
	defer d.fsMu.Unlock()
	_, ok := d.files[path]
	delete(d.files, path)
	return ok
}

func (d *Daemon) listFiles(dir string) []string {
	d.fsMu.Lock()
	defer d.fsMu.Unlock()
	dir = strings.TrimSuffix(dir, "/") + "/"
	var out []string
	for p := range d.files {
		if rest, ok := strings.CutPrefix(p, dir); ok && !strings.Contains(rest, "/") {
			out = append(out, rest)
		}
	}
	slices.Sort(out)
	return out
}
