package smtpmail

import (
	"strings"
	"testing"
	"time"
)

func TestParseURL(t *testing.T) {
	for raw, want := range map[string]Config{
		"smtp://mail.test?from=a@b.test":                   {Addr: "mail.test:25", From: "a@b.test", TLS: "none"},
		"smtp+starttls://u:p%40ss@mail.test?from=a@b.test": {Addr: "mail.test:587", From: "a@b.test", TLS: "starttls", Username: "u", Password: "p@ss"},
		"smtps://mail.test:2465?from=a@b.test&helo=me":     {Addr: "mail.test:2465", From: "a@b.test", TLS: "implicit", HelloName: "me"},
	} {
		got, err := ParseURL(raw)
		if err != nil || got != want {
			t.Errorf("%s: got %+v (%v); want %+v", raw, got, err, want)
		}
	}
	for _, raw := range []string{"http://mail.test?from=a@b.test", "smtp://?from=a@b.test", "smtp://mail.test", "smtp://mail.test?from=Me <a@b.test>"} {
		if _, err := ParseURL(raw); err == nil {
			t.Errorf("%s: accepted; want refused", raw)
		}
	}
}

func TestRenderCarriesTheIdempotencyKeyAndEncodes(t *testing.T) {
	c := Config{From: "a@b.test"}
	out := string(c.Render(Message{To: "c@d.test", Subject: "Café ready", Body: "line one\n.starts with a dot\n", MessageID: "ntf_1@phonefleet"},
		time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)))
	for _, want := range []string{"Message-ID: <ntf_1@phonefleet>\r\n", "X-Phonefleet-Idempotency-Key: ntf_1@phonefleet\r\n",
		"Subject: =?utf-8?q?Caf=C3=A9_ready?=\r\n", "line one\r\n.starts with a dot\r\n", "Content-Transfer-Encoding: quoted-printable\r\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("rendered message lacks %q:\n%s", want, out)
		}
	}
}
