package smtpmail

import (
	"net"
	"net/url"
	"strings"
	"testing"
)

// FuzzParseURL reads arbitrary SERVICE_SMTP_URL values: nothing panics; a
// URL taken names a host and a port, a bare sender address and a known TLS
// mode, and written back as a URL it reads the same.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{
		"smtp://mail.example.com?from=pf@example.com", "smtps://u:p%40ss@[::1]:2465?from=pf@example.com&helo=pf.example.com",
		"smtp+starttls://u@host:0?from=a@b", "smtp://host?from=A <a@b>", "http://host?from=a@b", "smtp://?from=a@b", "smtp://h:x?from=a@b",
		"smtp://h?from=a@b&helo=x%0d%0aRCPT", "",
	} {
		f.Add(s)
	}
	scheme := map[string]string{"none": "smtp", "starttls": "smtp+starttls", "implicit": "smtps"}
	f.Fuzz(func(t *testing.T, raw string) {
		c, err := ParseURL(raw)
		if err != nil {
			return
		}
		host, port, err := net.SplitHostPort(c.Addr)
		if err != nil || host == "" || port == "" || scheme[c.TLS] == "" || c.From == "" || strings.ContainsAny(c.From, "<> \r\n") {
			t.Fatalf("%q read as %+v", raw, c)
		}
		u := url.URL{Scheme: scheme[c.TLS], Host: c.Addr, RawQuery: url.Values{"from": {c.From}, "helo": {c.HelloName}}.Encode()}
		if c.Username != "" || c.Password != "" {
			u.User = url.UserPassword(c.Username, c.Password)
		}
		if c2, err := ParseURL(u.String()); err != nil || c2 != c {
			t.Fatalf("%q read as %+v; written as %q it reads %+v (%v)", raw, c, u.String(), c2, err)
		}
	})
}
