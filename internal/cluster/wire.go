package cluster

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// The headers of a forwarded call. A request carries the wire version,
// the call (op), its id, the caller's deadline in Unix milliseconds and
// its MAC; every reply message carries the id of the call it answers and
// its own MAC, and a reply sent in parts its part's index and count.
const (
	hdrVersion  = "Pf-V"
	hdrOp       = "Pf-Op"
	hdrCall     = "Pf-Call"
	hdrDeadline = "Pf-Deadline"
	hdrMAC      = "Pf-Mac"
	hdrPart     = "Pf-Part"
	hdrParts    = "Pf-Parts"

	// wireVersion is the version of the request format this build speaks.
	// Version 1 signed (op, deadline, body) of requests only; version 2
	// binds the subject, the reply subject and the call id too, and signs
	// the replies.
	wireVersion = "2"
	// queueGroup is the queue group every holder subscribes in: were two
	// processes ever to subscribe one host at once (one letting go as the
	// other takes it), a call still reaches only one of them.
	queueGroup = "holder"
	// callIDLen is the length of a call id: 16 random bytes, in hex.
	callIDLen = 32
)

// The first field of every MAC says what the message is, so that a
// request's MAC can never pass for a reply's, or the other way round.
var (
	kindCall  = []byte("phonefleet cluster call v2")
	kindReply = []byte("phonefleet cluster reply v2")
)

// subject is where calls for host go in cluster clusterID.
func subject(clusterID, host string) string {
	return "pf." + clusterID + ".host." + host
}

// validTokens reports whether s can be one or more tokens of a subject:
// non-empty dot-separated parts with no wildcard and no white space.
func validTokens(s string) bool {
	if s == "" {
		return false
	}
	for part := range strings.SplitSeq(s, ".") {
		if part == "" || strings.ContainsAny(part, "*>") {
			return false
		}
		for _, r := range part {
			if r <= ' ' || r == 0x7f {
				return false
			}
		}
	}
	return true
}

// macOf is HMAC-SHA-256 under secret of kind and fields, each preceded
// by its length (so no two lists of fields give the same bytes), then the
// body, hex-encoded. One HMAC per message: the body, a screenshot in a
// reply, is hashed once and never copied.
func macOf(secret, kind []byte, body []byte, fields ...string) string {
	m := hmac.New(sha256.New, secret)
	writeField(m, kind)
	for _, f := range fields {
		writeField(m, []byte(f))
	}
	writeField(m, body)
	return hex.EncodeToString(m.Sum(nil))
}

func writeField(h hash.Hash, b []byte) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(b)))
	h.Write(n[:])
	h.Write(b)
}

// macMatches reports whether sent, as read from a header, is want.
func macMatches(sent, want string) bool {
	got, err := hex.DecodeString(sent)
	w, _ := hex.DecodeString(want)
	return err == nil && hmac.Equal(got, w)
}

