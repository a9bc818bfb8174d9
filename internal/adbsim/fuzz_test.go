package adbsim

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
)

// FuzzReadMessage reads arbitrary bytes as adb protocol messages, as a
// server or a hostile peer could send them: nothing panics; a body over
// the announced maximum is refused before it is read (no allocation of
// an attacker's length); and a message read encodes back to the bytes it
// was read from (with or without the checksum).
func FuzzReadMessage(f *testing.F) {
	cnxn := message{command: 0x4e584e43, arg0: 0x01000001, arg1: 256 * 1024, data: []byte("host::\x00")}
	f.Add(cnxn.encode(0), uint32(4096))
	f.Add(cnxn.encode(versionSkipChecksum), uint32(4096))
	f.Add(cnxn.encode(0)[:10], uint32(4096))
	f.Add(append(cnxn.encode(0)[:12], 0xff, 0xff, 0xff, 0xff), uint32(1<<20))
	f.Fuzz(func(t *testing.T, in []byte, maxData uint32) {
		maxData %= 1 << 20
		m, err := readMessage(bytes.NewReader(in), maxData)
		if err != nil {
			if len(in) >= headerSize && binary.LittleEndian.Uint32(in[12:]) > maxData && binary.LittleEndian.Uint32(in[20:]) == ^binary.LittleEndian.Uint32(in[0:]) &&
				!errors.Is(err, errTooLong) {
				t.Fatalf("%x: a body over %d refused with %v; want errTooLong", in, maxData, err)
			}
			if !errors.Is(err, errBadMagic) && !errors.Is(err, errTooLong) && !errors.Is(err, errBadChecksum) &&
				!errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("%x: got %v; want a protocol error or a short read", in, err)
			}
			return
		}
		if uint32(len(m.data)) > maxData {
			t.Fatalf("%x: read %d bytes of body over the maximum %d", in, len(m.data), maxData)
		}
		n := headerSize + len(m.data)
		withSum, without := m.encode(0), m.encode(versionSkipChecksum)
		if !bytes.Equal(in[:n], withSum) && !bytes.Equal(in[:n], without) {
			t.Fatalf("%x read as %s, which encodes as %x", in[:n], m, withSum)
		}
	})
}

// FuzzShellParse reads arbitrary command lines, as adb shell hands them
// to the sim: nothing panics, a refusal is a syntax error, and a line
// read, written back with every literal single-quoted and every variable
// as ${name}, reads back the same.
func FuzzShellParse(f *testing.F) {
	for _, s := range []string{
		`input tap 10 20`, `echo "$HOME" '$x' ${y}z \; a && b || c; d | e`, `cat < /f > /g 2>&1`, `echo >> f 2>&`, `;`, `a;;b`,
		`echo "unterminated`, `'`, `a |`, `| a`, `echo $`, `echo ${}`, `echo ${a"b}`, `a # comment`, `\`, `0<x 1>y 2>>z`, `a&`,
		`am start -n com.x/.Main --es k "v w"`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		list, err := parse(line)
		if err != nil {
			if !errors.Is(err, errSyntax) {
				t.Fatalf("%q: got %v; want a syntax error", line, err)
			}
			return
		}
		written := render(list)
		again, err := parse(written)
		if err != nil {
			t.Fatalf("%q read, written back as %q, refused: %v", line, written, err)
		}
		if render(again) != written {
			t.Fatalf("%q read, written back as %q, which reads as %q", line, written, render(again))
		}
	})
}

// render writes a parsed list back as a command line.
func render(list []listItem) string {
	var b strings.Builder
	for i, it := range list {
		if i > 0 {
			b.WriteByte(' ')
		}
		for j, c := range it.p {
			if j > 0 {
				b.WriteString(" | ")
			}
			var parts []string
			for _, w := range c.words {
				parts = append(parts, renderWord(w))
			}
			for _, r := range c.redirects {
				parts = append(parts, strconv.Itoa(r.fd)+r.op+" "+renderWord(r.target))
			}
			b.WriteString(strings.Join(parts, " "))
		}
		if it.op != "" {
			b.WriteString(" " + it.op)
		}
	}
	return b.String()
}

func renderWord(w word) string {
	if len(w) == 0 {
		return "''"
	}
	var b strings.Builder
	for _, p := range w {
		if p.v != "" {
			b.WriteString(`"${` + p.v + `}"`)
			continue
		}
		b.WriteString(`'` + strings.ReplaceAll(p.lit, `'`, `'\''`) + `'`)
	}
	return b.String()
}
