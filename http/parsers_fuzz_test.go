package httpapi

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"phonefleet/domain"
)

// FuzzVerifyStandardWebhook feeds arbitrary identity-provider webhooks
// (Standard Webhooks headers and body) to the verifier: nothing panics; a
// delivery accepted names its webhook-id, and is refused with another
// body; and a delivery signed with the secret is accepted within the
// tolerance and refused outside it.
func FuzzVerifyStandardWebhook(f *testing.F) {
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("identity webhook key"))
	f.Add(secret, "msg_1", "1767225600", "v1,abc v2,def", []byte(`{"type":"user.deleted"}`), int64(0))
	f.Add("whsec_", "", "", "", []byte{}, int64(400))
	f.Add("whsec_!!", "msg_1", "+1767225600", "v1,", []byte("x"), int64(-301))
	now := time.Unix(1_767_225_600, 0)
	f.Fuzz(func(t *testing.T, secret, id, ts, sigs string, body []byte, skew int64) {
		h := http.Header{}
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", ts)
		h.Set("webhook-signature", sigs)
		got, err := verifyStandardWebhook(secret, h, body, now)
		if err == nil {
			if got != h.Get("webhook-id") || got == "" {
				t.Fatalf("accepted, naming %q; want the webhook-id %q", got, h.Get("webhook-id"))
			}
			if _, err := verifyStandardWebhook(secret, h, append(body, 'x'), now); err == nil {
				t.Fatalf("signature %q accepted for %q and for it with a byte added", sigs, body)
			}
		}

		key, kerr := base64.StdEncoding.DecodeString(secret[min(len(secret), len("whsec_")):])
		if kerr != nil || len(key) == 0 || id == "" || h.Get("webhook-id") != id {
			return
		}
		at := now.Add(time.Duration(skew%3600) * time.Second)
		ts = strconv.FormatInt(at.Unix(), 10)
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(id + "." + ts + "."))
		mac.Write(body)
		h.Set("webhook-timestamp", ts)
		h.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
		_, err = verifyStandardWebhook("whsec_"+secret[len("whsec_"):], h, body, now)
		d := now.Sub(at)
		if inside := d <= identityWebhookTolerance && d >= -identityWebhookTolerance; inside != (err == nil) {
			t.Fatalf("a delivery signed %s from now: got %v", d, err)
		}
	})
}

// FuzzPaging reads arbitrary ?limit= and cursor values under the paging
// rule: nothing panics; a refusal is invalid_argument naming the field;
// a limit taken is 1 to the list's maximum; an id cursor taken is empty
// or an id of the list's prefix; a time cursor taken writes back (as the
// list writes it) into the same instant.
func FuzzPaging(f *testing.F) {
	for _, s := range []string{"", "1", "0", "-1", "500", "99999999999999999999", "1.5", " 2", "+3",
		"dlv_0190a1b2c3d4e5f60718293a4b5c6d7e", "2026-03-01T12:00:00.123456Z", "2026-03-01T12:00:00+01:00", "0000-01-01T00:00:00+01:00"} {
		f.Add(s, uint8(100))
	}
	f.Fuzz(func(t *testing.T, raw string, max uint8) {
		q := url.Values{"limit": {raw}, "after": {raw}, "before": {raw}}
		refused := func(err error, field string) {
			t.Helper()
			var de *domain.Error
			if !errors.As(err, &de) || de.Code != domain.CodeInvalidArgument || de.Extra["field"] != field {
				t.Fatalf("%q: got %v; want invalid_argument naming %s", raw, err, field)
			}
		}
		m := int(max) + 1
		if n, err := pageLimit(q, m); err != nil {
			refused(err, "limit")
		} else if n < 1 || n > m {
			t.Fatalf("limit %q read as %d (maximum %d)", raw, n, m)
		}
		if id, err := idCursor(q, "after", "nextAfter", domain.PrefixDelivery); err != nil {
			refused(err, "after")
		} else if id != "" && !domain.HasPrefix(id, domain.PrefixDelivery) {
			t.Fatalf("cursor %q read as %q", raw, id)
		}
		at, err := timeCursor(q, "before", "nextBefore")
		if err != nil {
			refused(err, "before")
			return
		}
		if !at.IsZero() {
			back, err := timeCursor(url.Values{"before": {at.Format(time.RFC3339Nano)}}, "before", "nextBefore")
			if err != nil || !back.Equal(at) {
				t.Fatalf("cursor %q read as %s, written %q, read back as %s (%v)", raw, at, at.Format(time.RFC3339Nano), back, err)
			}
		}
	})
}
