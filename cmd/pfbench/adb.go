package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"phonefleet/domain"
	"phonefleet/internal/adb"
	"phonefleet/internal/adbsim"
	"phonefleet/internal/backends"
	"phonefleet/internal/sim"
)

func init() {
	addSection("adb", 75, func(ctx context.Context, b *bench, o options) error { return b.adbLatency(ctx, o.cell) })
}

// adbTapX and adbTapY locate every measured tap: empty space on the sim's
// home screen, so the phone stays on the home screen throughout.
const adbTapX, adbTapY = 540, 1500

// adbLatency measures per-action latency through the adb backend beside
// the adb command line doing the same through the same adb server, on
// one sim phone served by a device-side daemon (internal/adbsim) that a
// private real adb server is connected to: a tap, a screenshot and the UI
// tree, one call at a time, interleaved call by call so all see the same
// conditions. The baseline is the `adb` command an operator would type
// (`adb shell input tap`, `adb exec-out screencap -p`, `adb shell
// uiautomator dump /dev/tty`): a process start, a connection to the
// server and a new device stream per call. The tap is measured twice
// through the backend: through its long-lived shell and with a shell:
// connection per command (ADBDevice.PerCommand). There is no target; the
// point is what the long-lived shell saves and what the backend adds.
func (b *bench) adbLatency(ctx context.Context, d time.Duration) error {
	header("adb backend vs the adb command line (one sim phone behind a private real adb server, one caller, interleaved)")
	bin, err := exec.LookPath("adb")
	if err != nil {
		line("skipped: adb is not on PATH (Debian/Ubuntu: apt-get install adb; macOS: brew install android-platform-tools)")
		return nil
	}

	// A private adb server on a free port, our child process, killed at
	// the end.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	_ = ln.Close()
	server := exec.Command(bin, "-P", port, "nodaemon", "server")
	if err := server.Start(); err != nil {
		return fmt.Errorf("start adb -P %s nodaemon server: %w", port, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- server.Wait() }()
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = exec.CommandContext(cctx, bin, "-P", port, "kill-server").Run()
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = server.Process.Kill()
			<-exited
		}
	}()
	client := adb.New("127.0.0.1:" + port)
	version := 0
	for wait := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if version, err = client.Version(ctx); err == nil {
			break
		}
		select {
		case err := <-exited:
			return fmt.Errorf("adb -P %s nodaemon server exited: %v", port, err)
		default:
		}
		if time.Now().After(wait) || ctx.Err() != nil {
			return fmt.Errorf("the adb server on port %s never answered: %w", port, err)
		}
	}

	// One sim phone behind a device-side daemon, connected to the server.
	phone, err := sim.New(sim.DefaultModel, "BENCH-ADB")
	if err != nil {
		return err
	}
	daemon, err := adbsim.Start(phone, adbsim.Options{})
	if err != nil {
		return err
	}
	defer daemon.Close()
	serial := daemon.Serial()
	cli := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, bin, append([]string{"-P", port, "-s", serial}, args...)...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("adb %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(errOut.Bytes()))
		}
		return out.Bytes(), nil
	}
	if err := adbConnect(ctx, bin, port, serial); err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = client.Disconnect(cctx, serial)
	}()

	// The backend: one adapter keeping its shell, one opening a shell:
	// connection per command, both on the same device.
	host := backends.NewADBHost(client, nil)
	defer host.Close()
	kept, err := host.Device(ctx, &domain.Device{ID: "dev_bench_adb_kept", Backend: domain.BackendADB, Serial: serial})
	if err != nil {
		return err
	}
	perCmd, err := host.Device(ctx, &domain.Device{ID: "dev_bench_adb_percommand", Backend: domain.BackendADB, Serial: serial})
	if err != nil {
		return err
	}
	perCmd.PerCommand = true
	caps := kept.Capabilities()
	first, err := kept.Observe(ctx, domain.ObserveOptions{Image: true})
	if err != nil {
		return err
	}
	line("adb %s (server protocol %d) on 127.0.0.1:%s; device %s: adbsim over a sim %s (%d×%d, Android API %d), "+
		"home screen, screencap PNG %.0f KB", adbVersionLine(bin), version, port, serial, sim.DefaultModel, caps.Width, caps.Height,
		kept.SDK(), float64(len(first.Image))/1024)

	tap := domain.Action{Type: domain.ActionTap, X: adbTapX, Y: adbTapY}
	tapX, tapY := strconv.Itoa(adbTapX), strconv.Itoa(adbTapY)
	act := func(dev *backends.ADBDevice) func() error {
		return func() error { _, err := dev.Act(ctx, tap); return err }
	}
	observe := func(opts domain.ObserveOptions, check func(domain.Observation) error) func() error {
		return func() error {
			obs, err := kept.Observe(ctx, opts)
			if err != nil {
				return err
			}
			return check(obs)
		}
	}
	type variant struct {
		name string
		call func() error
		took []time.Duration
	}
	type group struct {
		name, note string
		raw        func() error // the adb command line, the baseline
		ours       []*variant
		rawT       []time.Duration
	}
	groups := []*group{
		{name: "tap", note: "adb shell input tap X Y",
			raw: func() error { _, err := cli("shell", "input", "tap", tapX, tapY); return err },
			ours: []*variant{
				{name: "tap, long-lived shell", call: act(kept)},
				{name: "tap, shell per command", call: act(perCmd)},
			}},
		{name: "screenshot", note: "adb exec-out screencap -p",
			raw: func() error {
				out, err := cli("exec-out", "screencap", "-p")
				if err == nil && !bytes.HasPrefix(out, []byte("\x89PNG\r\n\x1a\n")) {
					err = fmt.Errorf("adb exec-out screencap -p: no PNG (%d bytes)", len(out))
				}
				return err
			},
			ours: []*variant{{name: "screenshot (Observe, PNG)", call: observe(domain.ObserveOptions{Image: true}, func(o domain.Observation) error {
				if len(o.Image) == 0 || o.Width != caps.Width {
					return fmt.Errorf("screenshot: %d bytes, %d px wide", len(o.Image), o.Width)
				}
				return nil
			})}}},
		{name: "UI tree", note: "adb shell uiautomator dump /dev/tty; ours: screencap, dump, screencap (one screen)",
			raw: func() error {
				out, err := cli("shell", "uiautomator", "dump", "/dev/tty")
				if err == nil && !bytes.Contains(out, []byte("</hierarchy>")) {
					err = fmt.Errorf("adb shell uiautomator dump: no hierarchy (%d bytes)", len(out))
				}
				return err
			},
			ours: []*variant{{name: "UI tree (Observe, snapshot)", call: observe(domain.ObserveOptions{Snapshot: true}, func(o domain.Observation) error {
				if len(o.Snapshot) < 100 {
					return fmt.Errorf("UI snapshot: %d bytes", len(o.Snapshot))
				}
				return nil
			})}}},
	}

	line("%-28s %9s %9s %9s %9s %7s %7s  %s", "action", "adb p50", "adb p99", "ours p50", "ours p99", "p50 ×", "p99 ×",
		"baseline: the adb command line, same server")
	rd := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
	for _, g := range groups {
		// Warm up (the first calls open the kept shell and fill caches),
		// then measure for d; at least 20 rounds however slow.
		warm := time.Now().Add(500 * time.Millisecond)
		end := warm.Add(d)
		for n := 0; time.Now().Before(end) || len(g.rawT) < 20; n++ {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			measuring := time.Now().After(warm)
			t0 := time.Now()
			if err := g.raw(); err != nil {
				return err
			}
			if measuring {
				g.rawT = append(g.rawT, time.Since(t0))
			}
			// Alternate which of ours goes first, so none always follows
			// the command line's process start.
			for i := range g.ours {
				v := g.ours[(i+n)%len(g.ours)]
				t0 := time.Now()
				if err := v.call(); err != nil {
					return fmt.Errorf("%s: %w", v.name, err)
				}
				if measuring {
					v.took = append(v.took, time.Since(t0))
				}
			}
		}
		r50, r99 := percentile(g.rawT, 0.50), percentile(g.rawT, 0.99)
		for _, v := range g.ours {
			o50, o99 := percentile(v.took, 0.50), percentile(v.took, 0.99)
			line("%-28s %9s %9s %9s %9s %6.2f× %6.2f×  %s (%d calls each)", v.name, rd(r50), rd(r99), rd(o50), rd(o99),
				float64(o50)/float64(r50), float64(o99)/float64(r99), g.note, len(v.took))
		}
	}
	k, p := groups[0].ours[0], groups[0].ours[1]
	k50, p50 := percentile(k.took, 0.50), percentile(p.took, 0.50)
	line("long-lived shell: a tap p50 %s against %s with a shell per command (%.2f×), %s against the adb command line",
		rd(k50), rd(p50), float64(k50)/float64(p50), rd(percentile(groups[0].rawT, 0.50)))
	if r := daemon.Refusals(); len(r) > 0 {
		line("note: the sim phone refused %d inputs, first: %s", len(r), r[0])
	}
	return nil
}

