package adbsim

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The transport's message commands (adb's protocol.txt): four ASCII bytes
// read as a little-endian word.
const (
	cmdSYNC = 0x434e5953
	cmdCNXN = 0x4e584e43
	cmdAUTH = 0x48545541
	cmdOPEN = 0x4e45504f
	cmdOKAY = 0x59414b4f
	cmdCLSE = 0x45534c43
	cmdWRTE = 0x45545257
)

// Protocol versions. From versionSkipChecksum on, neither side fills in
// or checks the payload checksum.
const (
	versionMin          = 0x01000000
	versionSkipChecksum = 0x01000001
)

// maxPayload is the largest message body the daemon accepts and
// announces in its CNXN, as adbd does (1 MiB).
const maxPayload = 1024 * 1024

// maxPayloadV1 bounds CNXN and AUTH bodies, which are sent before either
// side knows the other's limit.
const maxPayloadV1 = 4096

// AUTH types.
const (
	authToken        = 1
	authSignature    = 2
	authRSAPublicKey = 3
)

const headerSize = 24

// message is one transport message: a 24-byte header (command, arg0,
// arg1, data length, data checksum, magic) and its body.
type message struct {
	command, arg0, arg1 uint32
	data                []byte
}

func (m message) String() string {
	return fmt.Sprintf("%s(%d, %d, %d bytes)", commandName(m.command), m.arg0, m.arg1, len(m.data))
}

func commandName(c uint32) string {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], c)
	for _, x := range b {
		if x < 'A' || x > 'Z' {
			return fmt.Sprintf("%#08x", c)
		}
	}
	return string(b[:])
}

// checksum is the old protocol's payload check: the sum of its bytes.
func checksum(data []byte) uint32 {
	var s uint32
	for _, b := range data {
		s += uint32(b)
	}
	return s
}

// encode returns m on the wire. The checksum is filled in only for
// peers older than versionSkipChecksum, as adbd does.
func (m message) encode(version uint32) []byte {
	buf := make([]byte, headerSize+len(m.data))
	le := binary.LittleEndian
	le.PutUint32(buf[0:], m.command)
	le.PutUint32(buf[4:], m.arg0)
	le.PutUint32(buf[8:], m.arg1)
	le.PutUint32(buf[12:], uint32(len(m.data)))
	if version < versionSkipChecksum {
		le.PutUint32(buf[16:], checksum(m.data))
	}
	le.PutUint32(buf[20:], m.command^0xffffffff)
	copy(buf[headerSize:], m.data)
	return buf
}

// Errors of a message that breaks the protocol; the connection is closed
// on any of them.
var (
	errBadMagic    = errors.New("adbsim: header magic is not the command's complement")
	errTooLong     = errors.New("adbsim: message body longer than the announced maximum")
	errBadChecksum = errors.New("adbsim: payload checksum mismatch")
)

// readMessage reads one message. Bodies longer than maxData are refused
// before they are read. A checksum is verified when the sender filled it
// in: peers older than versionSkipChecksum always do, newer ones send 0.
// The version alone cannot decide, because a server reconnecting to a
// device sends its first CNXN with the version it negotiated last time
// (adb 29 does), so without a checksum.
func readMessage(r io.Reader, maxData uint32) (message, error) {
	var h [headerSize]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return message{}, err
	}
	le := binary.LittleEndian
	m := message{command: le.Uint32(h[0:]), arg0: le.Uint32(h[4:]), arg1: le.Uint32(h[8:])}
	n, sum, magic := le.Uint32(h[12:]), le.Uint32(h[16:]), le.Uint32(h[20:])
	if magic != m.command^0xffffffff {
		return m, fmt.Errorf("%w: %s", errBadMagic, m)
	}
	if n > maxData {
		return m, fmt.Errorf("%w: %d > %d", errTooLong, n, maxData)
	}
	m.data = make([]byte, n)
	if _, err := io.ReadFull(r, m.data); err != nil {
		return m, err
	}
	if sum != 0 && sum != checksum(m.data) {
		return m, fmt.Errorf("%w: %s", errBadChecksum, m)
	}
	return m, nil
}
