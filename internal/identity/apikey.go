// Package identity resolves credentials to phonefleet's one authorization
// context (domain.Auth): organisation API keys verified against the key
// store, OAuth 2.1 access tokens verified offline against the authorization
// server's published keys, the role lookup for OAuth-app tokens, the
// binding of organisations to sign-in instances, local mode's operator, and
// the per-caller rate limiter shared by every instance through PostgreSQL.
package identity

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"

	"phonefleet/domain"
)

// The shape of an API key token (ARCHITECTURE.md, spec 2.7):
//
//	pbk_<key id: 32 lower-case hex>_<secret: 26 random base32 + 7 base32 checksum>
//
// The key id is the hex body of the key's id (key_<32 hex>), so the token
// names its key without a lookup table. The secret carries 130 bits of
// entropy from crypto/rand, written in Crockford's lower-case base32 (no
// underscore, no ambiguous i, l, o, u), followed by a CRC-32 of everything
// before it, so a mistyped or truncated key is refused as malformed without
// touching the store. Only HMAC-SHA-256(pepper, secret) is ever stored.
const (
	// APIKeyPrefix starts every API key token.
	APIKeyPrefix = "pbk_"
	keyIDLen     = 32
	secretRandom = 26
	checksumLen  = 7
	secretLen    = secretRandom + checksumLen
	// APIKeyLen is the length of every well-formed token.
	APIKeyLen = len(APIKeyPrefix) + keyIDLen + 1 + secretLen
)

const base32Alphabet = "0123456789abcdefghjkmnpqrstvwxyz"

// ErrMalformedKey is returned for a bearer value that starts like an API
// key but is not one (wrong length, alphabet, separators or checksum).
var ErrMalformedKey = errors.New("malformed API key")

// APIKeyToken is a freshly minted key: the token shown once, and the parts
// it is made of.
type APIKeyToken struct {
	// KeyID is the key's id, key_<32 hex>.
	KeyID string
	// Secret is the secret part of the token, checksum included; it is what
	// the hasher hashes.
	Secret string
	// Token is the whole bearer value.
	Token string
}

// NewAPIKeyToken mints a token for a new key, with a fresh time-ordered id.
func NewAPIKeyToken() (APIKeyToken, error) {
	return NewSecretFor(domain.NewID(domain.PrefixAPIKey))
}

// NewSecretFor mints a new secret for an existing key id (rotation).
func NewSecretFor(keyID string) (APIKeyToken, error) {
	if !domain.HasPrefix(keyID, domain.PrefixAPIKey) {
		return APIKeyToken{}, fmt.Errorf("identity: %q is not an API key id", keyID)
	}
	hexID := keyID[len(domain.PrefixAPIKey)+1:]
	var raw [secretRandom]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return APIKeyToken{}, err
	}
	var b strings.Builder
	b.Grow(APIKeyLen)
	b.WriteString(APIKeyPrefix)
	b.WriteString(hexID)
	b.WriteByte('_')
	for _, r := range raw {
		b.WriteByte(base32Alphabet[r&31]) // 256 is a multiple of 32: uniform
	}
	b.WriteString(checksum(b.String()))
	tok := b.String()
	return APIKeyToken{KeyID: keyID, Secret: tok[len(tok)-secretLen:], Token: tok}, nil
}

// checksum writes CRC-32 (IEEE) of s as seven base32 digits.
func checksum(s string) string {
	sum := crc32.ChecksumIEEE([]byte(s))
	var out [checksumLen]byte
	for i := checksumLen - 1; i >= 0; i-- {
		out[i] = base32Alphabet[sum&31]
		sum >>= 5
	}
	return string(out[:])
}

