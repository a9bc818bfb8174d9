package service

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"phonefleet/commands/checkpoints"
	"phonefleet/receiptchain"
	"phonefleet/testutil"
)

// checkpointClient calls a local service that requires a dev token.
type checkpointClient struct {
	t     *testing.T
	base  string
	token string
}

func (c checkpointClient) do(method, path, body string, bearer bool, want int) []byte {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if bearer {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		c.t.Fatalf("%s %s: got %d %s; want %d", method, path, resp.StatusCode, b, want)
	}
	return b
}

// act leases the device and performs n actions on it (two chain entries
// each: requested, committed), then releases it.
func (c checkpointClient) act(device, prefix string, n int) {
	c.t.Helper()
	var lease struct {
		LeaseID string `json:"leaseId"`
	}
	json.Unmarshal(c.do("POST", "/v1/devices/"+device+"/lease", "", true, 201), &lease)
	for i := range n {
		c.do("POST", "/v1/devices/"+device+"/actions", fmt.Sprintf(`{"action":"key","arguments":{"key":"HOME"},"idempotencyKey":"%s-%d","leaseId":"%s"}`,
			prefix, i, lease.LeaseID), true, 200)
	}
	c.do("DELETE", "/v1/devices/"+device+"/lease?leaseId="+lease.LeaseID, "", true, 204)
}

// waitCheckpoint polls GET /v1/receipts/checkpoints until the newest
// checkpoint counts entries entries, and returns the page.
func (c checkpointClient) waitCheckpoint(entries int64) []receiptchain.Checkpoint {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var page struct {
			Checkpoints []receiptchain.Checkpoint `json:"checkpoints"`
		}
		if err := json.Unmarshal(c.do("GET", "/v1/receipts/checkpoints", "", true, 200), &page); err != nil {
			c.t.Fatal(err)
		}
		if len(page.Checkpoints) > 0 && page.Checkpoints[0].Entries == entries {
			return page.Checkpoints
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no checkpoint of %d entries within 60 s; got %+v", entries, page.Checkpoints)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// nodeVerify runs the independent verifier (scripts/verify-receipts.mjs,
// Node's standard library only) and returns its exit status and output.
func nodeVerify(t *testing.T, files ...string) (int, string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the independent verifier cannot run")
	}
	cmd := exec.Command(node, append([]string{filepath.Join("..", "..", "..", "scripts", "verify-receipts.mjs")}, files...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), string(out)
		}
		t.Fatal(err)
	}
	return 0, string(out)
}

