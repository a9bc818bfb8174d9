package domain

import (
	"strings"
	"testing"
)

// base64URL is the alphabet of a run token's secret.
const base64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

func TestRunTokenRoundTrip(t *testing.T) {
	for range 50 {
		runID := NewID(PrefixRun)
		token, hash := NewRunToken(runID)
		if !strings.HasPrefix(token, "vrx_") || strings.ContainsAny(token, "/?#%.= ") {
			t.Fatalf("got token %q; want vrx_ and path-safe characters only", token)
		}
		gotID, secret, ok := ParseRunToken(token)
		if !ok || gotID != runID {
			t.Fatalf("ParseRunToken(%q) = %q, ok %v; want %q", token, gotID, ok, runID)
		}
		if got := HashRunSecret(secret); got != hash {
			t.Fatalf("got hash %s of the parsed secret; want the recorded %s", got, hash)
		}
		r := Run{TokenHash: hash}
		if !r.TokenMatches(secret) {
			t.Fatal("the run does not accept its own token's secret")
		}
		other, _ := NewRunToken(runID)
		_, otherSecret, _ := ParseRunToken(other)
		if r.TokenMatches(otherSecret) {
			t.Fatal("the run accepts another token's secret for the same run id")
		}
	}
}

func TestRunTokenWithoutHashMatchesNothing(t *testing.T) {
	token, _ := NewRunToken(NewID(PrefixRun))
	_, secret, _ := ParseRunToken(token)
	if (&Run{}).TokenMatches(secret) {
		t.Fatal("a run with no recorded hash accepts a secret")
	}
}

func TestParseRunTokenRefusesMalformed(t *testing.T) {
	good, _ := NewRunToken(NewID(PrefixRun))
	body := strings.TrimPrefix(good, "vrx_")
	idPart, secret := body[:32], body[33:]
	tests := map[string]string{
		"empty":                   "",
		"prefix only":             "vrx_",
		"an API key":              "pbk_0192a9b4c5d6e7f8_" + secret,
		"a run id":                "run_" + idPart,
		"another prefix":          "vrz_" + body,
		"upper-case prefix":       "VRX_" + body,
		"upper-case run id":       "vrx_" + strings.ToUpper(idPart) + "_" + secret,
		"non-hex run id":          "vrx_" + "g" + idPart[1:] + "_" + secret,
		"short run id":            "vrx_" + idPart[1:] + "_" + secret + "A",
		"no separator":            "vrx_" + idPart + "-" + secret,
		"short secret":            "vrx_" + idPart + "_" + secret[1:],
		"long secret":             "vrx_" + idPart + "_" + secret + "A",
		"padded secret":           "vrx_" + idPart + "_" + secret[:42] + "=",
		"standard base64 '+'":     "vrx_" + idPart + "_" + "+" + secret[1:],
		"standard base64 '/'":     "vrx_" + idPart + "_" + "/" + secret[1:],
		"dot in secret":           "vrx_" + idPart + "_" + "." + secret[1:],
		"space in secret":         "vrx_" + idPart + "_" + " " + secret[1:],
		"trailing newline":        good + "\n",
		"leading space":           " " + good,
		"percent-encoded":         "vrx_" + idPart + "_%41" + secret[3:],
		"non-ASCII in secret":     "vrx_" + idPart + "_é" + secret[2:],
		"JWT-shaped":              "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln",
		"token twice":             good + good,
		"separator inside run id": "vrx_" + idPart[:31] + "__" + secret[1:],
	}
	for name, token := range tests {
		t.Run(name, func(t *testing.T) {
			if id, sec, ok := ParseRunToken(token); ok {
				t.Errorf("ParseRunToken(%q) = %q, %q, true; want refused", token, id, sec)
			}
		})
	}
}

// TestParseRunTokenRefusesLineBreaksInTheSecret: encoding/base64 skips CR
// and LF when decoding, so a check that only decodes the secret accepts a
// token with a line break in it. Such a token matches no run (the hash is
// over the text), but the parser must not call it a token: one token, one
// spelling.
func TestParseRunTokenRefusesLineBreaksInTheSecret(t *testing.T) {
	good, _ := NewRunToken(NewID(PrefixRun))
	for _, brk := range []string{"\n", "\r"} {
		token := good[:len(good)-2] + brk + good[len(good)-1:]
		if _, _, ok := ParseRunToken(token); ok {
			t.Errorf("ParseRunToken accepts %q; want a secret of base64url characters only", token)
		}
	}
}

// FuzzParseRunToken checks that the parser never panics, that what it
// accepts is exactly a token NewRunToken could have made (vrx_, a run id
// body, _, 43 base64url characters) and spells back to the same string,
// and that every token NewRunToken makes is accepted.
func FuzzParseRunToken(f *testing.F) {
	for range 4 {
		token, _ := NewRunToken(NewID(PrefixRun))
		f.Add(token)
		f.Add(token[:len(token)-1])
		f.Add(token + "=")
		f.Add(strings.Replace(token, "_", "-", 1))
	}
	f.Add("")
	f.Add("vrx_")
	f.Add("pbk_0192a9b4c5d6e7f8_c2VjcmV0")
	f.Add("vrx_00000000000000000000000000000000_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
	f.Fuzz(func(t *testing.T, s string) {
		runID, secret, ok := ParseRunToken(s)
		if !ok {
			if runID != "" || secret != "" {
				t.Fatalf("ParseRunToken(%q) refused but returned %q, %q", s, runID, secret)
			}
			return
		}
		if !HasPrefix(runID, PrefixRun) {
			t.Fatalf("ParseRunToken(%q) gave run id %q; want a run id", s, runID)
		}
		if len(secret) != 43 || strings.Trim(secret, base64URL) != "" {
			t.Fatalf("ParseRunToken(%q) gave secret %q; want 43 base64url characters", s, secret)
		}
		if back := "vrx_" + strings.TrimPrefix(runID, PrefixRun+"_") + "_" + secret; back != s {
			t.Fatalf("ParseRunToken(%q) spells back as %q", s, back)
		}
		// A fresh token for the parsed run id round-trips too.
		token, hash := NewRunToken(runID)
		id2, secret2, ok := ParseRunToken(token)
		if !ok || id2 != runID || HashRunSecret(secret2) != hash {
			t.Fatalf("NewRunToken(%q) = %q does not round-trip", runID, token)
		}
	})
}