// adbConnect runs `adb connect` for the daemon at addr and waits until
// `adb devices` lists it as device.
func adbConnect(ctx context.Context, bin, port, addr string) error {
	var last string
	for wait := time.Now().Add(30 * time.Second); time.Now().Before(wait); time.Sleep(100 * time.Millisecond) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		out, err := exec.CommandContext(ctx, bin, "-P", port, "connect", addr).CombinedOutput()
		last = strings.TrimSpace(string(out))
		if err != nil || !strings.Contains(last, "connected to") {
			continue
		}
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			out, err := exec.CommandContext(ctx, bin, "-P", port, "devices").Output()
			if err != nil {
				return fmt.Errorf("adb -P %s devices: %w", port, err)
			}
			state := ""
			for _, l := range strings.Split(string(out), "\n") {
				if f := strings.Fields(l); len(f) >= 2 && f[0] == addr {
					state = f[1]
				}
			}
			if state == "device" {
				return nil
			}
			last = "state " + strconv.Quote(state)
		}
	}
	return errors.New("adb connect " + addr + ": never listed as device (last: " + last + ")")
}

// adbVersionLine returns the adb command's "Version …" line.
func adbVersionLine(bin string) string {
	out, _ := exec.Command(bin, "version").Output()
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(l, "Version "); ok {
			return strings.TrimSpace(v)
		}
	}
	return "of unknown version"
}