// ParseAPIKey splits a token into its key id (key_<32 hex>) and secret,
// checking length, separators, both alphabets and the checksum. Any
// deviation is ErrMalformedKey; it never panics, whatever the input.
func ParseAPIKey(token string) (keyID, secret string, err error) {
	if len(token) != APIKeyLen || !strings.HasPrefix(token, APIKeyPrefix) {
		return "", "", ErrMalformedKey
	}
	hexID := token[len(APIKeyPrefix) : len(APIKeyPrefix)+keyIDLen]
	if token[len(APIKeyPrefix)+keyIDLen] != '_' {
		return "", "", ErrMalformedKey
	}
	for i := 0; i < len(hexID); i++ {
		if c := hexID[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return "", "", ErrMalformedKey
		}
	}
	secret = token[len(token)-secretLen:]
	for i := 0; i < len(secret); i++ {
		if strings.IndexByte(base32Alphabet, secret[i]) < 0 {
			return "", "", ErrMalformedKey
		}
	}
	if checksum(token[:len(token)-checksumLen]) != token[len(token)-checksumLen:] {
		return "", "", ErrMalformedKey
	}
	return domain.PrefixAPIKey + "_" + hexID, secret, nil
}

// Hasher computes the stored form of a secret: HMAC-SHA-256 keyed by the
// server's pepper, so a copy of the database alone cannot be used to test
// guesses offline.
type Hasher struct {
	pepper []byte
	dummy  []byte
}

// PepperLen is the length of the server pepper in bytes.
const PepperLen = 32

// NewHasher returns a hasher for pepper, which must be PepperLen bytes.
func NewHasher(pepper []byte) (*Hasher, error) {
	if len(pepper) != PepperLen {
		return nil, fmt.Errorf("identity: the API key pepper must be %d bytes, not %d", PepperLen, len(pepper))
	}
	h := &Hasher{pepper: append([]byte(nil), pepper...)}
	h.dummy = h.Hash("phonefleet: compared when the key id is unknown")
	return h, nil
}

// Hash returns HMAC-SHA-256(pepper, secret).
func (h *Hasher) Hash(secret string) []byte {
	m := hmac.New(sha256.New, h.pepper)
	m.Write([]byte(secret))
	return m.Sum(nil)
}

// Fingerprint identifies the pepper without revealing it, so instances
// sharing a database can check that they share the pepper too.
func (h *Hasher) Fingerprint() string {
	m := hmac.New(sha256.New, h.pepper)
	m.Write([]byte("phonefleet pepper fingerprint v1"))
	return hex.EncodeToString(m.Sum(nil))[:16]
}

// pepperFile is the pepper's file name under the data directory.
const pepperFile = "api-key-pepper"

// LoadOrCreatePepper reads the server pepper from dir, creating it (mode
// 0600, 32 random bytes written as hex) on first start. A pepper file that
// others may read is refused. Every instance that serves the same database
// must hold the same file (the service checks a fingerprint at start).
func LoadOrCreatePepper(dir string) ([]byte, string, error) {
	path := filepath.Join(dir, pepperFile)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, path, err
	}
	if raw, err := os.ReadFile(path); err == nil {
		st, err := os.Stat(path)
		if err != nil {
			return nil, path, err
		}
		if st.Mode().Perm()&0o077 != 0 {
			return nil, path, fmt.Errorf("%s: readable by others (mode %v); make it 0600", path, st.Mode().Perm())
		}
		p, err := hex.DecodeString(strings.TrimSpace(string(raw)))
		if err != nil || len(p) != PepperLen {
			return nil, path, fmt.Errorf("%s: want %d bytes written as hex", path, PepperLen)
		}
		return p, path, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, path, err
	}
	p := make([]byte, PepperLen)
	if _, err := rand.Read(p); err != nil {
		return nil, path, err
	}
	// Write a temporary file and link it into place: the link either
	// creates the whole file or fails because another process did first.
	f, err := os.CreateTemp(dir, pepperFile+".tmp-*")
	if err != nil {
		return nil, path, err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return nil, path, err
	}
	if _, err := f.WriteString(hex.EncodeToString(p) + "\n"); err != nil {
		f.Close()
		return nil, path, err
	}
	if err := f.Close(); err != nil {
		return nil, path, err
	}
	if err := os.Link(f.Name(), path); errors.Is(err, os.ErrExist) {
		return LoadOrCreatePepper(dir)
	} else if err != nil {
		return nil, path, err
	}
	return p, path, nil
}
