package receiptchain_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"phonefleet/receiptchain"
)

// canonicalSeeds are texts at the edges of the grammar and of the
// canonical form: white space, escapes (surrogate pairs whole, alone, or
// reversed), names needing UTF-16 order, duplicates only seen decoded,
// numbers at the borders of the fast path and of exponent form, and
// malformed texts of every kind.
var canonicalSeeds = []string{
	``, ` `, `null`, ` true `, `false`, `tru`, `nul`, `truex`, `{}`, `[]`, `[ ]`, `{ }`, `[[[]]]`,
	`1`, `-0`, `-0.0`, `0`, `01`, `-`, `1.`, `.5`, `1e`, `1e+`, `1E-7`, `1e400`, `-1e400`, `1e-400`, `0.1`, `1.50`,
	`123456789012345`, `1234567890123456`, `-999999999999999`, `9007199254740993`, `1e21`, `1e20`, `0.000001`, `0.0000001`,
	`[1e21,1e-7,123456789012345678901234567890]`, `[1,]`, `[,1]`, `[1 2]`, `[1`, `{"a"}`, `{"a" 1}`, `{"a":}`, `{"a":1,}`, `{,}`,
	`{1:2}`, `{"a":1`, `{"a":1} x`, `{"a":1} 2`, `{"a":1}{}`, `"a""b"`,
	`""`, `"\u00e9"`, `"\ud800"`, `"\udc00\ud800"`, `"\ud83d\ude00"`, `"\ud83d\u0041"`, `"\ud83d\\"`, `"\ud83d"`, `"\u12"`, `"\x"`,
	`"\/\b\f\n\r\t\"\\"`, `"\u001f\u007f\u2028"`, "\"\x01\"", "\"\x7f\"", "\"\xff\"", "\"é—牛乳🥛\"", `"abc`, `"\`,
	`{"b":1,"a":[true,false,null]}`, `{"a":1,"a":2}`, `{"a":1,"\u0061":2}`, `{"\ud800":1,"\ufffd":2}`,
	`{"\u20ac":1,"\ud83d\ude00":2,"z":3}`, `{"\ue000":1,"\ud83d\ude00":2,"a":3}`, `{"b":{"d":1,"c":2},"a":{"f":[{"h":1,"g":2}],"e":0}}`,
	`{"a\"":1,"a":2,"a\\":3,"a\n":4}`, "{\"\U0001F600\":1,\"\uFFFF\":2,\"\uE000\":3,\"\u00ff\":4}",
	" \t\r\n{ \"x\" : [ 1 , \"y\" ] } \n", "\ufeff{}",
}

// FuzzCanonicalMatchesDecoder holds Canonical to the token-decoder
// implementation it replaced: for every text the same bytes, or both
// refuse it. The receipt chain's hashes depend on these bytes.
func FuzzCanonicalMatchesDecoder(f *testing.F) {
	for _, s := range canonicalSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := receiptchain.Canonical(data)
		want, wantErr := decoderCanonical(data)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("Canonical(%q): error %v; the decoder's error %v", data, err, wantErr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("Canonical(%q) = %q; the decoder's %q", data, got, want)
		}
	})
}

// TestCanonicalSeedsMatchDecoder runs the seeds in every test run, named.
func TestCanonicalSeedsMatchDecoder(t *testing.T) {
	for _, s := range canonicalSeeds {
		got, err := receiptchain.Canonical([]byte(s))
		want, wantErr := decoderCanonical([]byte(s))
		if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
			t.Errorf("Canonical(%q) = %q, %v; the decoder's %q, %v", s, got, err, want, wantErr)
		}
	}
}

// benchReceipt is a committed action's receipt as the receipts surface
// serialises it (members in struct order, not sorted).
var benchReceipt = []byte(`{"actionId":"act_0190a1b2c3d4e5f60718293a4b5c6d7e","idempotencyKey":"bench-1-2","deviceId":"dev_0190a1b2c3d4e5f60718293a4b5c6d7e",` +
	`"state":"committed","actor":{"kind":"operator","id":"local"},"action":"key","arguments":{"key":"VOLUME_UP"},` +
	`"result":{"description":"pressed VOLUME_UP","changed":true,"foreground":"com.android.launcher3","screenOn":true,` +
	`"effect":{"state":"changed","screenBefore":"0123456789abcdef0123456789abcdef","screenAfter":"fedcba9876543210fedcba9876543210"}},` +
	`"frameBefore":{"frameId":"frm_0190a1b2c3d4e5f60718293a4b5c6d7e","screenHash":"0123456789abcdef0123456789abcdef","capturedAt":"2026-11-28T10:00:00.123456Z"},` +
	`"frameAfter":{"frameId":"frm_0190a1b2c3d4e5f60718293a4b5c6d7f","screenHash":"fedcba9876543210fedcba9876543210","capturedAt":"2026-11-28T10:00:00.125456Z"},` +
	`"timestamp":"2026-11-28T10:00:00.120000Z","startedAt":"2026-11-28T10:00:00.121000Z","finishedAt":"2026-11-28T10:00:00.126000Z","durationMs":5.25,` +
	`"note":"caf\u00e9 \"quoted\"\n"}`)

func BenchmarkCanonical(b *testing.B) {
	for _, impl := range []struct {
		name string
		fn   func([]byte) ([]byte, error)
	}{{"bytes", receiptchain.Canonical}, {"decoder", decoderCanonical}} {
		b.Run(impl.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(benchReceipt)))
			for b.Loop() {
				if _, err := impl.fn(benchReceipt); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestChainHashesMatchDecoder: an entry's hash is the SHA-256 of the
// decoder implementation's canonical form of its body, so chains linked
// before the byte-level canonicaliser verify after it, and the reverse.
func TestChainHashesMatchDecoder(t *testing.T) {
	receipts := [][]byte{benchReceipt, []byte(`{ "b": 1, "a": [true, null, "x"], "n": [1.50, 1e21, 1E-7, -0, 100, 0.000001] }`)}
	head := receiptchain.Start()
	for i, receipt := range receipts {
		e, line, next, err := receiptchain.Next("org_1", head, "action.committed", receipt, fmt.Sprintf("k%d", i))
		if err != nil {
			t.Fatal(err)
		}
		raw, err := json.Marshal(map[string]any{"v": e.V, "orgId": e.OrgID, "seq": e.Seq, "event": e.Event,
			"receipt": json.RawMessage(receipt), "prevKey": e.PrevKey, "prevHash": e.PrevHash})
		if err != nil {
			t.Fatal(err)
		}
		canon, err := decoderCanonical(raw)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(canon)
		if want := hex.EncodeToString(sum[:]); e.Hash != want {
			t.Fatalf("entry %d: hash %s; the decoder's canonical form hashes to %s", i, e.Hash, want)
		}
		wantLine, err := decoderCanonical(line)
		if err != nil || !bytes.Equal(line, wantLine) {
			t.Fatalf("entry %d: line %s is not the decoder's canonical form %s (%v)", i, line, wantLine, err)
		}
		head = next
	}
}

// Arrays and objects nest as deep as encoding/json lets a request body
// nest (10,000), and no deeper: an exported chain is untrusted input to
// the verifier, and a text nested a million deep is refused at once
// instead of growing the stack by a frame a level. (The token decoder
// Canonical replaced had no limit of its own; below it they agree.)
func TestCanonicalRefusesNestingDeeperThanEncodingJSON(t *testing.T) {
	nest := func(depth int, open, close string) []byte {
		return []byte(strings.Repeat(open, depth) + "1" + strings.Repeat(close, depth))
	}
	for _, c := range []struct{ open, close string }{{"[", "]"}, {`{"a":`, "}"}} {
		deepest := nest(10000, c.open, c.close)
		var v any
		if err := json.Unmarshal(deepest, &v); err != nil {
			t.Fatalf("encoding/json refuses %d levels of %s: %v", 10000, c.open, err)
		}
		got, err := receiptchain.Canonical(deepest)
		want, wantErr := decoderCanonical(deepest)
		if err != nil || wantErr != nil || !bytes.Equal(got, want) {
			t.Fatalf("10,000 levels of %s: %v (the decoder: %v); want the decoder's form", c.open, err, wantErr)
		}
		if err := json.Unmarshal(nest(10001, c.open, c.close), &v); err == nil {
			t.Fatalf("encoding/json accepts 10,001 levels of %s", c.open)
		}
		for _, depth := range []int{10001, 1_000_000} {
			if _, err := receiptchain.Canonical(nest(depth, c.open, c.close)); err == nil || !strings.Contains(err.Error(), "exceeded max depth") {
				t.Fatalf("%d levels of %s: error %v; want exceeded max depth", depth, c.open, err)
			}
		}
	}
}
