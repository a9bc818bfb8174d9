package testutil

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ADBPath returns the adb binary the tests use, or fails the test with
// how to get one. `make test` installs it when missing
// (scripts/ensure-adb.sh: Debian's adb package). PHONEFLEET_TEST_ADB=skip
// skips tests that need it instead, for machines that cannot have it.
func ADBPath(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("adb")
	if err == nil {
		return p
	}
	if os.Getenv("PHONEFLEET_TEST_ADB") == "skip" {
		t.Skip("adb not on PATH and PHONEFLEET_TEST_ADB=skip")
	}
	t.Fatalf("adb not on PATH: run `make test` (it installs Debian's adb package as root), " +
		"or install it (Debian/Ubuntu: apt-get install adb; macOS: brew install android-platform-tools); " +
		"PHONEFLEET_TEST_ADB=skip skips these tests")
	return ""
}

// ADBServer starts a private adb server on a free loopback port and
// returns its address (127.0.0.1:PORT). The server is killed (adb -P PORT
// kill-server) when the test ends, so tests never touch the default
// server on 5037.
func ADBServer(t testing.TB) string {
	t.Helper()
	ADBPath(t)
	// The port is free when looked at; another process may take it before
	// adb listens on it (adb then fails with a protocol fault talking to
	// it): a few tries on new ports.
	var failures []string
	for try := 0; try < 5; try++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("adb server: find a free port: %v", err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		addr := "127.0.0.1:" + strconv.Itoa(port)
		out, err := adbCommand(addr, 60*time.Second, "start-server")
		if err != nil {
			failures = append(failures, fmt.Sprintf("adb -P %d start-server: %v: %s", port, err, out))
			continue
		}
		t.Cleanup(func() {
			if out, err := adbCommand(addr, 30*time.Second, "kill-server"); err != nil {
				t.Logf("adb kill-server on %s: %v: %s", addr, err, out)
			}
		})
		return addr
	}
	t.Fatalf("adb server: %s", strings.Join(failures, "; "))
	return ""
}

// ADB runs `adb -P PORT args…` against the server at serverAddr and
// returns what it printed (stdout and stderr).
func ADB(t testing.TB, serverAddr string, args ...string) (string, error) {
	t.Helper()
	return adbCommand(serverAddr, 2*time.Minute, args...)
}

// ConnectADB runs `adb connect daemonAddr` on the server at serverAddr and
// waits until `adb devices` lists the device as "device". A device the
// server still knows from before (offline after its daemon restarted) is
// brought back by the server's own reconnection, which this waits for.
func ConnectADB(t testing.TB, serverAddr, daemonAddr string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		out, err := adbCommand(serverAddr, 30*time.Second, "connect", daemonAddr)
		last = out
		if err == nil && strings.Contains(out, "connected to") {
			// Wait for this connection (or the server's reconnection) to
			// come online before asking again.
			for end := time.Now().Add(15 * time.Second); time.Now().Before(end); {
				state := ADBState(t, serverAddr, daemonAddr)
				if state == "device" {
					return
				}
				last = out + " / state " + state
				if state == "" && !strings.Contains(out, "already") {
					break // dropped again; connect anew
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("adb connect %s via %s: never listed as device (last: %s)", daemonAddr, serverAddr, last)
}

// ADBState returns the state `adb devices` gives serial ("device",
// "offline", "unauthorized", …), or "" when it is not listed.
func ADBState(t testing.TB, serverAddr, serial string) string {
	t.Helper()
	out, err := adbCommand(serverAddr, 30*time.Second, "devices")
	if err != nil {
		t.Fatalf("adb devices: %v: %s", err, out)
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == serial {
			return f[1]
		}
	}
	return ""
}

func adbCommand(serverAddr string, timeout time.Duration, args ...string) (string, error) {
	_, port, err := net.SplitHostPort(serverAddr)
	if err != nil {
		return "", fmt.Errorf("adb server address %q: %w", serverAddr, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "adb", append([]string{"-P", port}, args...)...)
	// Output goes to a file, not a pipe: start-server forks the server,
	// which would hold a pipe open and keep Wait waiting.
	f, err := os.CreateTemp("", "adb-out-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	runErr := cmd.Run()
	out, _ := os.ReadFile(f.Name())
	return string(bytes.TrimSpace(out)), runErr
}
