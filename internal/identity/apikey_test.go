package identity

import (
	"os"
	"strings"
	"testing"

	"phonefleet/domain"
)

func TestAPIKeyTokenRoundTrip(t *testing.T) {
	for i := 0; i < 200; i++ {
		tok, err := NewAPIKeyToken()
		if err != nil {
			t.Fatal(err)
		}
		if len(tok.Token) != APIKeyLen {
			t.Fatalf("got token length %d; want %d", len(tok.Token), APIKeyLen)
		}
		if strings.Count(tok.Token, "_") != 2 || strings.Contains(tok.Token, ".") {
			t.Fatalf("got token %q; want exactly two underscores and no dots", tok.Token)
		}
		id, secret, err := ParseAPIKey(tok.Token)
		if err != nil {
			t.Fatalf("ParseAPIKey(%q): %v", tok.Token, err)
		}
		if id != tok.KeyID || secret != tok.Secret {
			t.Fatalf("got (%q, %q); want (%q, %q)", id, secret, tok.KeyID, tok.Secret)
		}
		if !domain.HasPrefix(id, domain.PrefixAPIKey) {
			t.Fatalf("got key id %q; want key_<32 hex>", id)
		}
	}
}

func TestNewSecretForKeepsKeyID(t *testing.T) {
	first, err := NewAPIKeyToken()
	if err != nil {
		t.Fatal(err)
	}
	second, err := NewSecretFor(first.KeyID)
	if err != nil {
		t.Fatal(err)
	}
	if second.KeyID != first.KeyID || second.Secret == first.Secret {
		t.Fatalf("got %+v after %+v; want the same id and a new secret", second, first)
	}
	if _, err := NewSecretFor("not-a-key"); err == nil {
		t.Fatal("NewSecretFor(not-a-key): got nil error; want one")
	}
}

func TestParseAPIKeyRefusesMalformed(t *testing.T) {
	good, err := NewAPIKeyToken()
	if err != nil {
		t.Fatal(err)
	}
	flip := func(i int) string {
		b := []byte(good.Token)
		if b[i] == '0' {
			b[i] = '1'
		} else {
			b[i] = '0'
		}
		return string(b)
	}
	tests := []struct {
		name  string
		token string
	}{
		{"prefix only", "pbk_"},
		{"three parts", "pbk_a_b_c"},
		{"empty", ""},
		{"non-ASCII", "pbk_" + strings.Repeat("é", 33) + "_" + strings.Repeat("ü", 16)},
		{"ten kilobytes", "pbk_" + strings.Repeat("a", 10<<10)},
		{"one character short", good.Token[:len(good.Token)-1]},
		{"one character long", good.Token + "0"},
		{"typo in the secret", flip(APIKeyLen - 10)},
		{"typo in the key id", flip(10)},
		{"typo in the checksum", flip(APIKeyLen - 1)},
		{"upper case", strings.ToUpper(good.Token[:4]) + good.Token[4:]},
		{"upper-case secret", good.Token[:40] + strings.ToUpper(good.Token[40:])},
		{"separator moved", good.Token[:35] + "_" + good.Token[35:36] + good.Token[37:]},
		{"wrong prefix", "pbx_" + good.Token[4:]},
		{"underscore in secret", good.Token[:50] + "_" + good.Token[51:]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if id, secret, err := ParseAPIKey(tt.token); err != ErrMalformedKey {
				t.Fatalf("ParseAPIKey: got (%q, %q, %v); want ErrMalformedKey", id, secret, err)
			}
		})
	}
}

func TestHasher(t *testing.T) {
	pepper := []byte(strings.Repeat("p", PepperLen))
	h, err := NewHasher(pepper)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewHasher([]byte(strings.Repeat("q", PepperLen)))
	if string(h.Hash("s")) == string(other.Hash("s")) {
		t.Fatal("two peppers gave one hash; want the pepper to key the HMAC")
	}
	if h.Fingerprint() == other.Fingerprint() {
		t.Fatal("two peppers gave one fingerprint")
	}
	if _, err := NewHasher([]byte("short")); err == nil {
		t.Fatal("NewHasher(short pepper): got nil error; want one")
	}
}

func TestLoadOrCreatePepper(t *testing.T) {
	dir := t.TempDir()
	first, path, err := LoadOrCreatePepper(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != PepperLen {
		t.Fatalf("got %d bytes; want %d", len(first), PepperLen)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode().Perm(); got != 0o600 {
		t.Fatalf("got mode %o; want 600", got)
	}
	again, _, err := LoadOrCreatePepper(dir)
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != string(first) {
		t.Fatal("second start read another pepper; want the one created first")
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadOrCreatePepper(dir); err == nil {
		t.Fatal("got a pepper readable by others accepted; want a refusal")
	}
}

// FuzzParseAPIKey checks that no input panics, and that anything accepted
// is exactly a well-formed token whose parts re-assemble it.
func FuzzParseAPIKey(f *testing.F) {
	good, _ := NewAPIKeyToken()
	for _, s := range []string{good.Token, "pbk_", "pbk_a_b_c", "pbk_" + strings.Repeat("é", 40), strings.Repeat("x", 10<<10),
		good.Token[:len(good.Token)-1] + "z", "", "pbk__", "Bearer pbk_"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, secret, err := ParseAPIKey(s)
		if err != nil {
			return
		}
		if got := APIKeyPrefix + id[len(domain.PrefixAPIKey)+1:] + "_" + secret; got != s {
			t.Fatalf("accepted %q but its parts make %q", s, got)
		}
		if len(s) != APIKeyLen {
			t.Fatalf("accepted %q of length %d; want %d", s, len(s), APIKeyLen)
		}
	})
}
