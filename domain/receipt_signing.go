package domain

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"time"

	"phonefleet/receiptchain"
)

// receiptSigningEvents are the events of the service's receipt signing
// keys and of the checkpoints they sign.
//
// The keys live in one stream for the whole service
// (ReceiptSigningKeysStream), so instances starting together agree on one
// active key (the first to append version 1 wins) and a rotation is decided
// on the keys as they stand. Each organisation's checkpoints live in their
// own stream (ReceiptCheckpointStream), whose version counts them, so two
// instances never record the same checkpoint twice.
var receiptSigningEvents = []EventDef{
	Def[ReceiptSigningKeyGenerated](1, nil),
	Def[ReceiptCheckpointSigned](1, nil),
}

// ReceiptSigningKeysStream is the stream of the service's receipt signing
// keys. Its events belong to no organisation.
const ReceiptSigningKeysStream = "receipt-signing-keys"

// ReceiptCheckpointStream is the stream of orgID's checkpoints.
func ReceiptCheckpointStream(orgID string) string { return "receipt-checkpoints-" + orgID }

// PrefixSigningKey starts a receipt signing key's id.
const PrefixSigningKey = "rsk"

// ReceiptSigningKeyGenerated records a new signing key, which signs every
// checkpoint from ValidFrom on; the key before it (if any) stops signing
// then. The private key (its 32-byte Ed25519 seed) is stored only sealed
// under the server key (SecretBox, with the key id as additional data).
type ReceiptSigningKeyGenerated struct {
	KeyID      string    `json:"keyId"`
	PublicKey  []byte    `json:"publicKey"`
	SealedSeed []byte    `json:"sealedSeed"`
	ValidFrom  time.Time `json:"validFrom"`
	// Reason is "first_start" or "rotated".
	Reason string `json:"reason"`
}

// EventName implements Event.
func (ReceiptSigningKeyGenerated) EventName() string { return "receipt_signing.key_generated" }

// ReceiptCheckpointSigned records one signed checkpoint of an
// organisation's receipt chain (package receiptchain defines its format).
type ReceiptCheckpointSigned struct {
	Checkpoint receiptchain.Checkpoint `json:"checkpoint"`
}

// EventName implements Event.
func (ReceiptCheckpointSigned) EventName() string { return "receipt.checkpoint_signed" }

// SigningKey is one receipt signing key as its stream records it.
type SigningKey struct {
	KeyID      string
	PublicKey  []byte
	SealedSeed []byte
	ValidFrom  time.Time
	// ValidUntil is when the next key took over; zero for the active key.
	ValidUntil time.Time
}

// SigningKeys is the state of the signing keys' stream, oldest first; the
// last is the active key.
type SigningKeys struct {
	Keys []SigningKey
}

// Active returns the key that signs today; ok false before the first.
func (s SigningKeys) Active() (SigningKey, bool) {
	if len(s.Keys) == 0 {
		return SigningKey{}, false
	}
	return s.Keys[len(s.Keys)-1], true
}

// Apply folds one event into the keys.
func (s *SigningKeys) Apply(e Event) {
	g, ok := e.(ReceiptSigningKeyGenerated)
	if !ok {
		return
	}
	if n := len(s.Keys); n > 0 {
		s.Keys[n-1].ValidUntil = g.ValidFrom
	}
	s.Keys = append(s.Keys, SigningKey{KeyID: g.KeyID, PublicKey: g.PublicKey, SealedSeed: g.SealedSeed, ValidFrom: g.ValidFrom})
}

// ValidAt returns the key whose validity [ValidFrom, ValidUntil] holds t
// (the later one at the instant one key hands over to the next); ok false
// before the first key's start.
func (s SigningKeys) ValidAt(t time.Time) (SigningKey, bool) {
	for i := len(s.Keys) - 1; i >= 0; i-- {
		k := s.Keys[i]
		if !t.Before(k.ValidFrom) && (k.ValidUntil.IsZero() || !t.After(k.ValidUntil)) {
			return k, true
		}
	}
	return SigningKey{}, false
}

// Generate returns the event of a new key, generated now and sealed in
// box: the first key (reason first_start) or the next one (rotated). A
// new key is valid from now, or from the active key's start should this
// clock be behind it, so validity windows never overlap — and strictly
// after lastSigned, the latest signature of the active key, so that
// ending the active key's validity where the new one starts retires no
// checkpoint it already signed (another instance's clock may be ahead).
func (s SigningKeys) Generate(box *SecretBox, now, lastSigned time.Time) (ReceiptSigningKeyGenerated, error) {
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		return ReceiptSigningKeyGenerated{}, err
	}
	id := NewID(PrefixSigningKey)
	from := now.UTC().Truncate(time.Microsecond)
	reason := "first_start"
	if a, ok := s.Active(); ok {
		reason = "rotated"
		if from.Before(a.ValidFrom) {
			from = a.ValidFrom
		}
		if !lastSigned.IsZero() && !from.After(lastSigned) {
			from = lastSigned.UTC().Truncate(time.Microsecond).Add(time.Microsecond)
		}
	}
	return ReceiptSigningKeyGenerated{KeyID: id, PublicKey: pub, SealedSeed: box.Seal(id, string(priv.Seed())),
		ValidFrom: from, Reason: reason}, nil
}

