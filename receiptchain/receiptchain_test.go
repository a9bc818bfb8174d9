package receiptchain_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"phonefleet/receiptchain"
)

// export builds a chain of n entries for org (receipt r<i> for entry i)
// and returns its lines, end line included.
func export(t *testing.T, org string, n int) [][]byte {
	t.Helper()
	head := receiptchain.Start()
	var lines [][]byte
	for i := 1; i <= n; i++ {
		key := fmt.Sprintf("r%d", i)
		receipt := fmt.Sprintf(`{"idempotencyKey":%q,"state":"committed","arguments":{"y":2,"x":1.50},"durationMs":12.5}`, key)
		_, line, next, err := receiptchain.Next(org, head, "action.committed", []byte(receipt), key)
		if err != nil {
			t.Fatal(err)
		}
		head = next
		lines = append(lines, line)
	}
	end, err := receiptchain.EndLine(org, head)
	if err != nil {
		t.Fatal(err)
	}
	return append(lines, end)
}

func join(lines [][]byte) []byte { return append(bytes.Join(lines, []byte("\n")), '\n') }

func verify(t *testing.T, data []byte, opt receiptchain.Options) (receiptchain.Report, *receiptchain.Problem) {
	t.Helper()
	rep, err := receiptchain.Verify(bytes.NewReader(data), opt)
	var p *receiptchain.Problem
	if err != nil && !errors.As(err, &p) {
		t.Fatalf("verify: %v", err)
	}
	return rep, p
}

func TestIntactExportVerifies(t *testing.T) {
	lines := export(t, "org_a", 5)
	rep, p := verify(t, join(lines), receiptchain.Options{})
	if p != nil {
		t.Fatalf("got problem %v; want none", p)
	}
	if rep.Entries != 5 || rep.Receipts != 5 || rep.OrgID != "org_a" || len(rep.HeadHash) != 64 {
		t.Errorf("got report %+v; want 5 entries, 5 receipts of org_a", rep)
	}
	if _, p := verify(t, join(lines), receiptchain.Options{Head: receiptchain.ExpectedHead{Seq: rep.Entries, Hash: rep.HeadHash}}); p != nil {
		t.Errorf("with the right head: got %v; want none", p)
	}
	// An empty chain is an end line alone.
	if rep, p := verify(t, join(export(t, "org_a", 0)), receiptchain.Options{}); p != nil || rep.Entries != 0 {
		t.Errorf("empty export: got %+v, %v; want 0 entries and no problem", rep, p)
	}
}

