package testutil

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	// envNATSURL names a NATS server the tests use instead of starting
	// their own.
	envNATSURL = "PHONEFLEET_NATS_URL"
	// envNATSServer names the nats-server binary; `make test` sets it to
	// what scripts/ensure-nats-server.sh installed or found.
	envNATSServer = "PHONEFLEET_NATS_SERVER"
	// NATSServerVersion is the nats-server release
	// scripts/ensure-nats-server.sh installs when none is found (any
	// release from 2.2 on serves the tests: headers and no-responders).
	NATSServerVersion = "v2.15.2"
)

// natsServer runs nats-server on a free loopback port (-p -1: the server
// picks it, so no other process can take it between choosing and binding)
// and finds it ready once it greets a client.
var natsServer = supervised{
	name: "nats-server",
	env:  envNATSServer,
	hint: "run `make test`, which installs it (scripts/ensure-nats-server.sh: go install github.com/nats-io/nats-server/v2@" +
		NATSServerVersion + "), set " + envNATSServer + " to its path, or set " + envNATSURL + " to a running server",
	args:      []string{"-a", "127.0.0.1", "-p", "-1"},
	listening: "Listening for client connections on ",
	scheme:    "nats",
	probe:     natsGreets,
	timeout:   time.Minute,
}

// NATS returns the URL (nats://127.0.0.1:PORT) of a NATS server for the
// test: PHONEFLEET_NATS_URL when set, else a private nats-server serving
// the whole test binary, started on a free loopback port on the first call
// (no JetStream) and stopped when the test process ends, however it ends
// (even by SIGKILL), by a supervisor holding a pipe from this process: a
// copy of the test binary, as for StripeMock. The binary comes from
// PHONEFLEET_NATS_SERVER, PATH, GOBIN or GOPATH/bin; `make test` installs
// it when missing. The test fails when there is none.
func NATS(t testing.TB) string {
	t.Helper()
	if u := os.Getenv(envNATSURL); u != "" {
		return u
	}
	return natsServer.url(t)
}

// natsGreets connects to the server at addr; nil means that it greeted
// the client with INFO.
func natsGreets(ctx context.Context, addr string) error {
	d := net.Dialer{Timeout: time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	greeting, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(greeting, "INFO ") {
		return fmt.Errorf("greeted with %.60q", greeting)
	}
	return nil
}

// NATSConfigured starts a nats-server of the test's own with the
// configuration conf (nats-server's config file syntax: an authorization
// block, a tls block…; file paths in it absolute) on a free loopback port,
// and returns its URL (nats://127.0.0.1:PORT, whatever conf says of TLS:
// the client upgrades when the server asks). The server stops when the
// test ends. Unlike NATS it ignores PHONEFLEET_NATS_URL: a shared server
// cannot have the test's settings. The binary is found as NATS finds it.
func NATSConfigured(t testing.TB, conf string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nats-server.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &supervised{name: natsServer.name, env: natsServer.env, hint: natsServer.hint,
		args:      append([]string{"-c", path}, natsServer.args...),
		listening: natsServer.listening, scheme: natsServer.scheme, probe: natsServer.probe, timeout: natsServer.timeout}
	u := s.url(t)
	t.Cleanup(func() { _ = s.lifeline.Close() })
	return u
}
