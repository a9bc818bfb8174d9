package webhooksig_test

import (
	"bytes"
	"errors"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	stripewebhook "github.com/stripe/stripe-go/v79/webhook"

	"phonefleet/webhooksig"
)

const secret = "whsec_test_secret_for_the_verifier"

var body = []byte(`{"deliveryId":"dlv_0190a1b2c3d4e5f60718293a4b5c6d7e","event":"run.ended","occurredAt":"2026-01-02T03:04:05.000006Z","data":{"test":true}}`)

func TestVerify(t *testing.T) {
	now := time.Unix(1_767_225_600, 0)
	good := webhooksig.Sign(secret, now, body)
	tests := []struct {
		name   string
		body   []byte
		header string
		secret string
		now    time.Time
		want   error
	}{
		{"valid", body, good, secret, now, nil},
		{"valid 299 s later", body, good, secret, now.Add(299 * time.Second), nil},
		{"valid 299 s earlier (receiver clock behind)", body, good, secret, now.Add(-299 * time.Second), nil},
		{"too old", body, good, secret, now.Add(301 * time.Second), webhooksig.ErrTimestamp},
		{"too far in the future", body, good, secret, now.Add(-301 * time.Second), webhooksig.ErrTimestamp},
		{"body changed", append(bytes.Clone(body), ' '), good, secret, now, webhooksig.ErrMismatch},
		{"wrong secret", body, good, "whsec_other", now, webhooksig.ErrMismatch},
		{"timestamp changed", body, "t=" + strconv.FormatInt(now.Unix()+1, 10) + good[len("t=1767225600"):], secret, now, webhooksig.ErrMismatch},
		{"second v1 matches", body, "t=1767225600,v1=00," + good[len("t=1767225600,"):], secret, now, nil},
		{"no header", body, "", secret, now, webhooksig.ErrNoSignature},
		{"no v1", body, "t=1767225600", secret, now, webhooksig.ErrMalformed},
		{"no t", body, good[len("t=1767225600,"):], secret, now, webhooksig.ErrMalformed},
		{"garbage", body, "sha256=abc", secret, now, webhooksig.ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := webhooksig.Verify(tt.body, tt.header, tt.secret, tt.now, 0)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("got %v; want %v", err, tt.want)
			}
		})
	}
}

// TestStripeVerifierAgrees checks the scheme against an independent
// implementation: stripe-go's webhook verifier accepts what Sign produces,
// and Verify accepts what stripe-go produces.
func TestStripeVerifierAgrees(t *testing.T) {
	now := time.Now()
	header := webhooksig.Sign(secret, now, body)
	if err := stripewebhook.ValidatePayloadWithTolerance(body, header, secret, webhooksig.DefaultTolerance); err != nil {
		t.Fatalf("stripe-go refused our signature: %v", err)
	}
	if err := stripewebhook.ValidatePayloadWithTolerance(body, header, "whsec_other", webhooksig.DefaultTolerance); err == nil {
		t.Fatal("stripe-go accepted our signature under another secret; want a refusal")
	}
	signed := stripewebhook.GenerateTestSignedPayload(&stripewebhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: now})
	if err := webhooksig.Verify(body, signed.Header, secret, now, 0); err != nil {
		t.Fatalf("Verify refused stripe-go's signature %q: %v", signed.Header, err)
	}
}

func TestReadAndVerify(t *testing.T) {
	now := time.Now()
	r := httptest.NewRequest("POST", "/hook", bytes.NewReader(body))
	r.Header.Set(webhooksig.SignatureHeader, webhooksig.Sign(secret, now, body))
	got, err := webhooksig.ReadAndVerify(r, secret, now)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("got %q, %v; want the raw body", got, err)
	}
	big := bytes.Repeat([]byte("a"), webhooksig.MaxBodyBytes+1)
	r = httptest.NewRequest("POST", "/hook", bytes.NewReader(big))
	r.Header.Set(webhooksig.SignatureHeader, webhooksig.Sign(secret, now, big))
	if _, err := webhooksig.ReadAndVerify(r, secret, now); !errors.Is(err, webhooksig.ErrBodyTooLarge) {
		t.Fatalf("got %v; want ErrBodyTooLarge", err)
	}
}