// TestTamperingIsNamed: each way of tampering is reported at the right
// line, naming the receipt concerned and what was done.
func TestTamperingIsNamed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tamper func(lines [][]byte) [][]byte
		opt    receiptchain.Options
		line   int
		key    string
		kind   string
		detail string
	}{
		{name: "one byte of a receipt altered", line: 3, key: "r3", kind: receiptchain.Altered, detail: "does not match its hash",
			tamper: func(l [][]byte) [][]byte {
				l[2] = bytes.Replace(l[2], []byte(`"committed"`), []byte(`"commitTed"`), 1)
				return l
			}},
		{name: "the receipt's key altered", line: 3, key: "r3", kind: receiptchain.Altered, detail: `now names receipt "r9"`,
			tamper: func(l [][]byte) [][]byte { l[2] = bytes.Replace(l[2], []byte(`"r3"`), []byte(`"r9"`), 1); return l }},
		{name: "a byte altered so the line is no JSON", line: 2, key: "r2", kind: receiptchain.Altered, detail: "not a chain entry",
			tamper: func(l [][]byte) [][]byte { l[1] = append([]byte{'['}, l[1][1:]...); return l }},
		{name: "one line dropped", line: 3, key: "r3", kind: receiptchain.Removed, detail: "entry 3 is missing",
			tamper: func(l [][]byte) [][]byte { return append(l[:2:2], l[3:]...) }},
		{name: "two lines dropped", line: 2, key: "r3", kind: receiptchain.Removed, detail: "entries 2 to 3 are missing",
			tamper: func(l [][]byte) [][]byte { return append(l[:1:1], l[3:]...) }},
		{name: "two lines swapped", line: 2, key: "r4", kind: receiptchain.Reordered, detail: `ahead of entry 2 (receipt "r2"), which is at line 4`,
			tamper: func(l [][]byte) [][]byte { l[1], l[3] = l[3], l[1]; return l }},
		{name: "adjacent lines swapped", line: 4, key: "r5", kind: receiptchain.Reordered, detail: "entry 5 is at line 4",
			tamper: func(l [][]byte) [][]byte { l[3], l[4] = l[4], l[3]; return l }},
		{name: "a line repeated", line: 3, key: "r2", kind: receiptchain.Reordered, detail: "repeated or out of order",
			tamper: func(l [][]byte) [][]byte { return append(l[:2:2], append([][]byte{l[1]}, l[2:]...)...) }},
		{name: "cut short", line: 4, key: "r4", kind: receiptchain.Truncated, detail: "without its end line",
			tamper: func(l [][]byte) [][]byte { return l[:4] }},
		{name: "last entry dropped, end line kept", line: 5, kind: receiptchain.Removed, detail: "entries 5 to 5 were removed",
			tamper: func(l [][]byte) [][]byte { return append(l[:4:4], l[5]) }},
		{name: "last entry dropped and end line rewritten, head known", line: 5, key: "r4", kind: receiptchain.Removed, detail: "not at the expected head (entry 5",
			tamper: func(l [][]byte) [][]byte {
				end := bytes.Replace(l[5], []byte(`"entries":5`), []byte(`"entries":4`), 1)
				h := entryHash(t, l[3])
				end = bytes.Replace(end, []byte(entryHash(t, l[4])), []byte(h), 1)
				return append(l[:4:4], end)
			}},
		{name: "an entry of another organisation inserted", line: 3, key: "r3", kind: receiptchain.Foreign, detail: `organisation "org_b"`,
			tamper: func(l [][]byte) [][]byte {
				return append(l[:2:2], append([][]byte{export(t, "org_b", 3)[2]}, l[2:]...)...)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines := export(t, "org_a", 5)
			opt := tc.opt
			if strings.Contains(tc.name, "head known") {
				rep, _ := verify(t, join(lines), opt)
				opt.Head = receiptchain.ExpectedHead{Seq: rep.Entries, Hash: rep.HeadHash}
			}
			_, p := verify(t, join(tc.tamper(lines)), opt)
			if p == nil {
				t.Fatal("got no problem; want one")
			}
			if p.Line != tc.line || p.Key != tc.key || p.Kind != tc.kind || !strings.Contains(p.Detail, tc.detail) {
				t.Errorf("got %q (line %d, key %q, %s); want line %d, key %q, %s, detail containing %q",
					p.Error(), p.Line, p.Key, p.Kind, tc.line, tc.key, tc.kind, tc.detail)
			}
		})
	}
}

// TestRecomputedHashIsCaught: an entry altered and re-hashed is named by
// the next entry, which recorded its original hash.
func TestRecomputedHashIsCaught(t *testing.T) {
	lines := export(t, "org_a", 4)
	forged := reHash(t, bytes.Replace(lines[1], []byte(`"committed"`), []byte(`"failed"`), 1))
	lines[1] = forged
	_, p := verify(t, join(lines), receiptchain.Options{})
	if p == nil || p.Line != 2 || p.Key != "r2" || p.Kind != receiptchain.Altered || !strings.Contains(p.Detail, "hash was recomputed") {
		t.Fatalf("got %v; want line 2, receipt r2 altered with its hash recomputed", p)
	}
}

// TestForgeryIsNamed: a chain rewritten at an entry and re-hashed from
// there on holds together; against the head recorded earlier (SEQ:HASH)
// it is named forged at that entry, a cut one removed; with a hash alone
// neither can be told apart, and the answer says so.
func TestForgeryIsNamed(t *testing.T) {
	lines := export(t, "org_a", 5)
	rep, _ := verify(t, join(lines), receiptchain.Options{})
	recorded := receiptchain.ExpectedHead{Seq: rep.Entries, Hash: rep.HeadHash}
	forged := rechain(t, lines, 2, func(l []byte) []byte { return bytes.Replace(l, []byte(`"committed"`), []byte(`"failed"`), 1) })
	if _, p := verify(t, join(forged), receiptchain.Options{}); p != nil {
		t.Fatalf("the forged chain without a head: got %v; want it to hold together (nothing can tell it)", p)
	}
	_, p := verify(t, join(forged), receiptchain.Options{Head: recorded})
	if p == nil || p.Kind != receiptchain.Forged || p.Line != 5 || p.Key != "r5" || !strings.Contains(p.Detail, "rewritten") {
		t.Fatalf("forged, head SEQ:HASH known: got %v; want entry 5 (line 5, r5) named forged", p)
	}
	_, p = verify(t, join(forged), receiptchain.Options{Head: receiptchain.ExpectedHead{Hash: rep.HeadHash}})
	if p == nil || p.Kind != receiptchain.Unmatched || !strings.Contains(p.Detail, "SEQ:HASH") {
		t.Fatalf("forged, hash alone known: got %v; want an unmatched head, saying SEQ:HASH tells which", p)
	}
	// A later export extends the recorded head: that is no problem.
	longer := export(t, "org_a", 7)
	if _, p := verify(t, join(longer), receiptchain.Options{Head: recorded}); p != nil {
		t.Fatalf("a longer export of the same chain: got %v; want it to extend the recorded head", p)
	}
	for _, bad := range []string{"5", "x:" + rep.HeadHash, "0:" + rep.HeadHash, "3:abc"} {
		if _, err := receiptchain.ParseHead(bad); err == nil {
			t.Errorf("ParseHead(%q): got no error; want one", bad)
		}
	}
	if h, err := receiptchain.ParseHead(fmt.Sprintf("5:%s", strings.ToUpper(rep.HeadHash))); err != nil || h != recorded {
		t.Errorf("ParseHead: got %+v, %v; want %+v", h, err, recorded)
	}
}

