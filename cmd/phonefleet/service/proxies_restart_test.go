package service

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"phonefleet/testutil"
)

// TestForwardProxyKeepsItsAddressAcrossARestart: with SERVICE_PROXY_ADDR
// unset the forward proxy listens on a free port the first time and on
// the same one after a restart (issued proxies record their endpoint); the
// address is remembered in the data directory.
func TestForwardProxyKeepsItsAddressAcrossARestart(t *testing.T) {
	env := localEnv(t, testutil.DatabaseURL(t), 0)
	var first string
	t.Run("first start", func(t *testing.T) {
		a, _ := startApp(t, env)
		first = a.forwardProxy.Addr()
	})
	b, err := os.ReadFile(filepath.Join(env["SERVICE_DATA_DIR"], proxyAddrFile))
	if err != nil || strings.TrimSpace(string(b)) != first {
		t.Fatalf("remembered %q, %v; want %s", b, err, first)
	}
	t.Run("restart", func(t *testing.T) {
		a, _ := startApp(t, env)
		if got := a.forwardProxy.Addr(); got != first {
			t.Errorf("the forward proxy listens on %s after a restart; want %s as before", got, first)
		}
	})
}
