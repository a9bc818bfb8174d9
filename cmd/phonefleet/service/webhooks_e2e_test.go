package service

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"phonefleet/testutil"
	"phonefleet/webhooksig"
)

// TestLocalModeDeliversToALoopbackReceiverTrustedByTheCAFile starts the
// service as `phonefleet serve` would, in local mode with
// SERVICE_WEBHOOK_CA_FILE naming a local receiver's certificate: a webhook
// to that loopback receiver is accepted, its test delivery arrives signed
// with the secret the API returned once, and the server key was created
// in the data directory.
func TestLocalModeDeliversToALoopbackReceiverTrustedByTheCAFile(t *testing.T) {
	dir := t.TempDir()
	rcv := startReceiver(t, dir)
	ca := rcv.CAFile
	env := map[string]string{
		"DATABASE_URL": testutil.DatabaseURL(t), "SERVICE_ADDR": "127.0.0.1:0", "SERVICE_DATA_DIR": filepath.Join(dir, "data"),
		"SERVICE_WEBHOOK_CA_FILE": ca, "SERVICE_SIM_DEVICES": "0",
	}
	_, base := startApp(t, env)
	if st, err := os.Stat(filepath.Join(dir, "data", WebhookKeyFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("server key: got %v (%v); want a 0600 file in the data directory", st, err)
	}

	post := func(path, body string) map[string]any {
		t.Helper()
		resp, err := http.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		if resp.StatusCode/100 != 2 {
			t.Fatalf("POST %s: got %d %v", path, resp.StatusCode, out)
		}
		return out
	}
	created := post("/v1/webhooks", `{"url":"`+rcv.URL+`/in","events":["run.ended"]}`)
	id := created["webhook"].(map[string]any)["webhookId"].(string)
	secret := created["secret"].(string)
	queued := post("/v1/webhooks/"+id+"/test", "")

	deadline := time.Now().Add(20 * time.Second)
	for {
		if got, _ := rcv.received(); len(got) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the test delivery never arrived")
		}
		time.Sleep(20 * time.Millisecond)
	}
	got, bodies := rcv.received()
	r, body := got[0], bodies[0]
	if r.Header.Get(webhooksig.DeliveryHeader) != queued["deliveryId"] {
		t.Errorf("got Service-Delivery %q; want %v", r.Header.Get(webhooksig.DeliveryHeader), queued["deliveryId"])
	}
	if err := webhooksig.Verify(body, r.Header.Get(webhooksig.SignatureHeader), secret, time.Now(), 0); err != nil {
		t.Errorf("signature: %v", err)
	}
}