// TestNonCanonicalLinesAreRefused: a line with the same JSON value but
// not in the canonical form the export writes (re-serialised with other
// separators, a character escaped) is refused, though its hash still
// verifies.
func TestNonCanonicalLinesAreRefused(t *testing.T) {
	for name, change := range map[string]func([]byte) []byte{
		"spaces after separators": func(l []byte) []byte { return bytes.ReplaceAll(l, []byte(`":`), []byte(`": `)) },
		"a character escaped":     func(l []byte) []byte { return bytes.Replace(l, []byte(`"org_a"`), []byte(`"org\u005fa"`), 1) },
		"the end line re-spaced":  nil,
	} {
		t.Run(name, func(t *testing.T) {
			lines := export(t, "org_a", 3)
			at := 2
			if change == nil {
				at, change = 4, func(l []byte) []byte { return bytes.ReplaceAll(l, []byte(`,"`), []byte(`, "`)) }
			}
			lines[at-1] = change(lines[at-1])
			_, p := verify(t, join(lines), receiptchain.Options{})
			if p == nil || p.Line != at || p.Kind != receiptchain.Malformed || !strings.Contains(p.Detail, "canonical") {
				t.Fatalf("got %v; want line %d refused as not canonical", p, at)
			}
		})
	}
}

// rechain replaces entry at (1-based) with change's result and recomputes
// every hash from there on, the links and the end line with them: a
// forgery that holds together.
func rechain(t *testing.T, lines [][]byte, at int, change func([]byte) []byte) [][]byte {
	t.Helper()
	out := append([][]byte(nil), lines[:at-1]...)
	head := receiptchain.Start()
	for i := 0; i < at-1; i++ {
		var e receiptchain.Entry
		if err := json.Unmarshal(lines[i], &e); err != nil {
			t.Fatal(err)
		}
		head = receiptchain.Head{Seq: e.Seq, Hash: e.Hash, Key: fmt.Sprintf("r%d", e.Seq)}
	}
	for i := at - 1; i < len(lines)-1; i++ {
		var e receiptchain.Entry
		if err := json.Unmarshal(lines[i], &e); err != nil {
			t.Fatal(err)
		}
		receipt := []byte(e.Receipt)
		if i == at-1 {
			receipt = change(receipt)
		}
		key := fmt.Sprintf("r%d", e.Seq)
		_, line, next, err := receiptchain.Next("org_a", head, "action.committed", receipt, key)
		if err != nil {
			t.Fatal(err)
		}
		out, head = append(out, line), next
	}
	end, err := receiptchain.EndLine("org_a", head)
	if err != nil {
		t.Fatal(err)
	}
	return append(out, end)
}

func entryHash(t *testing.T, line []byte) string {
	t.Helper()
	i := bytes.Index(line, []byte(`"hash":"`))
	return string(line[i+8 : i+8+64])
}

// reHash recomputes an entry line's hash after its content was changed.
func reHash(t *testing.T, line []byte) []byte {
	t.Helper()
	old := entryHash(t, line)
	var e receiptchain.Entry
	if err := json.Unmarshal(line, &e); err != nil {
		t.Fatal(err)
	}
	h, err := receiptchain.HashOf(e)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Replace(line, []byte(`"hash":"`+old), []byte(`"hash":"`+h), 1)
}

