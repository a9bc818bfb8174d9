package webhooksig_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"phonefleet/webhooksig"
)

// FuzzVerify feeds arbitrary Service-Signature headers, bodies and clocks
// to Verify: nothing panics; every refusal is one of the package's
// sentinel errors; a header accepted for a body is refused for any other
// body or secret; and what Sign writes is accepted within the tolerance
// and refused outside it.
func FuzzVerify(f *testing.F) {
	now := int64(1_767_225_600)
	good := webhooksig.Sign(secret, time.Unix(now, 0), body)
	for _, h := range []string{
		good, "", "t=", "v1=", ",", "t=1,t=2,v1=00", "t=1767225600,v1=" + good[len(good)-64:] + ",v1=zz",
		"t=-9223372036854775808,v1=00", "t=9223372036854775807,v1=00", " t=1767225600 , v1=00 ", "t=1767225600;v1=00",
	} {
		f.Add(body, h, secret, now, int64(0))
	}
	f.Fuzz(func(t *testing.T, body []byte, header, secret string, nowUnix, skew int64) {
		now := time.Unix(nowUnix, 0)
		err := webhooksig.Verify(body, header, secret, now, 0)
		if err != nil {
			if !isSentinel(err) {
				t.Fatalf("Verify(%q, %q): got %v; want one of the package's errors", body, header, err)
			}
		} else {
			if webhooksig.Verify(append(body, 'x'), header, secret, now, 0) == nil {
				t.Fatalf("header %q accepted for %q and for it with a byte added", header, body)
			}
			if webhooksig.Verify(body, header, secret+"x", now, 0) == nil {
				t.Fatalf("header %q accepted for secret %q and for another", header, secret)
			}
		}

		signed := webhooksig.Sign(secret, now, body)
		if err := webhooksig.Verify(body, signed, secret, now, 0); err != nil {
			t.Fatalf("Sign's header %q refused at its own time: %v", signed, err)
		}
		at := now.Add(time.Duration(skew%1000) * time.Second)
		err = webhooksig.Verify(body, signed, secret, at, 0)
		d := at.Sub(now)
		inside := d <= webhooksig.DefaultTolerance && d >= -webhooksig.DefaultTolerance
		if inside != (err == nil) || (err != nil && !errors.Is(err, webhooksig.ErrTimestamp)) {
			t.Fatalf("Sign's header checked %s away: got %v", d, err)
		}
		if _, perr := strconv.ParseInt(signed[2:len(signed)-68], 10, 64); perr != nil {
			t.Fatalf("Sign wrote %q", signed)
		}
	})
}

func isSentinel(err error) bool {
	for _, s := range []error{webhooksig.ErrNoSignature, webhooksig.ErrMalformed, webhooksig.ErrTimestamp, webhooksig.ErrMismatch} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}