// TestReceiptCheckpoints starts the service with a checkpoint after every
// entry and a dev token, acts on a sim phone and checks the whole
// feature from outside: the signing key is generated on first start and
// published without a credential; checkpoints are readable with one, sent
// to a webhook subscribed to receipt.checkpoint_signed, and part of the
// export; the export and every checkpoint verify both with
// package receiptchain and with an independent verifier written from the
// published format (Node); a rotated key signs the next checkpoints while
// the old one stays published; and an export whose tail was cut and whose
// end line was rewritten is refused by both, given a checkpoint held
// apart, where the chain alone accepts it.
func TestReceiptCheckpoints(t *testing.T) {
	dir := t.TempDir()
	rcv := startReceiver(t, dir)
	const token = "dev-token-checkpoints"
	a, base := startApp(t, map[string]string{
		"DATABASE_URL": testutil.DatabaseURL(t), "SERVICE_ADDR": "127.0.0.1:0", "SERVICE_DATA_DIR": filepath.Join(dir, "data"),
		"SERVICE_WEBHOOK_CA_FILE": rcv.CAFile, "SERVICE_SIM_DEVICES": "1", "SERVICE_DEV_TOKEN": token,
		"SERVICE_RECEIPT_CHECKPOINT_EVERY": "2", "SERVICE_RECEIPT_CHECKPOINT_INTERVAL": "1s",
	})
	c := checkpointClient{t: t, base: base, token: token}

	// The keys need no credential; checkpoints do.
	var keys receiptchain.KeySet
	if err := json.Unmarshal(c.do("GET", "/v1/receipts/signing-keys", "", false, 200), &keys); err != nil {
		t.Fatal(err)
	}
	if len(keys.Keys) != 1 || keys.Keys[0].Algorithm != "Ed25519" || keys.Keys[0].ValidUntil != nil {
		t.Fatalf("got keys %+v; want the one key generated on first start, valid today", keys)
	}
	c.do("GET", "/v1/receipts/checkpoints", "", false, 401)

	created := c.do("POST", "/v1/webhooks", `{"url":"`+rcv.URL+`/in","events":["receipt.checkpoint_signed"]}`, true, 201)
	if !bytes.Contains(created, []byte(`"receipt.checkpoint_signed"`)) {
		t.Fatalf("got subscription %s; want it to name receipt.checkpoint_signed", created)
	}
	var devices struct {
		Devices []struct {
			DeviceID string `json:"deviceId"`
		} `json:"devices"`
	}
	// The devices read model lists the sim phone once it caught up with
	// its registration.
	for wait := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		json.Unmarshal(c.do("GET", "/v1/devices", "", true, 200), &devices)
		if len(devices.Devices) > 0 || time.Now().After(wait) {
			break
		}
	}
	if len(devices.Devices) != 1 {
		t.Fatalf("got devices %+v; want the one sim phone", devices)
	}
	dev := devices.Devices[0].DeviceID

	c.act(dev, "first", 3) // entries 1 to 6
	first := c.waitCheckpoint(6)
	if first[0].KeyID != keys.Keys[0].KeyID {
		t.Errorf("got checkpoint signed by %s; want the first key %s", first[0].KeyID, keys.Keys[0].KeyID)
	}

	// Rotation: the next checkpoints are signed by the new key; the old
	// one stays published, valid until the new one's start.
	rotated, err := a.Application().Checkpoints.RotateSigningKey.Handle(testutil.Context(t), checkpoints.RotateSigningKey{})
	if err != nil {
		t.Fatal(err)
	}
	c.act(dev, "second", 2) // entries 7 to 10
	second := c.waitCheckpoint(10)
	if second[0].KeyID != rotated.KeyID {
		t.Errorf("got the checkpoint after rotation signed by %s; want the new key %s", second[0].KeyID, rotated.KeyID)
	}
	keysBody := c.do("GET", "/v1/receipts/signing-keys", "", false, 200)
	keys = receiptchain.KeySet{}
	json.Unmarshal(keysBody, &keys)
	if len(keys.Keys) != 2 || keys.Keys[0].KeyID != rotated.KeyID || keys.Keys[1].ValidUntil == nil || *keys.Keys[1].ValidUntil != rotated.ValidFrom {
		t.Fatalf("got keys %s; want the new key first and the old one valid until %s", keysBody, rotated.ValidFrom)
	}

	export := c.do("GET", "/v1/receipts/export", "", true, 200)
	exportFile, keysFile := filepath.Join(dir, "export.ndjson"), filepath.Join(dir, "keys.json")
	mustWrite(t, exportFile, export)
	mustWrite(t, keysFile, keysBody)

	// The webhook: each checkpoint arrives as it is made, its data the
	// checkpoint the API shows.
	deadline := time.Now().Add(30 * time.Second)
	var delivered []receiptchain.Checkpoint
	for len(delivered) < len(second) {
		if time.Now().After(deadline) {
			t.Fatalf("got %d checkpoint deliveries within 30 s; want %d", len(delivered), len(second))
		}
		time.Sleep(50 * time.Millisecond)
		reqs, bodies := rcv.received()
		delivered = delivered[:0]
		for i, b := range bodies {
			var d struct {
				Event string                  `json:"event"`
				Data  receiptchain.Checkpoint `json:"data"`
			}
			json.Unmarshal(b, &d)
			if d.Event != "receipt.checkpoint_signed" || reqs[i].Header.Get("Service-Event") != d.Event {
				t.Fatalf("got delivery %s; want receipt.checkpoint_signed", b)
			}
			delivered = append(delivered, d.Data)
		}
	}
	_, bodies := rcv.received()
	heldFile := filepath.Join(dir, "held.json")
	mustWrite(t, heldFile, bodies[len(bodies)-1])
	held, err := readHeld(bodies)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range held {
		if err := keys.CheckSignature(d); err != nil {
			t.Errorf("delivered checkpoint of entry %d: %v", d.Entries, err)
		}
	}

	// The whole export verifies, with every checkpoint in it and those
	// held apart, in both verifiers.
	rep, err := receiptchain.Verify(bytes.NewReader(export), receiptchain.Options{Keys: &keys, Checkpoints: held})
	if err != nil {
		t.Fatalf("receiptchain: %v", err)
	}
	if rep.Entries != 10 || rep.Checkpoints != len(second) || !rep.SignaturesChecked || rep.Latest.Entries != 10 {
		t.Errorf("got report %+v; want 10 entries and the %d checkpoints, signatures checked", rep, len(second))
	}
	code, out := nodeVerify(t, exportFile, keysFile, heldFile)
	if code != 0 || !strings.Contains(out, `"entries":10`) || !strings.Contains(out, fmt.Sprintf(`"checkpoints":%d`, len(second))) {
		t.Fatalf("independent verifier: exit %d, %s; want 0 with 10 entries and %d checkpoints", code, out, len(second))
	}

	// A checkpoint whose signature was altered is refused by both.
	i := bytes.Index(export, []byte(`"signature":"`)) + len(`"signature":"`)
	forged := bytes.Clone(export)
	forged[i] = map[bool]byte{true: 'B', false: 'A'}[forged[i] == 'A']
	forgedFile := filepath.Join(dir, "forged.ndjson")
	mustWrite(t, forgedFile, forged)
	if _, err := receiptchain.Verify(bytes.NewReader(forged), receiptchain.Options{Keys: &keys}); !isProblem(err, receiptchain.BadSignature) {
		t.Errorf("receiptchain on an altered signature: got %v; want %s", err, receiptchain.BadSignature)
	}
	if code, out := nodeVerify(t, forgedFile, keysFile); code != 1 || !strings.Contains(out, "bad signature") {
		t.Errorf("independent verifier on an altered signature: exit %d, %s; want 1, bad signature", code, out)
	}

	// The tail cut: the last two entries and what follows them removed,
	// the end line rewritten to match. The chain alone holds together;
	// the checkpoint held apart shows the cut.
	cut := cutTail(t, export, 8)
	cutFile := filepath.Join(dir, "cut.ndjson")
	mustWrite(t, cutFile, cut)
	if _, err := receiptchain.Verify(bytes.NewReader(cut), receiptchain.Options{Keys: &keys}); err != nil {
		t.Fatalf("the cut export without a held checkpoint: got %v; want it to verify (nothing in it shows the cut)", err)
	}
	if _, err := receiptchain.Verify(bytes.NewReader(cut), receiptchain.Options{Keys: &keys, Checkpoints: held}); !isProblem(err, receiptchain.Removed) {
		t.Errorf("receiptchain on the cut export with the held checkpoint: got %v; want %s", err, receiptchain.Removed)
	}
	if code, out := nodeVerify(t, cutFile, keysFile, heldFile); code != 1 || !strings.Contains(out, "cut") {
		t.Errorf("independent verifier on the cut export: exit %d, %s; want 1, cut", code, out)
	}
}

