package cluster

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkSignAndVerify is what authentication adds to one forwarded
// call: the caller's request MAC and the holder's check of it, the
// holder's reply MAC and the caller's check of that (issue 28 bounds
// forwarding's whole cost at +1 ms p50).
func BenchmarkSignAndVerify(b *testing.B) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	for _, size := range []int{1 << 10, 512 << 10} {
		b.Run(fmt.Sprintf("reply of %d KiB", size>>10), func(b *testing.B) {
			req, reply := make([]byte, 512), make([]byte, size)
			b.SetBytes(int64(len(req) + len(reply)))
			var seen seenCalls
			for b.Loop() {
				now := time.Now()
				m := request(secret, "pf.c.host.sim", "_INBOX.x", newCallID(), "observe_device", now.Add(time.Minute), req)
				c, err := verify(secret, m, now)
				if err != nil || !seen.first(c.id, c.deadline, now) {
					b.Fatal(err)
				}
				msgs := replyMsgs("_INBOX.x", reply, 1<<20-headerRoom)
				signReply(secret, c, msgs)
				if err := verifyReply(secret, msgs[0], c.id, c.dl); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