// ErrNoSigningKey is returned when a checkpoint is asked for before any
// key was generated.
var ErrNoSigningKey = errors.New("no receipt signing key has been generated")

// PrivateKey opens k's private key with box.
func (k SigningKey) PrivateKey(box *SecretBox) (ed25519.PrivateKey, error) {
	seed, err := box.Open(k.KeyID, k.SealedSeed)
	if err != nil {
		return nil, err
	}
	if len(seed) != ed25519.SeedSize {
		return nil, ErrSecretUnreadable
	}
	return ed25519.NewKeyFromSeed([]byte(seed)), nil
}

// Published is k as GET /v1/receipts/signing-keys shows it.
func (k SigningKey) Published() receiptchain.PublishedKey {
	p := receiptchain.PublishedKey{KeyID: k.KeyID, Algorithm: receiptchain.Algorithm,
		PublicKey: base64.RawURLEncoding.EncodeToString(k.PublicKey), ValidFrom: k.ValidFrom.UTC().Format(receiptchain.TimeLayout)}
	if !k.ValidUntil.IsZero() {
		u := k.ValidUntil.UTC().Format(receiptchain.TimeLayout)
		p.ValidUntil = &u
	}
	return p
}

// CheckpointPolicy says when an organisation's chain is signed: once
// Every entries were added since its last checkpoint, or once Interval has
// passed since it with at least one entry added.
type CheckpointPolicy struct {
	Every    int64
	Interval time.Duration
}

// Default checkpoint policy (SERVICE_RECEIPT_CHECKPOINT_EVERY and
// SERVICE_RECEIPT_CHECKPOINT_INTERVAL).
const (
	DefaultCheckpointEvery    = 100
	DefaultCheckpointInterval = 5 * time.Minute
)

// Due reports whether a chain of entries entries, whose last checkpoint
// counted lastEntries and was signed at lastAt (zero: never), is due a
// checkpoint at now. A chain that did not move is never signed again.
func (p CheckpointPolicy) Due(entries, lastEntries int64, lastAt, now time.Time) bool {
	switch {
	case entries <= lastEntries:
		return false
	case lastAt.IsZero(), entries-lastEntries >= p.Every:
		return true
	}
	return !now.Before(lastAt.Add(p.Interval))
}

// CheckpointChain is the state of an organisation's checkpoint stream:
// its last checkpoint.
type CheckpointChain struct {
	OrgID string
	Last  receiptchain.Checkpoint
}

// Apply folds one event into the chain's checkpoints.
func (c *CheckpointChain) Apply(e Event) {
	if s, ok := e.(ReceiptCheckpointSigned); ok {
		c.Last = s.Checkpoint
	}
}

// Sign returns the checkpoint event of the chain at head when policy says
// it is due at now (none otherwise), signed with the key of keys valid at
// its signing time (opened with box): the active key, or the one before
// it when this clock is behind the rotation's. It is signed at now, or at
// the first key's start should this clock be behind it, so that it lies
// in its key's validity.
func (c CheckpointChain) Sign(keys SigningKeys, box *SecretBox, head receiptchain.Head, policy CheckpointPolicy, now time.Time) ([]Event, error) {
	var lastAt time.Time
	if c.Last.SignedAt != "" {
		t, err := time.Parse(time.RFC3339Nano, c.Last.SignedAt)
		if err != nil {
			return nil, err
		}
		lastAt = t
	}
	if !policy.Due(head.Seq, c.Last.Entries, lastAt, now) {
		return nil, nil
	}
	if len(keys.Keys) == 0 {
		return nil, ErrNoSigningKey
	}
	at := now.UTC().Truncate(time.Microsecond)
	if first := keys.Keys[0].ValidFrom; at.Before(first) {
		at = first
	}
	key, _ := keys.ValidAt(at)
	priv, err := key.PrivateKey(box)
	if err != nil {
		return nil, err
	}
	cp, err := receiptchain.Sign(priv, key.KeyID, c.OrgID, head, at)
	if err != nil {
		return nil, err
	}
	return []Event{ReceiptCheckpointSigned{Checkpoint: cp}}, nil
}
