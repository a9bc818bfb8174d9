package adb

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseDevices(t *testing.T) {
	got := ParseDevices("emulator-5554          device product:sdk_gphone64 model:sdk_gphone64_x86_64 device:emu64x transport_id:1\n" +
		"127.0.0.1:40001 offline\n\n")
	if len(got) != 2 {
		t.Fatalf("got %d devices; want 2", len(got))
	}
	if d := got[0]; d.Serial != "emulator-5554" || !d.Online() || d.Model != "sdk_gphone64_x86_64" || d.Device != "emu64x" {
		t.Errorf("first: got %+v", d)
	}
	if d := got[1]; d.Serial != "127.0.0.1:40001" || d.Online() {
		t.Errorf("second: got %+v", d)
	}
}

// TestServerNotRunning: nothing listening at the address is an error
// naming SERVICE_ADB_ADDR and the address.
func TestServerNotRunning(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := New(addr)
	for name, call := range map[string]func() error{
		"version": func() error { _, err := c.Version(context.Background()); return err },
		"exec":    func() error { _, err := c.Exec(context.Background(), "x", "true", nil); return err },
		"session": func() error { _, err := c.NewSession("x").Run(context.Background(), "true"); return err },
	} {
		err := call()
		if !errors.Is(err, ErrServerUnavailable) || !strings.Contains(err.Error(), AddrSetting) || !strings.Contains(err.Error(), addr) {
			t.Errorf("%s: got %v; want ErrServerUnavailable naming %s and %s", name, err, AddrSetting, addr)
		}
	}
}

// TestRealServer speaks to the real adb server (started on a free port
// for the test and killed after): version, the device list, tracking,
// and a serial it does not have.
func TestRealServer(t *testing.T) {
	c := StartServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	v, err := c.Version(ctx)
	if err != nil || v < 30 {
		t.Fatalf("version: got %d, %v", v, err)
	}
	if _, err := c.Devices(ctx); err != nil {
		t.Fatalf("devices: %v", err)
	}
	got := make(chan []DeviceInfo, 1)
	tctx, tcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- c.TrackDevices(tctx, func(l []DeviceInfo) {
			select {
			case got <- l:
			default:
			}
		})
	}()
	select {
	case <-got:
	case <-ctx.Done():
		t.Fatal("track-devices sent no list")
	}
	tcancel()
	if err := <-done; err != nil {
		t.Errorf("track-devices after cancel: %v", err)
	}
	_, err = c.Exec(ctx, "no-such-serial", "true", nil)
	if !errors.Is(err, ErrDeviceGone) {
		t.Errorf("unknown serial: got %v; want ErrDeviceGone", err)
	}
}

// StartServer starts a real adb server on a free port and kills it at
// the end of the test; it skips when adb is not installed.
func StartServer(t testing.TB) *Client {
	t.Helper()
	bin, err := exec.LookPath("adb")
	if err != nil {
		t.Skip("adb is not on PATH (make test installs the Debian package adb)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(bin, "-P", strconv.Itoa(port), "nodaemon", "server")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	c := New("127.0.0.1:" + strconv.Itoa(port))
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := c.Version(context.Background()); err == nil {
			return c
		} else if time.Now().After(deadline) {
			t.Fatalf("adb server did not start: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