func TestCanonical(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{ "b": 1, "a": [true, null, "x"] }`, `{"a":[true,null,"x"],"b":1}`},
		{`{"n": [1.50, 1e21, 1E-7, -0, 100, 0.000001, 12345678901234567890]}`, `{"n":[1.5,1e+21,1e-7,0,100,0.000001,12345678901234567000]}`},
		{`"\u00e9\u2028<>&\u001f\t\/"`, "\"é\u2028<>&\\u001f\\t/\""},
		// Sorted by UTF-16 code units: U+E000 sorts after U+1F600 (a surrogate pair).
		{`{"\ue000":1,"\ud83d\ude00":2,"a":3}`, "{\"a\":3,\"\U0001F600\":2,\"\uE000\":1}"},
	} {
		got, err := receiptchain.Canonical([]byte(tc.in))
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if string(got) != tc.want {
			t.Errorf("Canonical(%s): got %s; want %s", tc.in, got, tc.want)
		}
	}
	for _, bad := range []string{`{"a":1,"a":2}`, `{"a":1} 2`, "\"\xff\""} {
		if _, err := receiptchain.Canonical([]byte(bad)); err == nil {
			t.Errorf("Canonical(%q): got no error; want one", bad)
		}
	}
}

// Next writes the entry around its canonical receipt directly; what it
// writes must be exactly what HashOf and Line compute by canonicalising the
// whole entry, whatever the names, keys and numbers hold.
func TestNextWritesWhatHashOfAndLineCompute(t *testing.T) {
	names := []string{"org_1", "", `o"r\g`, "tab\tnew\nline\x01", "é—牛乳🥛", "<&>\u2028\u2029", "bad\xffutf8", "\ue000\U0001F600"}
	receipts := []string{
		`{"idempotencyKey":"k","state":"pending"}`,
		`{ "b": 1, "a": [true, null, "x"], "n": [1.50, 1e21, 1E-7, -0, 100, 0.000001] }`,
		`{"durationMs":12.5,"arguments":{"y":2,"x":1.5},"text":"\u00e9\u001f<>&"}`,
	}
	for i, org := range names {
		for j, receipt := range receipts {
			key, event := names[(i+j+1)%len(names)], names[(i+2*j+3)%len(names)]
			for _, seq := range []int64{0, 1, 41, 1 << 40, 1<<53 + 1} {
				head := receiptchain.Head{Seq: seq, Hash: receiptchain.Genesis, Key: names[(i+j)%len(names)]}
				e, line, next, err := receiptchain.Next(org, head, event, []byte(receipt), key)
				if err != nil {
					t.Fatal(err)
				}
				want, err := receiptchain.HashOf(e)
				if err != nil {
					t.Fatal(err)
				}
				wantLine, err := receiptchain.Line(e)
				if err != nil {
					t.Fatal(err)
				}
				if e.Hash != want || next.Hash != want || !bytes.Equal(line, wantLine) {
					t.Fatalf("org %q, event %q, key %q, seq %d:\nhash %s, line %s\nwant %s, %s", org, event, key, seq+1, e.Hash, line, want, wantLine)
				}
			}
		}
	}
}

// BenchmarkNext is one receipt linked into its chain, as the receipt chain
// projection links every receipt change.
func BenchmarkNext(b *testing.B) {
	receipt := []byte(`{"actionId":"act_0190a1b2c3d4e5f60718293a4b5c6d7e","idempotencyKey":"bench-1-2","deviceId":"dev_0190a1b2c3d4e5f60718293a4b5c6d7e",` +
		`"state":"committed","actor":{"kind":"operator","id":"local"},"action":"key","arguments":{"key":"VOLUME_UP"},` +
		`"result":{"description":"pressed VOLUME_UP","changed":true,"foreground":"com.android.launcher3","screenOn":true,` +
		`"effect":{"state":"changed","screenBefore":"0123456789abcdef0123456789abcdef","screenAfter":"fedcba9876543210fedcba9876543210"}},` +
		`"frameBefore":{"frameId":"frm_0190a1b2c3d4e5f60718293a4b5c6d7e","screenHash":"0123456789abcdef0123456789abcdef","capturedAt":"2026-11-28T10:00:00.123456Z"},` +
		`"frameAfter":{"frameId":"frm_0190a1b2c3d4e5f60718293a4b5c6d7f","screenHash":"fedcba9876543210fedcba9876543210","capturedAt":"2026-11-28T10:00:00.125456Z"},` +
		`"timestamp":"2026-11-28T10:00:00.120000Z","startedAt":"2026-11-28T10:00:00.121000Z","finishedAt":"2026-11-28T10:00:00.126000Z","durationMs":5}`)
	head := receiptchain.Start()
	b.ReportAllocs()
	for b.Loop() {
		_, _, next, err := receiptchain.Next("org_0190a1b2c3d4e5f60718293a4b5c6d7e", head, "action.committed", receipt, "bench-1-2")
		if err != nil {
			b.Fatal(err)
		}
		head.Seq = next.Seq
	}
}
