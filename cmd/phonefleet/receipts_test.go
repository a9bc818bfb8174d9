package main

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"phonefleet/receiptchain"
)

// TestReceiptsVerifyFile runs `phonefleet receipts verify --file` as a
// user would, with no database reachable: an intact export passes, and an
// altered byte, a dropped line and two swapped lines each fail with exit
// status 1 and one line naming the line number, the receipt and the harm.
func TestReceiptsVerifyFile(t *testing.T) {
	head := receiptchain.Start()
	var lines [][]byte
	for i := 1; i <= 4; i++ {
		key := fmt.Sprintf("key-%d", i)
		_, line, next, err := receiptchain.Next("org_cli", head, "action.requested",
			[]byte(`{"idempotencyKey":"`+key+`","state":"pending","arguments":{"x":1}}`), key)
		if err != nil {
			t.Fatal(err)
		}
		head, lines = next, append(lines, line)
	}
	end, err := receiptchain.EndLine("org_cli", head)
	if err != nil {
		t.Fatal(err)
	}
	lines = append(lines, end)
	noDB := []string{"DATABASE_URL=postgres://nobody@127.0.0.1:1/nothing?connect_timeout=1"}
	for _, tc := range []struct {
		name   string
		tamper func(l [][]byte) [][]byte
		want   string
	}{
		{"intact", func(l [][]byte) [][]byte { return l }, "OK: 4 entries recording 4 receipts of organisation org_cli"},
		{"one byte altered", func(l [][]byte) [][]byte {
			l[1] = bytes.Replace(l[1], []byte(`"x":1`), []byte(`"x":7`), 1)
			return l
		}, `line 2: receipt "key-2" (entry 2) altered: its content does not match its hash`},
		{"one line dropped", func(l [][]byte) [][]byte { return append(l[:2:2], l[3:]...) },
			`line 3: receipt "key-3" (entry 3) removed: entry 3 is missing`},
		{"two lines swapped", func(l [][]byte) [][]byte { l[1], l[2] = l[2], l[1]; return l },
			`line 2: receipt "key-3" (entry 3) reordered: entry 3 is at line 2, ahead of entry 2 (receipt "key-2"), which is at line 3`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls := tc.tamper(append([][]byte(nil), lines...))
			path := filepath.Join(t.TempDir(), "export.ndjson")
			if err := os.WriteFile(path, append(bytes.Join(ls, []byte("\n")), '\n'), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := command(noDB, "receipts", "verify", "--file", path).CombinedOutput()
			if tc.name == "intact" {
				if err != nil || !strings.Contains(string(out), tc.want) {
					t.Fatalf("got %v:\n%s\nwant success saying %q", err, out, tc.want)
				}
				return
			}
			if code := exitCodeOf(err); code != 1 || !strings.Contains(string(out), "FAIL "+tc.want) {
				t.Fatalf("got exit %d:\n%s\nwant exit 1 and a line %q", code, out, "FAIL "+tc.want)
			}
		})
	}
}

// TestReceiptsVerifyCheckpoints runs `phonefleet receipts verify` on an
// export holding a signed checkpoint: with --keys (a file, or the URL of
// the published keys) the signature is checked; without, the OK line says
// it was not; and an export cut after entry 2, its end line rewritten,
// passes alone but is refused given the checkpoint of entry 4 held apart
// as its webhook delivery, without --head.
func TestReceiptsVerifyCheckpoints(t *testing.T) {
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	from := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	keysJSON, _ := json.Marshal(receiptchain.KeySet{Keys: []receiptchain.PublishedKey{{KeyID: "rsk_cli", Algorithm: receiptchain.Algorithm,
		PublicKey: base64.RawURLEncoding.EncodeToString(pub), ValidFrom: from.Format(receiptchain.TimeLayout)}}})
	head := receiptchain.Start()
	var lines [][]byte
	var atTwo receiptchain.Head
	for i := 1; i <= 4; i++ {
		key := fmt.Sprintf("key-%d", i)
		_, line, next, err := receiptchain.Next("org_cli", head, "action.requested", []byte(`{"idempotencyKey":"`+key+`","state":"pending"}`), key)
		if err != nil {
			t.Fatal(err)
		}
		head, lines = next, append(lines, line)
		if i == 2 {
			atTwo = head
		}
	}
	cp, err := receiptchain.Sign(priv, "rsk_cli", "org_cli", head, from.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	cpLine, _ := receiptchain.CheckpointLine(cp)
	held, _ := json.Marshal(map[string]any{"deliveryId": "dlv_1", "event": "receipt.checkpoint_signed", "occurredAt": cp.SignedAt, "data": cp})
	end, _ := receiptchain.EndLine("org_cli", head)
	cutEnd, _ := receiptchain.EndLine("org_cli", atTwo)

	dir := t.TempDir()
	write := func(name string, ls ...[]byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, append(bytes.Join(ls, []byte("\n")), '\n'), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	whole := write("whole.ndjson", append(append([][]byte{}, lines...), cpLine, end)...)
	cut := write("cut.ndjson", lines[0], lines[1], cutEnd)
	keys, heldFile := write("keys.json", keysJSON), write("held.json", held)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write(keysJSON) }))
	defer srv.Close()

	noDB := []string{"DATABASE_URL=postgres://nobody@127.0.0.1:1/nothing?connect_timeout=1"}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"keys from a file", []string{whole, "--keys", keys, "--checkpoint", heldFile}, 0,
			"checkpoints: 1 in the export, 1 held apart, each matching the chain; signatures checked against the published keys; the latest counts 4 entries"},
		{"keys from the URL", []string{whole, "--keys", srv.URL + "/v1/receipts/signing-keys"}, 0, "signatures checked against the published keys"},
		{"no keys", []string{whole}, 0, "signatures NOT checked (give --keys)"},
		{"cut alone", []string{cut, "--keys", keys}, 0, "OK: 2 entries"},
		{"cut, checkpoint held apart", []string{cut, "--keys", keys, "--checkpoint", heldFile}, 1,
			"FAIL line 3: receipt \"key-2\" (entry 2) removed: the export ends at entry 2, but a checkpoint signed at " + cp.SignedAt + " counts 4 entries: entries 3 to 4 were removed from its end"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := command(noDB, append([]string{"receipts", "verify"}, tc.args...)...).CombinedOutput()
			if code := exitCodeOf(err); code != tc.code || !strings.Contains(string(out), tc.want) {
				t.Fatalf("got exit %d:\n%s\nwant exit %d and %q", code, out, tc.code, tc.want)
			}
		})
	}
}
