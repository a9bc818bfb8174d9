package adbsim

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"strings"
	"sync"
)

// Shell protocol packet ids (shell_v2): a packet is one id byte, a
// little-endian 32-bit length and the data.
const (
	shellStdin       = 0
	shellStdout      = 1
	shellStderr      = 2
	shellExit        = 3
	shellCloseStdin  = 4
	shellWindowSize  = 5
	shellPacketLimit = 64 * 1024
)

// service returns the handler for an OPEN's destination and the name its
// stream is counted under, or nil for a service the device lacks (the
// OPEN is then refused with CLSE).
func (d *Daemon) service(dest string) (func(context.Context, *stream), string) {
	if cmd, ok := strings.CutPrefix(dest, "exec:"); ok {
		// exec: is raw both ways: no terminal, no protocol, stdout and
		// stderr on the stream.
		return func(ctx context.Context, s *stream) {
			d.runCommand(ctx, s, s, s, cmd)
		}, "exec"
	}
	rest, ok := strings.CutPrefix(dest, "shell")
	if !ok || (rest == "" || (rest[0] != ':' && rest[0] != ',')) {
		return nil, ""
	}
	args, cmd, ok := strings.Cut(strings.TrimPrefix(rest, ","), ":")
	if !ok {
		return nil, ""
	}
	if rest[0] == ':' {
		args, cmd = "", rest[1:]
	}
	// As adbd: a pty for an interactive shell, raw for a command, unless
	// the arguments say otherwise; the shell protocol only with v2.
	pty, v2 := cmd == "", false
	for _, a := range strings.Split(args, ",") {
		switch a {
		case "raw":
			pty = false
		case "pty":
			pty = true
		case "v2":
			v2 = true
		}
	}
	kind := "shell"
	if v2 {
		kind = "shell,v2"
	}
	return func(ctx context.Context, s *stream) {
		var stdin io.Reader = s
		var stdout, stderr io.Writer = s, s
		var exit func(int)
		if v2 {
			pw := &packetWriter{w: s}
			stdout, stderr = pw.channel(shellStdout), pw.channel(shellStderr)
			stdin = newPacketReader(s)
			exit = func(status int) { _, _ = pw.write(shellExit, []byte{byte(status)}) }
		}
		if pty {
			// A terminal joins stderr to stdout and ends lines with CRLF.
			stdout = &crlfWriter{w: stdout}
			stderr = stdout
		}
		var status int
		if cmd == "" {
			status = d.interactive(ctx, stdin, stdout, stderr, pty)
		} else {
			status = d.runCommand(ctx, stdin, stdout, stderr, cmd)
		}
		if exit != nil {
			exit(status)
		}
	}, kind
}

// packetWriter frames output in shell protocol packets.
type packetWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (p *packetWriter) write(id byte, data []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	total := 0
	for first := true; first || len(data) > 0; first = false {
		n := min(len(data), shellPacketLimit)
		buf := make([]byte, 5+n)
		buf[0] = id
		binary.LittleEndian.PutUint32(buf[1:], uint32(n))
		copy(buf[5:], data[:n])
		if _, err := p.w.Write(buf); err != nil {
			return total, err
		}
		data, total = data[n:], total+n
	}
	return total, nil
}

func (p *packetWriter) channel(id byte) io.Writer { return channelWriter{p, id} }

type channelWriter struct {
	p  *packetWriter
	id byte
}

func (c channelWriter) Write(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	return c.p.write(c.id, b)
}

// packetReader yields the stdin packets of the shell protocol; a
// close-stdin packet (or the stream's end) is EOF. Window size changes
// are ignored.
type packetReader struct {
	r    *bufio.Reader
	left int
	eof  bool
}

func newPacketReader(r io.Reader) *packetReader { return &packetReader{r: bufio.NewReader(r)} }

func (p *packetReader) Read(b []byte) (int, error) {
	for p.left == 0 {
		if p.eof {
			return 0, io.EOF
		}
		var h [5]byte
		if _, err := io.ReadFull(p.r, h[:]); err != nil {
			p.eof = true
			return 0, io.EOF
		}
		n := int(binary.LittleEndian.Uint32(h[1:]))
		switch h[0] {
		case shellStdin:
			p.left = n
		case shellCloseStdin:
			p.eof = true
			if _, err := p.r.Discard(n); err != nil {
				return 0, io.EOF
			}
		default:
			if _, err := p.r.Discard(n); err != nil {
				p.eof = true
			}
		}
	}
	n, err := p.r.Read(b[:min(len(b), p.left)])
	p.left -= n
	if err != nil {
		p.eof, p.left = true, 0
	}
	return n, nil
}

// crlfWriter turns "\n" into "\r\n", as a terminal's output processing
// (ONLCR) does.
type crlfWriter struct{ w io.Writer }

func (c *crlfWriter) Write(b []byte) (int, error) {
	if _, err := c.w.Write([]byte(strings.ReplaceAll(string(b), "\n", "\r\n"))); err != nil {
		return 0, err
	}
	return len(b), nil
}