// cutTail keeps the export's entries up to keep (and the checkpoints
// among them) and writes the end line those entries call for.
func cutTail(t *testing.T, export []byte, keep int64) []byte {
	t.Helper()
	var out [][]byte
	head := receiptchain.Start()
	for _, line := range bytes.Split(bytes.TrimSpace(export), []byte("\n")) {
		var e receiptchain.Entry
		json.Unmarshal(line, &e)
		switch {
		case bytes.HasPrefix(line, []byte(`{"end":`)):
			continue
		case e.Seq == 0: // a checkpoint: kept if it signs a kept entry
			var cp struct {
				Checkpoint receiptchain.Checkpoint `json:"checkpoint"`
			}
			json.Unmarshal(line, &cp)
			if cp.Checkpoint.Entries > keep {
				continue
			}
		case e.Seq > keep:
			continue
		default:
			head = receiptchain.Head{Seq: e.Seq, Hash: e.Hash}
		}
		out = append(out, line)
	}
	var org struct {
		OrgID string `json:"orgId"`
	}
	json.Unmarshal(out[0], &org)
	end, err := receiptchain.EndLine(org.OrgID, head)
	if err != nil {
		t.Fatal(err)
	}
	return append(bytes.Join(append(out, end), []byte("\n")), '\n')
}

func readHeld(bodies [][]byte) ([]receiptchain.Checkpoint, error) {
	var out []receiptchain.Checkpoint
	for _, b := range bodies {
		var d struct {
			Data receiptchain.Checkpoint `json:"data"`
		}
		if err := json.Unmarshal(b, &d); err != nil {
			return nil, err
		}
		out = append(out, d.Data)
	}
	return out, nil
}

func isProblem(err error, kind string) bool {
	p, ok := err.(*receiptchain.Problem)
	return ok && p.Kind == kind
}

func mustWrite(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
