package identity

import (
	"strings"
	"testing"

	"phonefleet/domain"
)

func TestGatewayTokensRoundTrip(t *testing.T) {
	code, err := NewGatewayCode()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(code.Token, GatewayCodePrefix) || len(code.Token) != gatewayTokenLen || !domain.HasPrefix(code.ID, domain.PrefixGatewayCode) {
		t.Fatalf("code: %+v", code)
	}
	id, secret, err := ParseGatewayCode(code.Token)
	if err != nil || id != code.ID || secret != code.Secret {
		t.Fatalf("parse code: %s %s %v", id, secret, err)
	}
	gw := domain.NewID(domain.PrefixGateway)
	cred, err := NewGatewayCredential(gw)
	if err != nil {
		t.Fatal(err)
	}
	if id, secret, err := ParseGatewayCredential(cred.Token); err != nil || id != gw || secret != cred.Secret {
		t.Fatalf("parse credential: %s %s %v", id, secret, err)
	}
	// Each kind is refused where the other is expected, and so is an API key.
	if _, _, err := ParseGatewayCredential(code.Token); err == nil {
		t.Error("a code parsed as a credential")
	}
	if _, _, err := ParseGatewayCode(cred.Token); err == nil {
		t.Error("a credential parsed as a code")
	}
	key, _ := NewAPIKeyToken()
	if _, _, err := ParseGatewayCredential(key.Token); err == nil {
		t.Error("an API key parsed as a credential")
	}
	if _, err := NewGatewayCredential(code.ID); err == nil {
		t.Error("a credential minted for a code id")
	}
}

func TestParseGatewayTokenRefusesEveryDeviation(t *testing.T) {
	cred, _ := NewGatewayCredential(domain.NewID(domain.PrefixGateway))
	tok := cred.Token
	flip := func(i int) string {
		b := []byte(tok)
		if b[i] == 'a' {
			b[i] = 'b'
		} else {
			b[i] = 'a'
		}
		return string(b)
	}
	for name, bad := range map[string]string{
		"empty":          "",
		"short":          tok[:len(tok)-1],
		"long":           tok + "0",
		"secret changed": flip(len(tok) - 10),
		"id changed":     flip(6),
		"checksum":       flip(len(tok) - 1),
		"separator":      tok[:4+32] + "-" + tok[4+33:],
		"upper case":     strings.ToUpper(tok),
		"ambiguous char": tok[:len(tok)-20] + "u" + tok[len(tok)-19:],
	} {
		if _, _, err := ParseGatewayCredential(bad); err == nil {
			t.Errorf("%s: %q parsed", name, bad)
		}
	}
}

func FuzzParseGatewayCredential(f *testing.F) {
	cred, _ := NewGatewayCredential(domain.NewID(domain.PrefixGateway))
	f.Add(cred.Token)
	f.Add("pfg_")
	f.Fuzz(func(t *testing.T, s string) {
		id, secret, err := ParseGatewayCredential(s)
		if err == nil && (!domain.HasPrefix(id, domain.PrefixGateway) || len(secret) != secretLen) {
			t.Fatalf("%q parsed to %q %q", s, id, secret)
		}
	})
}