// newCallID returns a fresh call id.
func newCallID() string {
	var b [callIDLen / 2]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// call is a request as the holder reads it once verified.
type call struct {
	// id is the caller's id of the call, which its reply names.
	id string
	op string
	// deadline is the caller's; dl is it as sent (Unix milliseconds),
	// which the reply's MAC covers.
	deadline time.Time
	dl       string
}

// request builds the message of the call id, answered on reply.
func request(secret []byte, subj, reply, id, op string, deadline time.Time, body []byte) *nats.Msg {
	dl := strconv.FormatInt(deadline.UnixMilli(), 10)
	m := nats.NewMsg(subj)
	m.Reply = reply
	m.Data = body
	m.Header.Set(hdrVersion, wireVersion)
	m.Header.Set(hdrOp, op)
	m.Header.Set(hdrCall, id)
	m.Header.Set(hdrDeadline, dl)
	m.Header.Set(hdrMAC, macOf(secret, kindCall, body, m.Subject, reply, id, dl, op))
	return m
}

// Why a holder refuses a call, or a caller a reply. The sender gets no
// answer (a refused call times out, a refused reply is not waited on), so
// no client of the bus learns anything by trying.
var (
	errVersion  = errors.New("unknown wire version")
	errMAC      = errors.New("bad MAC")
	errExpired  = errors.New("past its deadline")
	errNoReply  = errors.New("no reply subject")
	errReplayed = errors.New("a call id already seen")
	errCallID   = errors.New("not the call waited for")
)

// verify checks a received call: the version this build speaks, a reply
// subject, a MAC under secret over the subject it arrived on, its reply
// subject, id, deadline, op and body, and a deadline after now. Whether
// its id was seen before is the node's to check (seenCalls).
func verify(secret []byte, m *nats.Msg, now time.Time) (call, error) {
	if v := m.Header.Get(hdrVersion); v != wireVersion {
		return call{}, fmt.Errorf("%w %.8q", errVersion, v)
	}
	if m.Reply == "" {
		return call{}, errNoReply
	}
	c := call{id: m.Header.Get(hdrCall), op: m.Header.Get(hdrOp), dl: m.Header.Get(hdrDeadline)}
	if !macMatches(m.Header.Get(hdrMAC), macOf(secret, kindCall, m.Data, m.Subject, m.Reply, c.id, c.dl, c.op)) {
		return call{}, errMAC
	}
	// Authentic from here on: what is wrong now is a bug on the sender,
	// not an attack, and may be named.
	if len(c.id) != callIDLen {
		return call{}, fmt.Errorf("%w: call id %q", errCallID, c.id)
	}
	ms, err := strconv.ParseInt(c.dl, 10, 64)
	if err != nil {
		return call{}, fmt.Errorf("%w: unreadable deadline %q", errExpired, c.dl)
	}
	c.deadline = time.UnixMilli(ms)
	if !now.Before(c.deadline) {
		return call{}, errExpired
	}
	return c, nil
}

// signReply gives each message of the reply to c its call id and MAC.
// A reply sent whole is signed as part 0 of 1.
func signReply(secret []byte, c call, msgs []*nats.Msg) {
	for _, m := range msgs {
		if m.Header == nil {
			m.Header = nats.Header{}
		}
		part, parts := partOf(m)
		m.Header.Set(hdrCall, c.id)
		m.Header.Set(hdrMAC, macOf(secret, kindReply, m.Data, c.id, c.dl, part, parts))
	}
}

// partOf is the part index and count a reply message's MAC covers: its
// headers', or 0 of 1 for a reply sent whole.
func partOf(m *nats.Msg) (part, parts string) {
	part, parts = m.Header.Get(hdrPart), m.Header.Get(hdrParts)
	if part == "" && parts == "" {
		return "0", "1"
	}
	return part, parts
}

// verifyReply checks that m answers the call id with deadline dl (as
// sent): it names that call, and its MAC under secret covers the call's
// id and deadline, its part's index and count, and its body.
func verifyReply(secret []byte, m *nats.Msg, id, dl string) error {
	if got := m.Header.Get(hdrCall); got != id {
		return errCallID
	}
	part, parts := partOf(m)
	if !macMatches(m.Header.Get(hdrMAC), macOf(secret, kindReply, m.Data, id, dl, part, parts)) {
		return errMAC
	}
	return nil
}

// seenSweepEvery is how often seenCalls forgets the ids of calls past
// their deadline.
const seenSweepEvery = 10 * time.Second

// seenCalls remembers the id of every call a holder accepted until that
// call's deadline: a call arriving again within it is a replay (after it,
// the deadline check refuses it anyway, on the same clock). Memory is one
// entry per call accepted within the longest deadline, swept every
// seenSweepEvery.
type seenCalls struct {
	mu        sync.Mutex
	ids       map[string]time.Time
	nextSweep time.Time
}

// first records id (deadline being its call's) and reports whether it
// was not seen before.
func (s *seenCalls) first(id string, deadline, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ids == nil {
		s.ids = map[string]time.Time{}
	}
	if !now.Before(s.nextSweep) {
		for k, dl := range s.ids {
			if !now.Before(dl) {
				delete(s.ids, k)
			}
		}
		s.nextSweep = now.Add(seenSweepEvery)
	}
	if _, ok := s.ids[id]; ok {
		return false
	}
	s.ids[id] = deadline
	return true
}
