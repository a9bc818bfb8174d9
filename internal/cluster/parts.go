package cluster

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
)

const (
	// headerRoom is what a part leaves of the server's largest message
	// for its subject and headers.
	headerRoom = 8 << 10
	// maxParts bounds a reply the caller accepts: with the server's
	// default largest message (1 MiB) about 128 MiB, far above any
	// screenshot.
	maxParts = 128
)

// partSize is the largest body one reply message carries when the server
// takes messages of up to maxPayload bytes.
func partSize(maxPayload int64) int {
	if maxPayload > 2*headerRoom {
		return int(maxPayload - headerRoom)
	}
	return int(max(maxPayload/2, 1))
}

// replyMsgs cuts a reply into the messages that carry it to subj: one
// message without part headers when it fits in size bytes, else parts
// of at most size bytes, each naming its index (from 0) and the count.
func replyMsgs(subj string, body []byte, size int) []*nats.Msg {
	if len(body) <= size {
		return []*nats.Msg{{Subject: subj, Data: body}}
	}
	n := (len(body) + size - 1) / size
	msgs := make([]*nats.Msg, 0, n)
	for i := range n {
		m := nats.NewMsg(subj)
		m.Data = body[i*size : min((i+1)*size, len(body))]
		m.Header.Set(hdrPart, strconv.Itoa(i))
		m.Header.Set(hdrParts, strconv.Itoa(n))
		msgs = append(msgs, m)
	}
	return msgs
}

// errBadPart is a reply message that does not fit the reply being
// assembled: the holder answered, but not in a form this build reads.
var errBadPart = errors.New("malformed reply part")

// assembler puts a reply sent in parts back together.
type assembler struct {
	parts [][]byte
	got   int
}

// add takes one reply message and returns the whole reply once every
// part has arrived (done), in the order of the parts' indexes whatever
// the order of arrival. Errors wrap errBadPart.
func (a *assembler) add(m *nats.Msg) (reply []byte, done bool, err error) {
	count := m.Header.Get(hdrParts)
	if count == "" {
		if a.parts != nil {
			return nil, false, fmt.Errorf("%w: a whole reply among parts", errBadPart)
		}
		return m.Data, true, nil
	}
	n, err1 := strconv.Atoi(count)
	i, err2 := strconv.Atoi(m.Header.Get(hdrPart))
	switch {
	case err1 != nil || err2 != nil || n < 1 || n > maxParts:
		return nil, false, fmt.Errorf("%w: part %q of %q", errBadPart, m.Header.Get(hdrPart), count)
	case a.parts == nil:
		a.parts = make([][]byte, n)
	case len(a.parts) != n:
		return nil, false, fmt.Errorf("%w: %d parts after %d", errBadPart, n, len(a.parts))
	}
	if i < 0 || i >= n || a.parts[i] != nil {
		return nil, false, fmt.Errorf("%w: part %d of %d again or out of range", errBadPart, i, n)
	}
	a.parts[i] = m.Data
	if a.parts[i] == nil {
		a.parts[i] = []byte{}
	}
	a.got++
	if a.got < n {
		return nil, false, nil
	}
	size := 0
	for _, p := range a.parts {
		size += len(p)
	}
	reply = make([]byte, 0, size)
	for _, p := range a.parts {
		reply = append(reply, p...)
	}
	return reply, true, nil
}
