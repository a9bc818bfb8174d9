// Package webhooksig signs and verifies phonefleet webhook deliveries. It is
// for receivers: import it instead of hand-rolling the check.
//
// Every delivery is a POST whose JSON body is
// {deliveryId, event, occurredAt, data}, with these headers:
//
//	Service-Event:     the event name, e.g. run.ended
//	Service-Delivery:  the delivery id, the same on every retry (deduplicate on it)
//	Service-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">
//
// The HMAC key is the subscription's signing secret (the whole whsec_…
// string, as returned once by POST /v1/webhooks or …/rotate). This is
// Stripe's scheme, so Stripe's verifiers accept it too.
//
// # Recipe
//
//  1. Read the raw body bytes before any JSON decoding; the signature is
//     over those exact bytes.
//  2. Call Verify with the Service-Signature header, the secret and your
//     clock: it recomputes the HMAC, compares in constant time, and refuses
//     a timestamp more than 300 seconds away from now, in the past or the
//     future (replay protection).
//  3. Answer 2xx quickly (within 10 seconds) once you have stored the
//     delivery; anything else, a redirect included, is retried after 30 s,
//     2 min, 5 min and 18 min, then given up.
//  4. Deduplicate on Service-Delivery: delivery is at least once.
//
// In a net/http handler:
//
//	body, err := webhooksig.ReadAndVerify(r, secret, time.Now())
//	if err != nil {
//		http.Error(w, "bad signature", http.StatusBadRequest)
//		return
//	}
//	// decode body, dedupe on r.Header.Get(webhooksig.DeliveryHeader), store, then:
//	w.WriteHeader(http.StatusNoContent)
//
// After rotating the secret the old one stops signing at once; a receiver
// that must not miss deliveries during its own switch-over may call Verify
// with each secret it still accepts.
package webhooksig

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The headers of a delivery.
const (
	SignatureHeader = "Service-Signature"
	DeliveryHeader  = "Service-Delivery"
	EventHeader     = "Service-Event"
)

// DefaultTolerance is how far a signature's timestamp may be from the
// receiver's clock, either way (spec 8: 300 s in the reference verifier).
const DefaultTolerance = 300 * time.Second

// MaxBodyBytes bounds the body ReadAndVerify reads; deliveries are small.
const MaxBodyBytes = 1 << 20

// Verification failures. Verify wraps one of these, so errors.Is tells
// them apart.
var (
	// ErrNoSignature: the header is empty.
	ErrNoSignature = errors.New("webhooksig: no Service-Signature header")
	// ErrMalformed: the header is not t=<unix>,v1=<hex>[,v1=…].
	ErrMalformed = errors.New("webhooksig: malformed Service-Signature header")
	// ErrTimestamp: the timestamp is outside the tolerance of now.
	ErrTimestamp = errors.New("webhooksig: signature timestamp outside the tolerance")
	// ErrMismatch: no v1 signature matches the body and secret.
	ErrMismatch = errors.New("webhooksig: signature does not match")
	// ErrBodyTooLarge: the body is over MaxBodyBytes.
	ErrBodyTooLarge = errors.New("webhooksig: body too large")
)

// Compute returns the v1 signature bytes: HMAC-SHA256 keyed by secret over
// "<t>.<body>".
func Compute(secret string, t time.Time, body []byte) []byte {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(strconv.FormatInt(t.Unix(), 10)))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return mac.Sum(nil)
}

// Sign returns the Service-Signature header value for body signed at t.
func Sign(secret string, t time.Time, body []byte) string {
	return "t=" + strconv.FormatInt(t.Unix(), 10) + ",v1=" + hex.EncodeToString(Compute(secret, t, body))
}

// Verify checks header against body and secret at time now with the given
// tolerance (DefaultTolerance when zero or less). It accepts the header if
// any of its v1 signatures matches (compared in constant time) and its
// timestamp is within the tolerance of now, past or future.
func Verify(body []byte, header, secret string, now time.Time, tolerance time.Duration) error {
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	if header == "" {
		return ErrNoSignature
	}
	var ts int64
	var haveT bool
	var sigs [][]byte
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return ErrMalformed
		}
		switch k {
		case "t":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || haveT {
				return ErrMalformed
			}
			ts, haveT = n, true
		case "v1":
			sig, err := hex.DecodeString(v)
			if err != nil || len(sig) != sha256.Size {
				continue // an unreadable signature cannot match; others may
			}
			sigs = append(sigs, sig)
		}
	}
	if !haveT || len(sigs) == 0 {
		return ErrMalformed
	}
	t := time.Unix(ts, 0)
	if d := now.Sub(t); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: signed at %s, now %s", ErrTimestamp, t.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	want := Compute(secret, t, body)
	ok := false
	for _, sig := range sigs {
		if hmac.Equal(want, sig) {
			ok = true
		}
	}
	if !ok {
		return ErrMismatch
	}
	return nil
}

// ReadAndVerify reads r's body (at most MaxBodyBytes) and verifies its
// Service-Signature with DefaultTolerance. It returns the raw body, which
// the caller then decodes; r.Body is consumed.
func ReadAndVerify(r *http.Request, secret string, now time.Time) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBodyBytes+1))
	if err != nil {
		return nil, err
	}
	if len(body) > MaxBodyBytes {
		return nil, ErrBodyTooLarge
	}
	if err := Verify(body, r.Header.Get(SignatureHeader), secret, now, DefaultTolerance); err != nil {
		return nil, err
	}
	return body, nil
}
