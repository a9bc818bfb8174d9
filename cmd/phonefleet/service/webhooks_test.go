package service

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"phonefleet/internal/config"
)

func TestWebhookAddressPolicyByMode(t *testing.T) {
	tests := []struct {
		mode, addr string
		allowed    bool
	}{
		{"local", "127.0.0.1", true},
		{"local", "::1", true},
		{"local", "10.0.0.1", false},
		{"local", "169.254.169.254", false},
		{"hosted", "127.0.0.1", false},
		{"hosted", "::1", false},
		{"hosted", "192.168.1.1", false},
		{"hosted", "93.184.216.34", true},
	}
	for _, tt := range tests {
		t.Run(tt.mode+" "+tt.addr, func(t *testing.T) {
			p := webhookAddressPolicy(config.Config{Mode: tt.mode, WebhookCAFile: "/any/ca.pem"})
			if got := p.Allows(netip.MustParseAddr(tt.addr)); got != tt.allowed {
				t.Fatalf("got allowed %v; want %v", got, tt.allowed)
			}
		})
	}
	if _, err := webhookRootCAs(config.Config{Mode: "hosted", WebhookCAFile: "/any/ca.pem"}); err == nil {
		t.Error("got no error for SERVICE_WEBHOOK_CA_FILE in hosted mode; want a refusal")
	}
}

func TestWebhookKeyIsCreatedOnceWithMode0600(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	k1, err := LoadOrCreateWebhookKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, WebhookKeyFile))
	if err != nil || st.Mode().Perm() != 0o600 || len(k1) != 32 {
		t.Fatalf("got %v (%v), %d bytes; want a 32-byte key file with mode 0600", st.Mode().Perm(), err, len(k1))
	}
	k2, err := LoadOrCreateWebhookKey(dir)
	if err != nil || !bytes.Equal(k1, k2) {
		t.Fatalf("got another key on the second start (%v); want the same", err)
	}
	if err := os.Chmod(filepath.Join(dir, WebhookKeyFile), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateWebhookKey(dir); err == nil {
		t.Fatal("got a key readable by others accepted; want a refusal")
	}
}
