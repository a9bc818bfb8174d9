package receiptchain

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Checkpoints. Every so often the service signs where an organisation's
// chain stands, with an Ed25519 key whose public half it publishes
// (GET /v1/receipts/signing-keys). A checkpoint is the JSON object
//
//	{"v":1, "orgId":O, "entries":N, "headHash":H, "signedAt":T, "keyId":K, "signature":S}
//
// where N is the number of entries the chain held, H the hash of entry N,
// T the time of signing (RFC 3339, UTC, microseconds, "Z"), K the id of
// the signing key and
//
//	S = unpadded base64url of Ed25519( RFC 8785 canonical JSON of the checkpoint without "signature" )
//
// A checkpoint held by an auditor proves that the chain had N entries
// ending in H: an export that ends before entry N was cut, one whose entry
// N hashes otherwise was rewritten. In an export a checkpoint is the line
// {"checkpoint":C}, right after the entry it signs.

// CheckpointVersion is the checkpoint format this package writes and
// checks (the "v" member).
const CheckpointVersion = 1

// Algorithm is the one signature algorithm of checkpoints.
const Algorithm = "Ed25519"

// TimeLayout is how a checkpoint's and a key's times are written.
const TimeLayout = "2006-01-02T15:04:05.000000Z"

// Checkpoint is a signed statement of where an organisation's chain stood.
type Checkpoint struct {
	V         int    `json:"v"`
	OrgID     string `json:"orgId"`
	Entries   int64  `json:"entries"`
	HeadHash  string `json:"headHash"`
	SignedAt  string `json:"signedAt"`
	KeyID     string `json:"keyId"`
	Signature string `json:"signature"`
}

// checkpointBody is a checkpoint without its signature, the value signed.
type checkpointBody struct {
	V        int    `json:"v"`
	OrgID    string `json:"orgId"`
	Entries  int64  `json:"entries"`
	HeadHash string `json:"headHash"`
	SignedAt string `json:"signedAt"`
	KeyID    string `json:"keyId"`
}

// SignedBytes is what c's signature covers: the canonical JSON of c
// without "signature".
func SignedBytes(c Checkpoint) ([]byte, error) {
	raw, err := json.Marshal(checkpointBody{V: c.V, OrgID: c.OrgID, Entries: c.Entries, HeadHash: c.HeadHash, SignedAt: c.SignedAt, KeyID: c.KeyID})
	if err != nil {
		return nil, err
	}
	return Canonical(raw)
}

// Sign returns the checkpoint of orgID's chain at head, signed at at with
// key (its id keyID).
func Sign(key ed25519.PrivateKey, keyID, orgID string, head Head, at time.Time) (Checkpoint, error) {
	c := Checkpoint{V: CheckpointVersion, OrgID: orgID, Entries: head.Seq, HeadHash: head.Hash,
		SignedAt: at.UTC().Format(TimeLayout), KeyID: keyID}
	msg, err := SignedBytes(c)
	if err != nil {
		return Checkpoint{}, err
	}
	c.Signature = base64.RawURLEncoding.EncodeToString(ed25519.Sign(key, msg))
	return c, nil
}

// CheckpointLine is c as an export line, {"checkpoint":c} in canonical
// form.
func CheckpointLine(c Checkpoint) ([]byte, error) {
	raw, err := json.Marshal(struct {
		Checkpoint Checkpoint `json:"checkpoint"`
	}{c})
	if err != nil {
		return nil, err
	}
	return Canonical(raw)
}

// PublishedKey is one signing key as GET /v1/receipts/signing-keys
// publishes it: the key signed the checkpoints whose signedAt lies in
// [ValidFrom, ValidUntil] (ValidUntil null: the key signs today).
type PublishedKey struct {
	KeyID     string `json:"keyId"`
	Algorithm string `json:"algorithm"`
	// PublicKey is the 32-byte Ed25519 public key, unpadded base64url (a
	// JWK's "x").
	PublicKey  string  `json:"publicKey"`
	ValidFrom  string  `json:"validFrom"`
	ValidUntil *string `json:"validUntil"`
}

// KeySet is the published signing keys, newest first.
type KeySet struct {
	Keys []PublishedKey `json:"keys"`
}

// ErrBadSignature is what CheckSignature returns for a checkpoint whose
// signature does not verify under the key it names.
var ErrBadSignature = errors.New("the signature does not verify")

// CheckSignature checks c against the published keys: the key it names
// exists, is Ed25519, was valid when c says it was signed, and c's
// signature verifies under it.
func (ks KeySet) CheckSignature(c Checkpoint) error {
	if c.V != CheckpointVersion {
		return fmt.Errorf("checkpoint format v%d; this verifier reads v%d", c.V, CheckpointVersion)
	}
	var key *PublishedKey
	for i := range ks.Keys {
		if ks.Keys[i].KeyID == c.KeyID {
			key = &ks.Keys[i]
		}
	}
	if key == nil {
		return fmt.Errorf("it names signing key %q, which is not among the published keys", c.KeyID)
	}
	if key.Algorithm != Algorithm {
		return fmt.Errorf("signing key %q is %s, not %s", c.KeyID, key.Algorithm, Algorithm)
	}
	pub, err := base64.RawURLEncoding.DecodeString(key.PublicKey)
	if err != nil || len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("signing key %q: the public key is not 32 bytes of unpadded base64url", c.KeyID)
	}
	at, err := time.Parse(time.RFC3339Nano, c.SignedAt)
	if err != nil {
		return fmt.Errorf("signedAt %q is not an RFC 3339 time", c.SignedAt)
	}
	if from, err := time.Parse(time.RFC3339Nano, key.ValidFrom); err != nil || at.Before(from) {
		return fmt.Errorf("it was signed at %s, before signing key %q was valid (from %s)", c.SignedAt, c.KeyID, key.ValidFrom)
	}
	if key.ValidUntil != nil {
		if until, err := time.Parse(time.RFC3339Nano, *key.ValidUntil); err != nil || at.After(until) {
			return fmt.Errorf("it was signed at %s, after signing key %q was retired (%s)", c.SignedAt, c.KeyID, *key.ValidUntil)
		}
	}
	sig, err := base64.RawURLEncoding.DecodeString(c.Signature)
	if err != nil {
		return ErrBadSignature
	}
	msg, err := SignedBytes(c)
	if err != nil {
		return err
	}
	if !ed25519.Verify(pub, msg, sig) {
		return ErrBadSignature
	}
	return nil
}
