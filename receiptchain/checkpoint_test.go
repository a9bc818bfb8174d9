package receiptchain_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"phonefleet/receiptchain"
)

// signedExport is export's chain of n entries for org with a checkpoint
// after each entry listed in at, signed by a fresh key; it returns the
// lines, the published keys and the checkpoints.
func signedExport(t *testing.T, org string, n int, at ...int64) ([][]byte, *receiptchain.KeySet, []receiptchain.Checkpoint) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	from := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	keys := &receiptchain.KeySet{Keys: []receiptchain.PublishedKey{{KeyID: "rsk_1", Algorithm: receiptchain.Algorithm,
		PublicKey: base64.RawURLEncoding.EncodeToString(pub), ValidFrom: from.Format(receiptchain.TimeLayout)}}}
	lines := export(t, org, n)
	var out [][]byte
	var cps []receiptchain.Checkpoint
	for _, l := range lines {
		out = append(out, l)
		var e receiptchain.Entry
		json.Unmarshal(l, &e)
		for _, s := range at {
			if e.Seq == s {
				c, err := receiptchain.Sign(priv, "rsk_1", org, receiptchain.Head{Seq: e.Seq, Hash: e.Hash}, from.Add(time.Duration(s)*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				line, err := receiptchain.CheckpointLine(c)
				if err != nil {
					t.Fatal(err)
				}
				out, cps = append(out, line), append(cps, c)
			}
		}
	}
	return out, keys, cps
}

func TestCheckpointsInAnExport(t *testing.T) {
	lines, keys, cps := signedExport(t, "org_a", 5, 2, 5)
	rep, p := verify(t, join(lines), receiptchain.Options{Keys: keys})
	if p != nil {
		t.Fatalf("got problem %v; want none", p)
	}
	if rep.Entries != 5 || rep.Checkpoints != 2 || !rep.SignaturesChecked || rep.Latest.Entries != 5 {
		t.Errorf("got report %+v; want 5 entries, 2 checkpoints checked, the latest of entry 5", rep)
	}
	// Without keys the checkpoints are checked against the chain only.
	if rep, p := verify(t, join(lines), receiptchain.Options{}); p != nil || rep.SignaturesChecked || rep.Checkpoints != 2 {
		t.Errorf("without keys: got %+v, %v; want 2 checkpoints, signatures not checked", rep, p)
	}

	otherKeys := func() *receiptchain.KeySet {
		_, k, _ := signedExport(t, "org_a", 0)
		return k
	}()
	for _, tc := range []struct {
		name   string
		lines  [][]byte
		opt    receiptchain.Options
		kind   string
		detail string
	}{
		{name: "signature altered", kind: receiptchain.BadSignature, detail: "does not verify", opt: receiptchain.Options{Keys: keys},
			lines: edit(lines, 2, func(l []byte) []byte { return bytes.Replace(l, []byte(cps[0].Signature[:4]), []byte("AAAA"), 1) })},
		{name: "signed by an unpublished key", kind: receiptchain.BadSignature, detail: "does not verify", opt: receiptchain.Options{Keys: otherKeys},
			lines: lines},
		{name: "a checkpoint moved before its entry", kind: receiptchain.Removed, detail: "counts 2 entries, but only 1 precede it",
			lines: [][]byte{lines[0], lines[2], lines[1], lines[3], lines[4], lines[5], lines[6], lines[7]}},
		{name: "a checkpoint moved after a later entry", kind: receiptchain.Reordered, detail: "stands after entry 3",
			lines: [][]byte{lines[0], lines[1], lines[3], lines[2], lines[4], lines[5], lines[6], lines[7]}},
		{name: "the entry it signs rewritten and re-hashed", kind: receiptchain.Forged, detail: "the chain was rewritten",
			lines: append(rehashed(t, "org_a", 2), lines[2:]...)},
		{name: "tail cut with a checkpoint left behind", kind: receiptchain.Removed, detail: "entries 4 to 5 were removed",
			lines: append(append([][]byte{}, lines[:4]...), lines[6], endOf(t, lines[:4]))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, p := verify(t, join(tc.lines), tc.opt)
			if p == nil || p.Kind != tc.kind || !strings.Contains(p.Detail, tc.detail) {
				t.Errorf("got %v; want %s, %q", p, tc.kind, tc.detail)
			}
		})
	}
}

