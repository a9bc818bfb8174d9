package cluster

import (
	"bytes"
	"errors"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
)

func TestRepliesAreCutAndReassembledInAnyOrder(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789"), 1000) // 10,000 bytes
	msgs := replyMsgs("_INBOX.x", body, 3000)
	if len(msgs) != 4 {
		t.Fatalf("got %d messages; want 4 parts of at most 3000 bytes", len(msgs))
	}
	for i, m := range msgs {
		if len(m.Data) > 3000 || m.Subject != "_INBOX.x" || m.Header.Get(hdrPart) != strconv.Itoa(i) || m.Header.Get(hdrParts) != "4" {
			t.Fatalf("part %d: %d bytes to %s, headers %v", i, len(m.Data), m.Subject, m.Header)
		}
	}
	var a assembler
	for k, i := range []int{2, 0, 3, 1} {
		got, done, err := a.add(msgs[i])
		if err != nil || done != (k == 3) {
			t.Fatalf("adding part %d: done %v, %v", i, done, err)
		}
		if done && !bytes.Equal(got, body) {
			t.Fatalf("reassembled %d bytes; want the %d sent, equal", len(got), len(body))
		}
	}

	// A reply that fits goes whole, without part headers.
	small := replyMsgs("_INBOX.x", []byte("small"), 3000)
	if len(small) != 1 || small[0].Header != nil {
		t.Fatalf("a small reply: %d messages, headers %v; want one, none", len(small), small[0].Header)
	}
	var b assembler
	if got, done, err := b.add(small[0]); err != nil || !done || string(got) != "small" {
		t.Fatalf("a whole reply: got %q, %v, %v", got, done, err)
	}
}

func TestAMalformedReplyIsRefused(t *testing.T) {
	part := func(i, n string) *nats.Msg {
		m := nats.NewMsg("_INBOX.x")
		m.Data = []byte("p")
		m.Header.Set(hdrPart, i)
		m.Header.Set(hdrParts, n)
		return m
	}
	for name, msgs := range map[string][]*nats.Msg{
		"a count that is no number": {part("0", "two")},
		"an index out of range":     {part("2", "2")},
		"a negative index":          {part("-1", "2")},
		"too many parts":            {part("0", strconv.Itoa(maxParts+1))},
		"the same part twice":       {part("0", "3"), part("0", "3")},
		"the count changing":        {part("0", "3"), part("1", "4")},
		"a whole reply amid parts":  {part("0", "2"), {Subject: "_INBOX.x", Data: []byte("whole")}},
	} {
		var a assembler
		var err error
		for _, m := range msgs {
			if _, _, err = a.add(m); err != nil {
				break
			}
		}
		if !errors.Is(err, errBadPart) {
			t.Errorf("%s: got %v; want errBadPart", name, err)
		}
	}
}
