package cluster

import (
	"bytes"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// FuzzReplyParts: any reply cut into parts and delivered in any order,
// with stray or malformed parts mixed in, either comes back whole and
// equal or is refused with errBadPart; the assembler never panics and
// never returns a reply other than the one sent.
func FuzzReplyParts(f *testing.F) {
	f.Add([]byte("hello, world"), 3, uint64(1), "", "")
	f.Add(bytes.Repeat([]byte("x"), 1000), 7, uint64(2), "2", "9")
	f.Add([]byte{}, 1, uint64(3), "-1", "0")
	f.Add([]byte("ab"), 1, uint64(4), "0", "129")
	f.Fuzz(func(t *testing.T, body []byte, size int, seed uint64, strayPart, strayParts string) {
		if size < 1 || size > 1<<16 {
			return
		}
		msgs := replyMsgs("_INBOX.f", body, size)
		if len(msgs) > maxParts {
			return // the holder never sends more than the caller takes
		}
		rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		rng.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
		var stray *nats.Msg
		if strayPart != "" || strayParts != "" {
			stray = nats.NewMsg("_INBOX.f")
			stray.Data = []byte("stray")
			stray.Header.Set(hdrPart, strayPart)
			stray.Header.Set(hdrParts, strayParts)
			at := rng.IntN(len(msgs) + 1)
			msgs = append(msgs[:at], append([]*nats.Msg{stray}, msgs[at:]...)...)
		}
		var a assembler
		for _, m := range msgs {
			got, done, err := a.add(m)
			if err != nil {
				if stray == nil {
					t.Fatalf("a reply sent whole in %d parts was refused: %v", len(msgs), err)
				}
				return // a stray part spoils the reply; refusing it is right
			}
			if done {
				if !bytes.Equal(got, body) {
					if stray != nil {
						// A stray part may complete a count no real part
						// matched; then the result must include it.
						if !bytes.Contains(got, []byte("stray")) {
							t.Fatalf("assembled %q from a reply of %q and a stray part", got, body)
						}
						return
					}
					t.Fatalf("assembled %q; sent %q", got, body)
				}
				return
			}
		}
		if stray == nil {
			t.Fatalf("%d parts of a %d-byte reply never completed it", len(msgs), len(body))
		}
	})
}

// FuzzVerifyCall: a call verifies only when its MAC is the secret's over
// exactly its subject, reply subject, call id, deadline, op and body, and
// its deadline is ahead; nothing a message carries makes verify panic.
func FuzzVerifyCall(f *testing.F) {
	f.Add("perform_action", "4102444800000", []byte(`{"cmd":{}}`), "", "2", "_INBOX.r", "0123456789abcdef0123456789abcdef", false)
	f.Add("observe_device", "1", []byte{}, "00", "2", "", "x", true)
	f.Add("", "x", []byte{0}, "zz", "1", "_INBOX.r", "", true)
	secret := []byte("cluster secret")
	now := time.UnixMilli(2_000_000_000_000)
	const subj = "pf.c.host.sim"
	f.Fuzz(func(t *testing.T, op, deadline string, body []byte, mac, version, reply, id string, forge bool) {
		m := nats.NewMsg(subj)
		m.Reply = reply
		m.Data = body
		m.Header.Set(hdrVersion, version)
		m.Header.Set(hdrOp, op)
		m.Header.Set(hdrCall, id)
		m.Header.Set(hdrDeadline, deadline)
		want := macOf(secret, kindCall, body, subj, reply, id, deadline, op)
		if forge {
			m.Header.Set(hdrMAC, mac)
		} else {
			m.Header.Set(hdrMAC, want)
		}
		c, err := verify(secret, m, now)
		if err != nil {
			return
		}
		ms, perr := strconv.ParseInt(deadline, 10, 64)
		switch {
		case version != wireVersion || reply == "":
			t.Fatalf("accepted version %q, reply %q", version, reply)
		case forge && !macMatches(mac, want):
			t.Fatalf("accepted a forged MAC %q", mac)
		case len(id) != callIDLen:
			t.Fatalf("accepted call id %q", id)
		case perr != nil || !now.Before(time.UnixMilli(ms)):
			t.Fatalf("accepted deadline %q at %v", deadline, now)
		case c.op != op || c.id != id || c.dl != deadline || !c.deadline.Equal(time.UnixMilli(ms)):
			t.Fatalf("verified %+v; sent %q, %q, %q", c, op, id, deadline)
		}
	})
}

// FuzzVerifyReply: a reply message passes only when it names the call
// and its MAC is the secret's over that call's id and deadline, its part
// headers and its body.
func FuzzVerifyReply(f *testing.F) {
	f.Add([]byte("reply"), "", "", "", false, false)
	f.Add([]byte("x"), "0", "2", "00", true, false)
	f.Add([]byte{}, "1", "2", "", false, true)
	secret := []byte("cluster secret")
	const id, dl = "0123456789abcdef0123456789abcdef", "4102444800000"
	f.Fuzz(func(t *testing.T, body []byte, part, parts, mac string, forge, otherCall bool) {
		m := nats.NewMsg("_INBOX.r")
		m.Data = body
		if part != "" {
			m.Header.Set(hdrPart, part)
		}
		if parts != "" {
			m.Header.Set(hdrParts, parts)
		}
		c := call{id: id, dl: dl}
		if otherCall {
			c.id = "fedcba9876543210fedcba9876543210"
		}
		signReply(secret, c, []*nats.Msg{m})
		signed := m.Header.Get(hdrMAC)
		if forge {
			m.Header.Set(hdrMAC, mac)
		}
		err := verifyReply(secret, m, id, dl)
		if err == nil && (otherCall || forge && !macMatches(mac, signed)) {
			t.Fatalf("accepted a reply to call %q with MAC %q", c.id, mac)
		}
		if err != nil && !otherCall && !forge {
			t.Fatalf("refused the holder's own reply: %v", err)
		}
	})
}
