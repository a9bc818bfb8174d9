package domain

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
)

// webhookSecretPrefix marks a webhook signing secret, as Stripe's whsec_.
const webhookSecretPrefix = "whsec_"

// NewWebhookSecret returns a fresh signing secret: whsec_ and 256 random
// bits in unpadded base64url. The HMAC key is the whole string's bytes.
func NewWebhookSecret() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	return webhookSecretPrefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// SecretHint returns the last four characters of secret (spec 2.6).
func SecretHint(secret string) string {
	if len(secret) <= 4 {
		return secret
	}
	return secret[len(secret)-4:]
}

// SecretBox seals webhook signing secrets with AES-256-GCM under the
// server key, so they can be stored in events yet used for HMAC. The
// subscription id is the additional data: a sealed secret moved to another
// subscription does not open.
type SecretBox struct {
	aead cipher.AEAD
}

// sealVersion is the first byte of a sealed secret: the format (and, when
// the server key is rotated one day, which key).
const sealVersion = 1

// NewSecretBox returns a box over a 32-byte key.
func NewSecretBox(key []byte) (*SecretBox, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("webhook secret key: got %d bytes; want 32", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &SecretBox{aead: aead}, nil
}

// Seal returns secret sealed for subscription webhookID: version byte,
// random nonce, ciphertext and tag.
func (b *SecretBox) Seal(webhookID, secret string) []byte {
	out := make([]byte, 1+b.aead.NonceSize(), 1+b.aead.NonceSize()+len(secret)+b.aead.Overhead())
	out[0] = sealVersion
	_, _ = rand.Read(out[1:])
	return b.aead.Seal(out, out[1:], []byte(secret), []byte(webhookID))
}

// ErrSecretUnreadable is returned by Open for a sealed secret that this
// key cannot open (another server key, another subscription, or damage).
var ErrSecretUnreadable = errors.New("webhook secret cannot be opened with this server key")

// Open returns the secret sealed for webhookID.
func (b *SecretBox) Open(webhookID string, sealed []byte) (string, error) {
	n := b.aead.NonceSize()
	if len(sealed) < 1+n || sealed[0] != sealVersion {
		return "", ErrSecretUnreadable
	}
	plain, err := b.aead.Open(nil, sealed[1:1+n], sealed[1+n:], []byte(webhookID))
	if err != nil {
		return "", ErrSecretUnreadable
	}
	return string(plain), nil
}