// TestHeldCheckpoints: an export cut after entry 3 with its end line
// rewritten holds together on its own; a checkpoint of entry 5 held apart
// shows the cut, and one whose entry hashes otherwise shows a rewrite.
func TestHeldCheckpoints(t *testing.T) {
	lines, keys, cps := signedExport(t, "org_a", 5, 2, 5)
	cut := append(append([][]byte{}, lines[:4]...), endOf(t, lines[:4]))
	if _, p := verify(t, join(cut), receiptchain.Options{Keys: keys}); p != nil {
		t.Fatalf("the cut export alone: got %v; want none (nothing in it shows the cut)", p)
	}
	_, p := verify(t, join(cut), receiptchain.Options{Keys: keys, Checkpoints: cps[1:]})
	if p == nil || p.Kind != receiptchain.Removed || !strings.Contains(p.Detail, "entries 4 to 5 were removed from its end") {
		t.Errorf("cut export with the held checkpoint of entry 5: got %v; want removed from its end", p)
	}
	if rep, p := verify(t, join(lines), receiptchain.Options{Keys: keys, Checkpoints: cps}); p != nil || rep.Held != 2 {
		t.Errorf("whole export with both held: got %+v, %v; want 2 held and no problem", rep, p)
	}
	forged := append(rehashed(t, "org_a", 2), lines[2:]...)
	if _, p := verify(t, join(forged), receiptchain.Options{Checkpoints: cps[:1]}); p == nil || p.Kind != receiptchain.Forged {
		t.Errorf("rewritten chain against a held checkpoint: got %v; want %s", p, receiptchain.Forged)
	}
	foreign := cps[1]
	foreign.OrgID = "org_b"
	if _, p := verify(t, join(lines), receiptchain.Options{Checkpoints: []receiptchain.Checkpoint{foreign}}); p == nil || p.Kind != receiptchain.Foreign {
		t.Errorf("a held checkpoint of another organisation: got %v; want %s", p, receiptchain.Foreign)
	}
	bad := cps[0]
	bad.HeadHash = strings.Repeat("1", 64)
	if _, p := verify(t, join(lines), receiptchain.Options{Keys: keys, Checkpoints: []receiptchain.Checkpoint{bad}}); p == nil || p.Kind != receiptchain.BadSignature {
		t.Errorf("a held checkpoint altered: got %v; want %s", p, receiptchain.BadSignature)
	}
}

func edit(lines [][]byte, i int, f func([]byte) []byte) [][]byte {
	out := append([][]byte{}, lines...)
	out[i] = f(bytes.Clone(out[i]))
	return out
}

// rehashed is a chain of n entries for org whose receipts differ from
// export's, each hash recomputed: it holds together on its own.
func rehashed(t *testing.T, org string, n int) [][]byte {
	t.Helper()
	head := receiptchain.Start()
	var out [][]byte
	for i := 1; i <= n; i++ {
		key := "r" + string(rune('0'+i))
		_, line, next, err := receiptchain.Next(org, head, "action.committed", []byte(`{"idempotencyKey":"`+key+`","state":"failed"}`), key)
		if err != nil {
			t.Fatal(err)
		}
		head, out = next, append(out, line)
	}
	return out
}

// endOf is the end line for the entries among lines.
func endOf(t *testing.T, lines [][]byte) []byte {
	t.Helper()
	head := receiptchain.Start()
	var org string
	for _, l := range lines {
		var e receiptchain.Entry
		json.Unmarshal(l, &e)
		if e.Seq > 0 {
			head, org = receiptchain.Head{Seq: e.Seq, Hash: e.Hash}, e.OrgID
		}
	}
	end, err := receiptchain.EndLine(org, head)
	if err != nil {
		t.Fatal(err)
	}
	return end
}
