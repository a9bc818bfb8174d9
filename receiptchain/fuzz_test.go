package receiptchain_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"phonefleet/receiptchain"
)

// FuzzCanonical holds the RFC 8785 form to its promises for any text: it
// is refused or it is valid JSON with the same value, and canonical again
// unchanged (so a hash over it does not depend on who serialised it).
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{
		``, `null`, `{}`, `[]`, `1`, `-0`, `1e400`, `0.1`, `1.50`, `"\u00e9"`, `"\ud800"`,
		`{"b":1,"a":[true,false,null]}`, `{"a":1,"a":2}`, `{"\u20ac":1,"\ud83d\ude00":2,"z":3}`,
		`[1e21,1e-7,123456789012345678901234567890]`, `{"a":1} x`, "\"\xff\"", `[1,]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		canon, err := receiptchain.Canonical(data)
		if err != nil {
			return
		}
		if !json.Valid(canon) {
			t.Fatalf("canonical form of %q is not JSON: %q", data, canon)
		}
		again, err := receiptchain.Canonical(canon)
		if err != nil || !bytes.Equal(again, canon) {
			t.Fatalf("canonical form of %q is not canonical: %q then %q (%v)", data, canon, again, err)
		}
		var a, b any
		if err := json.Unmarshal(data, &a); err != nil {
			t.Fatalf("%q has a canonical form but does not decode: %v", data, err)
		}
		if err := json.Unmarshal(canon, &b); err != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("canonical form %q of %q has another value (%v)", canon, data, err)
		}
	})
}

// FuzzParseHead: a head is refused or reads back the same from the form
// `receipts verify` prints (SEQ:HASH or the hash alone).
func FuzzParseHead(f *testing.F) {
	h := strings.Repeat("ab", 32)
	for _, s := range []string{"", h, "3:" + h, "0:" + h, "-1:" + h, ":" + h, "3:", strings.ToUpper(h), "3:" + h + ":", "+3:" + h, "03:" + h} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := receiptchain.ParseHead(s)
		if err != nil {
			return
		}
		if s == "" {
			if got != (receiptchain.ExpectedHead{}) {
				t.Fatalf("empty head read as %+v", got)
			}
			return
		}
		if got.Seq < 0 || len(got.Hash) != 64 || strings.ToLower(got.Hash) != got.Hash {
			t.Fatalf("%q read as %+v", s, got)
		}
		printed := got.Hash
		if got.Seq > 0 {
			printed = fmt.Sprintf("%d:%s", got.Seq, got.Hash)
		}
		back, err := receiptchain.ParseHead(printed)
		if err != nil || back != got {
			t.Fatalf("%q read as %+v, printed %q, read back as %+v (%v)", s, got, printed, back, err)
		}
	})
}

// FuzzVerify builds a genuine export from fuzzed receipts, then changes
// one byte of it. The genuine export verifies, to its own head; any
// change of a byte (but the last newline) is refused with a *Problem,
// never accepted, never a panic; and a wholly arbitrary export is either
// a *Problem or a report whose head verifies the same bytes again.
func FuzzVerify(f *testing.F) {
	f.Add("org_a", `{"idempotencyKey":"k1","state":"committed"}`, uint8(3), uint16(10), byte('x'), []byte("{}\n"))
	f.Add("org_b", `{"idempotencyKey":"k\"2","n":1.50}`, uint8(1), uint16(0), byte('\n'), []byte(`{"end":{"orgId":"o","entries":0,"headHash":"`+receiptchain.Genesis+`"}}`))
	f.Add("", `[]`, uint8(0), uint16(5), byte('0'), []byte(`{"checkpoint":{}}`))
	f.Fuzz(func(t *testing.T, org, receipt string, n uint8, at uint16, b byte, arbitrary []byte) {
		checkArbitrary(t, arbitrary)

		head := receiptchain.Start()
		var buf bytes.Buffer
		// The service links a receipt under its own idempotency key.
		var k struct {
			IdempotencyKey string `json:"idempotencyKey"`
		}
		_ = json.Unmarshal([]byte(receipt), &k)
		key := k.IdempotencyKey
		for i := 0; i < int(n%6); i++ {
			_, line, next, err := receiptchain.Next(org, head, "action.committed", []byte(receipt), key)
			if err != nil {
				return // not JSON: the service never links it
			}
			buf.Write(line)
			buf.WriteByte('\n')
			head = next
		}
		end, err := receiptchain.EndLine(org, head)
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(end)
		buf.WriteByte('\n')
		genuine := buf.Bytes()
		exp := receiptchain.ExpectedHead{Seq: head.Seq, Hash: head.Hash}
		if head.Seq == 0 {
			exp = receiptchain.ExpectedHead{}
		}
		rep, err := receiptchain.Verify(bytes.NewReader(genuine), receiptchain.Options{Head: exp})
		if err != nil {
			t.Fatalf("genuine export of %d entries refused: %v\n%s", head.Seq, err, genuine)
		}
		if rep.Entries != head.Seq || rep.HeadHash != head.Hash {
			t.Fatalf("genuine export reported %d entries, head %s; want %d, %s", rep.Entries, rep.HeadHash, head.Seq, head.Hash)
		}

		i := int(at) % (len(genuine) - 1) // never the final newline
		if genuine[i] == b {
			return
		}
		changed := bytes.Clone(genuine)
		changed[i] = b
		_, err = receiptchain.Verify(bytes.NewReader(changed), receiptchain.Options{Head: exp})
		var p *receiptchain.Problem
		if !errors.As(err, &p) {
			t.Fatalf("byte %d changed from %q to %q: got %v; want a problem\n%s", i, genuine[i], b, err, changed)
		}
	})
}

func checkArbitrary(t *testing.T, data []byte) {
	t.Helper()
	rep, err := receiptchain.Verify(bytes.NewReader(data), receiptchain.Options{})
	if err != nil {
		var p *receiptchain.Problem
		if !errors.As(err, &p) {
			t.Fatalf("%q: got %v; want a *Problem (the reader never fails)", data, err)
		}
		if p.Line < 0 || p.Kind == "" {
			t.Fatalf("%q: problem without a line or kind: %+v", data, p)
		}
		return
	}
	if rep.Entries < 0 || len(rep.HeadHash) != 64 {
		t.Fatalf("%q: accepted with report %+v", data, rep)
	}
	if rep.Entries > 0 {
		opt := receiptchain.Options{Head: receiptchain.ExpectedHead{Seq: rep.Entries, Hash: rep.HeadHash}}
		if _, err := receiptchain.Verify(bytes.NewReader(data), opt); err != nil {
			t.Fatalf("%q: accepted, but not to its own head %d:%s: %v", data, rep.Entries, rep.HeadHash, err)
		}
	}
}
