package cluster

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// The headers of a forwarded call. A request carries the wire version,
// the call (op), the caller's deadline in Unix milliseconds and the
// signature; a reply sent in parts carries its part's index and count.
const (
	hdrVersion  = "Pf-V"
	hdrOp       = "Pf-Op"
	hdrDeadline = "Pf-Deadline"
	hdrSig      = "Pf-Sig"
	hdrPart     = "Pf-Part"
	hdrParts    = "Pf-Parts"

	// wireVersion is the version of the request format this build speaks.
	wireVersion = "1"
	// queueGroup is the queue group every holder subscribes in: were two
	// processes ever to subscribe one host at once (one letting go as the
	// other takes it), a call still reaches only one of them.
	queueGroup = "holder"
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

// sign is the signature of a request: HMAC-SHA-256 under secret of op,
// the deadline as sent and the body, hex-encoded.
func sign(secret []byte, op, deadline string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(op))
	m.Write([]byte{'\n'})
	m.Write([]byte(deadline))
	m.Write([]byte{'\n'})
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// request builds the message of a call.
func request(secret []byte, subj, reply, op string, deadline time.Time, body []byte) *nats.Msg {
	dl := strconv.FormatInt(deadline.UnixMilli(), 10)
	m := nats.NewMsg(subj)
	m.Reply = reply
	m.Data = body
	m.Header.Set(hdrVersion, wireVersion)
	m.Header.Set(hdrOp, op)
	m.Header.Set(hdrDeadline, dl)
	m.Header.Set(hdrSig, sign(secret, op, dl, body))
	return m
}

// Why a holder refuses a call. The caller gets no answer (its call times
// out), so no client can learn anything by trying.
var (
	errVersion   = errors.New("unknown wire version")
	errSignature = errors.New("bad signature")
	errExpired   = errors.New("past its deadline")
	errNoReply   = errors.New("no reply subject")
)

// verify checks a received call and returns its op and deadline: the
// version this build speaks, a reply subject, a valid signature under
// secret, and a deadline after now.
func verify(secret []byte, m *nats.Msg, now time.Time) (op string, deadline time.Time, err error) {
	if v := m.Header.Get(hdrVersion); v != wireVersion {
		return "", time.Time{}, fmt.Errorf("%w %q", errVersion, v)
	}
	if m.Reply == "" {
		return "", time.Time{}, errNoReply
	}
	op, dl := m.Header.Get(hdrOp), m.Header.Get(hdrDeadline)
	got, err := hex.DecodeString(m.Header.Get(hdrSig))
	want, _ := hex.DecodeString(sign(secret, op, dl, m.Data))
	if err != nil || !hmac.Equal(got, want) {
		return "", time.Time{}, errSignature
	}
	ms, err := strconv.ParseInt(dl, 10, 64)
	if err != nil {
		// Signed, so sent by an instance of this cluster: a bug, not an attack.
		return "", time.Time{}, fmt.Errorf("%w: unreadable deadline %q", errExpired, dl)
	}
	deadline = time.UnixMilli(ms)
	if !now.Before(deadline) {
		return "", time.Time{}, errExpired
	}
	return op, deadline, nil
}
