package service

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"phonefleet/testutil"
)

// TestInstancesJoinALockedDownBus runs two instances configured as a
// deployment locks its bus down: a nats-server that admits one NKEY user
// over TLS with client certificates, and each instance given the seed,
// the CA and a certificate through SERVICE_NATS_*. A device call through
// the instance that does not hold the sim phone reaches the one that does.
// A third instance with the database but without the bus credentials is
// refused by the server, says so in its log, and reaches no phone.
func TestInstancesJoinALockedDownBus(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode")
	}
	seed, public := testutil.NKeyUser(t)
	pki := testutil.NewPKI(t)
	natsURL := testutil.NATSConfigured(t, fmt.Sprintf(`authorization { users = [ { nkey: %q } ] }
tls { cert_file: %q, key_file: %q, ca_file: %q, verify: true, timeout: 5 }
`, public, pki.ServerCert, pki.ServerKey, pki.CAFile))
	var logs testutil.SyncBuffer
	defer func() {
		if t.Failed() {
			t.Logf("the instances' logs:\n%s", logs.String())
		}
	}()
	env := map[string]string{
		"DATABASE_URL": testutil.DatabaseURL(t), "SERVICE_NATS_URL": natsURL,
		"SERVICE_NATS_NKEY_SEED": seed, "SERVICE_NATS_TLS_CA": pki.CAFile,
		"SERVICE_NATS_TLS_CERT": pki.ClientCert, "SERVICE_NATS_TLS_KEY": pki.ClientKey,
		"SERVICE_ADDR": "127.0.0.1:0", "SERVICE_DATA_DIR": filepath.Join(t.TempDir(), "data"),
		"SERVICE_MODE": "local", "SERVICE_SIM_DEVICES": "1",
	}
	first := startInstance(t, "first", env, &logs)
	second := startInstance(t, "second", env, &logs)
	n := second
	if second.holdsSim() {
		n = first
	}
	snapshot := "/v1/devices/" + n.onlineSimPhone(t) + "/snapshot"
	// The holder's subscription may reach the server after the phone is
	// listed; until then a forwarded call is not delivered.
	waitUntil(t, time.Minute, "a snapshot through "+n.name, func() (bool, error) {
		return n.c.call("GET", snapshot, nil, nil).status == http.StatusOK, nil
	})

	outsider := map[string]string{}
	for k, v := range env {
		if !strings.HasPrefix(k, "SERVICE_NATS_") || k == "SERVICE_NATS_URL" || k == "SERVICE_NATS_TLS_CA" {
			outsider[k] = v
		}
	}
	third := startInstance(t, "third", outsider, &logs)
	waitUntil(t, time.Minute, "the third instance's refusal in its log", func() (bool, error) {
		for l := range strings.SplitSeq(logs.String(), "\n") {
			if strings.Contains(l, "instance=third") && strings.Contains(l, "cannot reach the message bus") {
				return true, nil
			}
		}
		return false, nil
	})
	r := third.c.call("GET", snapshot, nil, nil)
	if e, _ := r.body["error"].(map[string]any); r.status != http.StatusConflict || e["code"] != "device_unavailable" {
		t.Fatalf("a snapshot through the instance without bus credentials: got %d %v; want 409 device_unavailable", r.status, r.body)
	}
}
