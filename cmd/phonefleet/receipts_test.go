package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
