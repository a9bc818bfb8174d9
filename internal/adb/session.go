package adb

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"sync"
)

// Session is one long-lived shell: on a device, so that a command costs a
// line written and read back instead of a new connection and a new
// shell. Each command is followed by `echo __PF_END_<n>__$?`, whose
// expanded form delimits the output and carries the exit status. A
// session reconnects on its next command after a failure. It runs one
// command at a time and is safe for concurrent use.
type Session struct {
	c      *Client
	serial string

	mu   sync.Mutex
	conn net.Conn
	r    *bufio.Reader
	n    int
}

// NewSession returns a session on the device serial; it connects on the
// first command.
func (c *Client) NewSession(serial string) *Session {
	return &Session{c: c, serial: serial}
}

// Result is what one command printed and its exit status.
type Result struct {
	Output []byte
	Status int
}

// Run runs cmd (one line of sh) and returns its output and exit status.
// Errors: as Client.Open when the session had to (re)connect and could
// not (nothing ran), ErrDisconnected when the shell went away after cmd
// was sent (it may have run), the context's error.
func (s *Session) Run(ctx context.Context, cmd string) (Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil && !s.alive() {
		s.closeLocked() // the shell ended since the last command
	}
	if s.conn == nil {
		if err := s.open(ctx); err != nil {
			return Result{}, err
		}
	}
	res, sent, err := s.exchange(ctx, cmd)
	if err != nil && !sent && ctx.Err() == nil {
		// The kept connection was dead before anything reached the
		// shell: open a fresh one and try once more.
		s.closeLocked()
		if err := s.open(ctx); err != nil {
			return Result{}, err
		}
		res, _, err = s.exchange(ctx, cmd)
	}
	if err != nil {
		s.closeLocked()
	}
	return res, err
}

// Close ends the shell.
func (s *Session) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closeLocked()
}

func (s *Session) closeLocked() {
	if s.conn != nil {
		_ = s.conn.Close()
		s.conn, s.r = nil, nil
	}
}

// alive reports whether the kept shell is still open, without waiting:
// a closed one has left its end-of-file to be read. Left over bytes
// (nothing should be) are dropped.
func (s *Session) alive() bool {
	if s.r.Buffered() > 0 {
		_, _ = s.r.Discard(s.r.Buffered())
	}
	return !peerClosed(s.conn)
}

func (s *Session) open(ctx context.Context) error {
	conn, err := s.c.Open(ctx, s.serial, "shell:")
	if err != nil {
		return err
	}
	s.conn, s.r = conn, bufio.NewReader(conn)
	// A terminal echoes input and prints prompts; neither is wanted.
	if _, _, err := s.exchange(ctx, "PS1=; PS2=; stty -echo 2>/dev/null"); err != nil {
		s.closeLocked()
		return err
	}
	return nil
}

var endRe = regexp.MustCompile(`__PF_END_([0-9]+)__([0-9]+)`)

// exchange writes cmd and reads up to its end marker. sent reports
// whether the write went out (so cmd may have run).
func (s *Session) exchange(ctx context.Context, cmd string) (res Result, sent bool, err error) {
	s.n++
	n := s.n
	stop := watch(ctx, s.conn)
	defer stop()
	line := fmt.Sprintf("%s\necho __PF_END_%d__$?\n", cmd, n)
	if _, err := s.conn.Write([]byte(line)); err != nil {
		return res, false, s.lost(ctx, cmd, err)
	}
	var out bytes.Buffer
	for {
		if s.r.Buffered() == 0 {
			quickAck(s.conn)
		}
		l, err := s.r.ReadBytes('\n')
		if err != nil {
			if len(l) == 0 && out.Len() == 0 && errors.Is(err, net.ErrClosed) && ctx.Err() == nil {
				return res, false, s.lost(ctx, cmd, err)
			}
			return res, true, s.lost(ctx, cmd, err)
		}
		if m := endRe.FindSubmatch(l); m != nil {
			if got, _ := strconv.Atoi(string(m[1])); got == n {
				res.Status, _ = strconv.Atoi(string(m[2]))
				res.Output = cleanOutput(out.Bytes(), cmd)
				return res, true, nil
			}
			continue // an earlier command's marker
		}
		out.Write(l)
	}
}

func (s *Session) lost(ctx context.Context, cmd string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("%w (shell %q on %s): %v", ErrDisconnected, firstWords(cmd), s.serial, err)
}

// cleanOutput drops carriage returns a terminal adds and an echo of the
// command itself.
func cleanOutput(b []byte, cmd string) []byte {
	b = bytes.ReplaceAll(b, []byte("\r\n"), []byte("\n"))
	if rest, ok := bytes.CutPrefix(b, []byte(cmd+"\n")); ok {
		b = rest
	}
	return b
}

// firstWords returns the command's name and first argument, which is how
// an error names a command without its data.
func firstWords(cmd string) string {
	f := bytes.Fields([]byte(cmd))
	if len(f) > 2 {
		f = f[:2]
	}
	return string(bytes.Join(f, []byte(" ")))
}
