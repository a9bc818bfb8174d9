package testutil

import (
	"encoding/json"
	"net"
	"testing"
)

// HealthzLag reads a read model's lag from a /healthz answer body: -1 when
// the body or the read model cannot be read.
func HealthzLag(body []byte, projection string) int64 {
	var h struct {
		Projections []struct {
			Name string `json:"name"`
			Lag  int64  `json:"lag"`
		} `json:"projections"`
	}
	if json.Unmarshal(body, &h) != nil {
		return -1
	}
	for _, p := range h.Projections {
		if p.Name == projection {
			return p.Lag
		}
	}
	return -1
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
