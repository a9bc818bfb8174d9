// Package smtptest runs a real SMTP server (github.com/emersion/go-smtp) on
// loopback for tests, keeping every message it accepted.
package smtptest

import (
	"bytes"
	"io"
	"net"
	"net/mail"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
)

// Message is one message the server accepted.
type Message struct {
	From   string
	To     []string
	Data   []byte
	Header mail.Header
	Body   []byte
}

// Server is a running SMTP server.
type Server struct {
	Addr string
	// OnData, when set, runs after a message was read in full and before
	// the server answers its final "."; an error refuses the message (a
	// *smtp.SMTPError sets the reply code). It may block, holding the reply.
	OnData func(m Message) error

	mu       sync.Mutex
	messages []Message
	srv      *smtp.Server
}

// Start starts a server that closes when the test ends.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s := &Server{}
	s.srv = smtp.NewServer(backend{s})
	s.srv.Domain = "smtptest.local"
	s.srv.ReadTimeout, s.srv.WriteTimeout = time.Minute, time.Minute
	s.srv.MaxMessageBytes = 1 << 20
	s.srv.MaxRecipients = 10
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s.Addr = ln.Addr().String()
	go func() { _ = s.srv.Serve(ln) }()
	tb.Cleanup(func() { _ = s.srv.Close() })
	return s
}

// URL is the SERVICE_SMTP_URL of the server with sender from.
func (s *Server) URL(from string) string { return "smtp://" + s.Addr + "?from=" + from }

// Messages returns the messages accepted so far.
func (s *Server) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Message(nil), s.messages...)
}

// To returns the messages accepted for addr.
func (s *Server) To(addr string) []Message {
	var out []Message
	for _, m := range s.Messages() {
		for _, to := range m.To {
			if to == addr {
				out = append(out, m)
			}
		}
	}
	return out
}

type backend struct{ s *Server }

func (b backend) NewSession(*smtp.Conn) (smtp.Session, error) { return &session{s: b.s}, nil }

type session struct {
	s    *Server
	from string
	to   []string
}

func (x *session) Reset()        { x.from, x.to = "", nil }
func (x *session) Logout() error { return nil }
func (x *session) Mail(from string, _ *smtp.MailOptions) error {
	x.from = from
	return nil
}
func (x *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	x.to = append(x.to, to)
	return nil
}

func (x *session) Data(r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	m := Message{From: x.from, To: append([]string(nil), x.to...), Data: data}
	if pm, err := mail.ReadMessage(bytes.NewReader(data)); err == nil {
		m.Header = pm.Header
		m.Body, _ = io.ReadAll(pm.Body)
	}
	if x.s.OnData != nil {
		if err := x.s.OnData(m); err != nil {
			return err
		}
	}
	x.s.mu.Lock()
	x.s.messages = append(x.s.messages, m)
	x.s.mu.Unlock()
	return nil
}
