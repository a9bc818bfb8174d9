package testutil

import (
	"bufio"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"
)

func TestNATSAnswersAndIsShared(t *testing.T) {
	if os.Getenv(envNATSURL) != "" {
		t.Skip(envNATSURL + " names the server: no private one starts")
	}
	u := NATS(t)
	p, err := url.Parse(u)
	if err != nil || p.Scheme != "nats" || p.Hostname() != "127.0.0.1" || p.Port() == "" || p.Port() == "4222" {
		t.Fatalf("got %q; want nats://127.0.0.1:<a free port>", u)
	}
	if info := natsInfo(t, p.Host); !strings.Contains(info, `"headers":true`) {
		t.Fatalf("the server's INFO is %s; want headers supported (no-responders needs them)", info)
	}
	if again := NATS(t); again != u {
		t.Fatalf("second call: got %q; want the same process at %q", again, u)
	}
}

// natsInfo returns the INFO line the server at addr greets a client with.
func natsInfo(t *testing.T, addr string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "INFO ") {
		t.Fatalf("greeted with %q (%v); want INFO", line, err)
	}
	return line
}
