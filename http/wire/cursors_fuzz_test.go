package wire

import (
	"encoding/base64"
	"testing"
	"time"

	"phonefleet/projections"
)

const fuzzDelivery = "dlv_0190a1b2c3d4e5f60718293a4b5c6d7e"

// FuzzParseDeliveryCursor: a webhook deliveries cursor is refused, or is
// one the list could have returned: formatted again it reads back as the
// same position.
func FuzzParseDeliveryCursor(f *testing.F) {
	for _, s := range []string{"1767225600000000_" + fuzzDelivery, "+1_" + fuzzDelivery, "-1_" + fuzzDelivery, "9223372036854775807_" + fuzzDelivery,
		"1_dlv_x", "_" + fuzzDelivery, "1", "", "1_" + fuzzDelivery + "_"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, ok := ParseDeliveryCursor(s)
		if !ok {
			if c != (projections.DeliveryCursor{}) {
				t.Fatalf("%q refused with a position %+v", s, c)
			}
			return
		}
		again := FormatDeliveryCursor(c)
		c2, ok := ParseDeliveryCursor(again)
		if !ok || !c2.CreatedAt.Equal(c.CreatedAt) || c2.DeliveryID != c.DeliveryID {
			t.Fatalf("%q read as %+v, formatted %q, read back as %+v (%v)", s, c, again, c2, ok)
		}
	})
}

// FuzzParseRunFrameCursor: a run frames cursor is refused or is a
// position from 0 that the page writes back the same.
func FuzzParseRunFrameCursor(f *testing.F) {
	for _, s := range []string{"", "0", "12", "-1", "+3", "007", "9223372036854775808", "1e3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := ParseRunFrameCursor(s)
		if !ok {
			return
		}
		if n < 0 {
			t.Fatalf("%q read as %d", s, n)
		}
		if n > 0 {
			written := NewRunFramePage(projections.RunFramePage{NextAfter: n}).NextAfter
			if m, ok := ParseRunFrameCursor(written); !ok || m != n {
				t.Fatalf("%q read as %d, written %q, read back as %d", s, n, written, m)
			}
		}
	})
}

// FuzzDecodeFulfilmentCursor: a fulfilments cursor is refused, or is the
// one spelling EncodeFulfilmentCursor writes for its position (a list
// cursor is passed back unchanged: docs/decisions.md, "Paging"), so it
// encodes back to itself.
func FuzzDecodeFulfilmentCursor(f *testing.F) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)
	f.Add(EncodeFulfilmentCursor(projections.FulfilmentCursor{CreatedAt: at, FulfilmentID: "ful_1"}))
	for _, raw := range []string{"0000-01-01T00:00:00+01:00 ful_1", "2026-03-01T12:00:00Z ", "2026-03-01T12:00:00Z a b", "9999-12-31T23:59:59-01:00 x", "x"} {
		f.Add(base64RawURL(raw))
	}
	f.Add("!!")
	f.Fuzz(func(t *testing.T, s string) {
		c, ok := DecodeFulfilmentCursor(s)
		if !ok {
			return
		}
		if c.FulfilmentID == "" {
			t.Fatalf("%q read as %+v without an id", s, c)
		}
		again := EncodeFulfilmentCursor(c)
		c2, ok := DecodeFulfilmentCursor(again)
		if !ok || !c2.CreatedAt.Equal(c.CreatedAt) || c2.FulfilmentID != c.FulfilmentID {
			t.Fatalf("%q read as %+v, encoded %q, read back as %+v (%v)", s, c, again, c2, ok)
		}
	})
}

func base64RawURL(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
