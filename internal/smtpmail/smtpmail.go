// Package smtpmail sends e-mail over SMTP to the server a deployment
// configures (SERVICE_SMTP_URL). It is the notification e-mail channel's
// transport; it knows nothing of notifications.
package smtpmail

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"mime"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"net/netip"
	"net/smtp"
	"net/textproto"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Config is where and how to send.
type Config struct {
	// Addr is host:port of the SMTP server.
	Addr string
	// From is the envelope sender and From header.
	From string
	// Username and Password, when set, authenticate with PLAIN (only over
	// TLS, or to a server on loopback).
	Username, Password string
	// TLS is "starttls" (required), "implicit" (smtps) or "none" (plain;
	// STARTTLS is still used when offered).
	TLS string
	// HelloName is the name sent in EHLO; empty: localhost.
	HelloName string
	// Timeout bounds one message's whole exchange; zero: 30 seconds.
	Timeout time.Duration
}

// hostNameRE is a host name as the URL may name the server (letters,
// digits, hyphens, underscores and dots).
var hostNameRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,252}$`)

// ParseURL reads SERVICE_SMTP_URL: smtp://[user[:password]@]host[:port]?from=addr
// (STARTTLS when the server offers it, port 25 by default),
// smtp+starttls://… (STARTTLS required, port 587) or smtps://… (TLS from
// the start, port 465).
func ParseURL(raw string) (Config, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Config{}, fmt.Errorf("SMTP URL: %w", err)
	}
	c := Config{From: u.Query().Get("from"), HelloName: u.Query().Get("helo")}
	port := ""
	switch u.Scheme {
	case "smtp":
		c.TLS, port = "none", "25"
	case "smtp+starttls":
		c.TLS, port = "starttls", "587"
	case "smtps":
		c.TLS, port = "implicit", "465"
	default:
		return Config{}, fmt.Errorf("SMTP URL: scheme must be smtp, smtp+starttls or smtps, not %q", u.Scheme)
	}
	host := u.Hostname()
	if host == "" {
		return Config{}, errors.New("SMTP URL: no host")
	}
	if _, err := netip.ParseAddr(host); err != nil && !hostNameRE.MatchString(host) {
		return Config{}, fmt.Errorf("SMTP URL: host %q is not a host name or an IP address", host)
	}
	if u.Port() != "" {
		port = u.Port()
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return Config{}, fmt.Errorf("SMTP URL: port %q is not a port from 1 to 65535", port)
	}
	c.Addr = net.JoinHostPort(u.Hostname(), port)
	if u.User != nil {
		c.Username = u.User.Username()
		c.Password, _ = u.User.Password()
	}
	a, err := mail.ParseAddress(c.From)
	if err != nil || a.Name != "" {
		return Config{}, errors.New("SMTP URL: from= must name the sender's bare address (…?from=phonefleet@example.com)")
	}
	c.From = a.Address // as read: without the spaces ParseAddress allows around it

	return c, nil
}

// Message is one e-mail to one recipient.
type Message struct {
	To, Subject, Body string
	// MessageID is the Message-ID without angle brackets, and the
	// X-Phonefleet-Idempotency-Key: the same on every try of one message.
	MessageID string
}

// Error is a failed send: Temporary when trying again may help (no answer,
// a 4xx), otherwise the server refused the message for good (5xx).
type Error struct {
	Temporary bool
	Err       error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Render returns the message as sent, headers and body (CRLF lines).
func (c Config) Render(m Message, date time.Time) []byte {
	var b bytes.Buffer
	h := func(k, v string) { fmt.Fprintf(&b, "%s: %s\r\n", k, v) }
	h("From", c.From)
	h("To", m.To)
	h("Subject", mime.QEncoding.Encode("utf-8", m.Subject))
	h("Date", date.Format(time.RFC1123Z))
	h("Message-ID", "<"+m.MessageID+">")
	h("X-Phonefleet-Idempotency-Key", m.MessageID)
	h("MIME-Version", "1.0")
	h("Content-Type", "text/plain; charset=utf-8")
	h("Content-Transfer-Encoding", "quoted-printable")
	b.WriteString("\r\n")
	w := quotedprintable.NewWriter(&b)
	_, _ = w.Write([]byte(strings.ReplaceAll(strings.ReplaceAll(m.Body, "\r\n", "\n"), "\n", "\r\n")))
	_ = w.Close()
	b.WriteString("\r\n")
	return b.Bytes()
}

// Send sends m. Just before the message's final "." is written — the
// moment after which the server may have accepted it even if no answer
// comes back — it calls committing; when committing fails, nothing is
// committed and the message is not sent. The error is an *Error.
func (c Config) Send(ctx context.Context, m Message, date time.Time, committing func() error) error {
	err := c.send(ctx, m, date, committing)
	if err == nil {
		return nil
	}
	var se *Error
	if errors.As(err, &se) {
		return se
	}
	var te *textproto.Error
	if errors.As(err, &te) {
		return &Error{Temporary: te.Code < 500, Err: err}
	}
	return &Error{Temporary: true, Err: err}
}

func (c Config) send(ctx context.Context, m Message, date time.Time, committing func() error) error {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	host, _, _ := net.SplitHostPort(c.Addr)
	tlsCfg := &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", c.Addr)
	if err != nil {
		return err
	}
	if c.TLS == "implicit" {
		conn = tls.Client(conn, tlsCfg)
	}
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	cl, err := smtp.NewClient(conn, host)
	if err != nil {
		_ = conn.Close()
		return err
	}
	defer cl.Close()
	hello := c.HelloName
	if hello == "" {
		hello = "localhost"
	}
	if err := cl.Hello(hello); err != nil {
		return err
	}
	if c.TLS != "implicit" {
		if ok, _ := cl.Extension("STARTTLS"); ok {
			if err := cl.StartTLS(tlsCfg); err != nil {
				return err
			}
		} else if c.TLS == "starttls" {
			return &Error{Temporary: true, Err: errors.New("the SMTP server does not offer STARTTLS, which the configuration requires")}
		}
	}
	if c.Username != "" {
		if err := cl.Auth(smtp.PlainAuth("", c.Username, c.Password, host)); err != nil {
			return err
		}
	}
	if err := cl.Mail(c.From); err != nil {
		return err
	}
	if err := cl.Rcpt(m.To); err != nil {
		return err
	}
	w, err := cl.Data()
	if err != nil {
		return err
	}
	if _, err := w.Write(c.Render(m, date)); err != nil {
		return err
	}
	if err := committing(); err != nil {
		return &Error{Temporary: true, Err: fmt.Errorf("before sending the message's end: %w", err)}
	}
	if err := w.Close(); err != nil {
		return err
	}
	_ = cl.Quit()
	return nil
}
