package domain

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// CLI sign-in (issue 15, spec 4.5 "/v1/cli-sessions family"), in the style
// of the OAuth device authorization grant (RFC 8628): `phonefleet login`
// starts a session without a credential and is given a short user code and
// a secret poll token; a signed-in person looks the code up in the console
// and approves or denies it; approval mints an API key for that person and
// seals its token to the X25519 public key the CLI sent when it started,
// so the token is stored (in the approval event) only as a ciphertext that
// the CLI alone can open; the CLI's next poll receives it once.

// PrefixCLISession is the type prefix of a CLI sign-in session's id.
const PrefixCLISession = "cls"

// Bounds of a CLI sign-in.
const (
	// CLISessionLifetime is how long a session waits for a decision.
	CLISessionLifetime = 10 * time.Minute
	// CLIPollInterval is how often the CLI is asked to poll.
	CLIPollInterval = 5 * time.Second
	// MaxCLIClientNameRunes bounds the client name a CLI gives.
	MaxCLIClientNameRunes = 100
	// MaxCLIHostRunes bounds the host name a CLI gives (the key is named
	// "CLI on <host>", within MaxAPIKeyNameLen).
	MaxCLIHostRunes = 64
	// DefaultCLIClientName names a CLI that gives no name.
	DefaultCLIClientName = "phonefleet CLI"
	// unnamedCLIHost stands for a host the CLI did not name.
	unnamedCLIHost = "an unnamed host"
)

// States of a CLI sign-in as a poll and the console report them.
const (
	// CLIStatePending waits for a person's decision.
	CLIStatePending = "pending"
	// CLIStateApproved has a key waiting for the CLI's next poll.
	CLIStateApproved = "approved"
	// CLIStateConsumed was approved and its key handed to the CLI.
	CLIStateConsumed = "consumed"
	// CLIStateDenied was refused by a person.
	CLIStateDenied = "denied"
	// CLIStateExpired was not decided within CLISessionLifetime.
	CLIStateExpired = "expired"
)

// DefaultCLIScopes are the scopes a CLI asks for when it names none: the
// device and run scopes every session holds (spec 5.4).
var DefaultCLIScopes = []Scope{ScopeDevicesRead, ScopeDevicesAct, ScopeDevicesLease, ScopeRunsStart}

// CLISessionStream returns the stream of CLI sign-in session id.
func CLISessionStream(id string) string { return "clisession-" + id }

// CLICodeStream returns the stream of the claims on user code code (in
// its canonical form, ParseUserCode).
func CLICodeStream(code string) string { return "clicode-" + code }

// ---- User codes.

// userCodeAlphabet holds twenty upper-case consonants (RFC 8628 6.1): no
// vowels, so a code never spells a word, and no digits or letters easily
// mistaken for each other when read aloud or typed (no I, O, U, Y).
const userCodeAlphabet = "BCDFGHJKLMNPQRSTVWXZ"

// userCodeLetters is the number of letters of a user code: 20^8 ≈ 2^34.6
// codes, against a guesser who must also hold a signed-in session and is
// rate-limited, within a ten-minute life.
const userCodeLetters = 8

// maxUserCodeInput bounds how much of a typed code ParseUserCode reads.
const maxUserCodeInput = 32

// NewUserCode returns a fresh user code, four letters, a hyphen and four
// letters (BCDF-GHJK), drawn uniformly from crypto/rand.
func NewUserCode() string {
	var out []byte
	var b [16]byte
	for len(out) < userCodeLetters+1 {
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
		for _, c := range b {
			if c >= 240 || len(out) == userCodeLetters+1 { // 240 = 12 × 20: keep the draw uniform
				continue
			}
			if len(out) == 4 {
				out = append(out, '-')
			}
			out = append(out, userCodeAlphabet[int(c)%len(userCodeAlphabet)])
		}
	}
	return string(out)
}

// ParseUserCode returns the canonical form (BCDF-GHJK) of a code as a
// person may type it: any case, with or without the hyphen, spaces
// between letters. ok is false for anything else; it never panics and
// reads at most 32 bytes of s.
func ParseUserCode(s string) (code string, ok bool) {
	if len(s) > maxUserCodeInput {
		return "", false
	}
	letters := make([]byte, 0, userCodeLetters)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '-' || c == ' ':
			continue
		case c >= 'a' && c <= 'z':
			c -= 'a' - 'A'
		}
		if strings.IndexByte(userCodeAlphabet, c) < 0 || len(letters) == userCodeLetters {
			return "", false
		}
		letters = append(letters, c)
	}
	if len(letters) != userCodeLetters {
		return "", false
	}
	return string(letters[:4]) + "-" + string(letters[4:]), true
}

// ---- Poll tokens.

// PollTokenPrefix starts every poll token, so one found in a log or a
// file is recognisable.
const PollTokenPrefix = "pfp_"

// pollTokenBytes is the poll token's entropy: 256 bits.
const pollTokenBytes = 32

// PollTokenLen is the length of every well-formed poll token.
var PollTokenLen = len(PollTokenPrefix) + base64.RawURLEncoding.EncodedLen(pollTokenBytes)

// pollTokenEncoding is unpadded base64url that refuses stray bits in the
// last character, so each token has exactly one spelling.
var pollTokenEncoding = base64.RawURLEncoding.Strict()

// NewPollToken returns a fresh poll token: pfp_ and 256 random bits in
// unpadded base64url.
func NewPollToken() string {
	var b [pollTokenBytes]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	return PollTokenPrefix + pollTokenEncoding.EncodeToString(b[:])
}

// ParsePollToken checks the shape of a poll token (prefix, length,
// alphabet) and returns the hash that is stored for it. ok is false for
// anything else; it never panics, whatever the input.
func ParsePollToken(s string) (hash []byte, ok bool) {
	if len(s) != PollTokenLen || !strings.HasPrefix(s, PollTokenPrefix) {
		return nil, false
	}
	raw, err := pollTokenEncoding.DecodeString(s[len(PollTokenPrefix):])
	if err != nil || len(raw) != pollTokenBytes {
		return nil, false
	}
	return HashPollToken(s), true
}

// HashPollToken returns the stored form of a poll token: SHA-256 of it.
// A pepper is not needed: the token carries 256 random bits, so its hash
// cannot be reversed by guessing.
func HashPollToken(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// ---- The sealed key token.

// SealAlgorithm names how a key token is sealed to the CLI: an ephemeral
// X25519 key agreement with the CLI's public key, HKDF-SHA-256 over the
// shared secret (salt: the two public keys; info: the session id), and
// AES-256-GCM with the session id as additional data.
const SealAlgorithm = "X25519-HKDF-SHA256-A256GCM"

// SealedToken is a key token sealed to a CLI's public key. Every part is
// unpadded base64url.
type SealedToken struct {
	Alg                string `json:"alg"`
	EphemeralPublicKey string `json:"ephemeralPublicKey"`
	Nonce              string `json:"nonce"`
	Ciphertext         string `json:"ciphertext"`
}

// cliPublicKeyText is the length of a CLI public key's text: 32 bytes in
// unpadded base64url. Only that length is read, because the decoder skips
// CR and LF: "AAAA\rAAAA…" would otherwise be a second spelling of a key.
const cliPublicKeyText = 43

// ParseCLIPublicKey reads a CLI's X25519 public key written as unpadded
// base64url (43 characters). A refusal is invalid_argument naming the
// field publicKey.
func ParseCLIPublicKey(s string) (*ecdh.PublicKey, error) {
	bad := Errorf(CodeInvalidArgument, "publicKey must be an X25519 public key (32 bytes) in unpadded base64url").With("field", "publicKey")
	if len(s) != cliPublicKeyText {
		return nil, bad
	}
	raw, err := pollTokenEncoding.DecodeString(s)
	if err != nil {
		return nil, bad
	}
	pub, err := ecdh.X25519().NewPublicKey(raw)
	if err != nil {
		return nil, bad
	}
	return pub, nil
}

// sealAEAD derives the session's one-time AES-256-GCM key.
func sealAEAD(shared, ephemeral, recipient []byte, sessionID string) (cipher.AEAD, error) {
	key, err := hkdf.Key(sha256.New, shared, slices.Concat(ephemeral, recipient), "phonefleet cli-session v1 "+sessionID, 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// SealCLIToken seals token for session sessionID to the CLI public key
// recipient (as ParseCLIPublicKey reads it). Only the holder of the
// matching private key can open it (OpenCLIToken), and only for the same
// session.
func SealCLIToken(recipient, sessionID, token string) (SealedToken, error) {
	pub, err := ParseCLIPublicKey(recipient)
	if err != nil {
		return SealedToken{}, err
	}
	eph, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return SealedToken{}, err
	}
	shared, err := eph.ECDH(pub)
	if err != nil {
		// A low-order public key gives an all-zero secret: refused.
		return SealedToken{}, Errorf(CodeInvalidArgument, "the CLI's publicKey cannot be used for key agreement").With("field", "publicKey")
	}
	aead, err := sealAEAD(shared, eph.PublicKey().Bytes(), pub.Bytes(), sessionID)
	if err != nil {
		return SealedToken{}, err
	}
	nonce := make([]byte, aead.NonceSize())
	_, _ = rand.Read(nonce)
	ct := aead.Seal(nil, nonce, []byte(token), []byte(sessionID))
	enc := base64.RawURLEncoding
	return SealedToken{Alg: SealAlgorithm, EphemeralPublicKey: enc.EncodeToString(eph.PublicKey().Bytes()),
		Nonce: enc.EncodeToString(nonce), Ciphertext: enc.EncodeToString(ct)}, nil
}

// ErrSealedToken is returned by OpenCLIToken for a sealed token that does
// not open: another algorithm, malformed parts, another session, another
// key, or altered bytes.
var ErrSealedToken = errors.New("the sealed key token does not open with this key")

// OpenCLIToken opens a token sealed for session sessionID with the CLI's
// private key.
func OpenCLIToken(priv *ecdh.PrivateKey, sessionID string, s SealedToken) (string, error) {
	if priv == nil || s.Alg != SealAlgorithm {
		return "", ErrSealedToken
	}
	enc := base64.RawURLEncoding
	ephRaw, err1 := enc.DecodeString(s.EphemeralPublicKey)
	nonce, err2 := enc.DecodeString(s.Nonce)
	ct, err3 := enc.DecodeString(s.Ciphertext)
	if err := errors.Join(err1, err2, err3); err != nil {
		return "", ErrSealedToken
	}
	eph, err := ecdh.X25519().NewPublicKey(ephRaw)
	if err != nil {
		return "", ErrSealedToken
	}
	shared, err := priv.ECDH(eph)
	if err != nil {
		return "", ErrSealedToken
	}
	aead, err := sealAEAD(shared, ephRaw, priv.PublicKey().Bytes(), sessionID)
	if err != nil || len(nonce) != aead.NonceSize() {
		return "", ErrSealedToken
	}
	pt, err := aead.Open(nil, nonce, ct, []byte(sessionID))
	if err != nil {
		return "", ErrSealedToken
	}
	return string(pt), nil
}

// ---- The session.

// CLISessionRequest is what a CLI asks for when it starts a session.
type CLISessionRequest struct {
	// PublicKey is the CLI's X25519 public key (unpadded base64url).
	PublicKey string
	// ClientName names the program (DefaultCLIClientName when empty).
	ClientName string
	// Host names the computer; the key is named "CLI on <host>".
	Host string
	// Scopes are the scopes asked for; nil means DefaultCLIScopes.
	Scopes []Scope
}

// StartCLISession decides the first event of session id with user code
// code and poll token hash pollHash. A refusal is invalid_argument naming
// the field.
func StartCLISession(id, code string, pollHash []byte, in CLISessionRequest, now time.Time) (CLISessionStarted, error) {
	if _, err := ParseCLIPublicKey(in.PublicKey); err != nil {
		return CLISessionStarted{}, err
	}
	name, err := cliText("clientName", in.ClientName, MaxCLIClientNameRunes)
	if err != nil {
		return CLISessionStarted{}, err
	}
	if name == "" {
		name = DefaultCLIClientName
	}
	host, err := cliText("host", in.Host, MaxCLIHostRunes)
	if err != nil {
		return CLISessionStarted{}, err
	}
	scopes := slices.Clone(DefaultCLIScopes)
	if in.Scopes != nil {
		if scopes, err = checkScopes(in.Scopes); err != nil {
			return CLISessionStarted{}, err
		}
	}
	if !HasPrefix(id, PrefixCLISession) || len(pollHash) != sha256.Size {
		return CLISessionStarted{}, fmt.Errorf("start cli session: no session id or poll token hash")
	}
	if c, ok := ParseUserCode(code); !ok || c != code {
		return CLISessionStarted{}, fmt.Errorf("start cli session: %q is not a canonical user code", code)
	}
	return CLISessionStarted{SessionID: id, UserCode: code, PollTokenHash: pollHash, PublicKey: in.PublicKey,
		ClientName: name, Host: host, Scopes: scopes, StartedAt: now, ExpiresAt: now.Add(CLISessionLifetime)}, nil
}

// cliText checks a name a CLI gives: valid text of at most limit
// characters without control characters, trimmed.
func cliText(field, s string, limit int) (string, error) {
	s = strings.TrimSpace(s)
	if !utf8.ValidString(s) || utf8.RuneCountInString(s) > limit || strings.IndexFunc(s, unicode.IsControl) >= 0 {
		return "", Errorf(CodeInvalidArgument, "%s must be text of at most %d characters without control characters", field, limit).With("field", field)
	}
	return s, nil
}

// CLISession is the aggregate of one CLI sign-in's stream. Its command
// methods decide and return events; Apply is the only place its state
// changes. It never holds the poll token or the key token, only the
// poll token's hash and the key token sealed to the CLI.
type CLISession struct {
	ID            string
	UserCode      string
	PollTokenHash []byte
	PublicKey     string
	ClientName    string
	Host          string
	// Scopes are the scopes the CLI asked for.
	Scopes    []Scope
	StartedAt time.Time
	ExpiresAt time.Time
	// OrgID is empty until a person approves or denies the session; then
	// it is their organisation's, and another organisation's people see
	// the session as they see an unknown one.
	OrgID string
	// Decision is "", CLIStateApproved or CLIStateDenied.
	Decision  string
	DecidedBy Actor
	DecidedAt time.Time
	// KeyID and Granted describe the key minted at approval.
	KeyID     string
	Granted   []Scope
	Sealed    SealedToken
	Delivered bool
}

// Apply changes the session's state by one recorded event of its stream.
func (s *CLISession) Apply(e Event) {
	switch e := e.(type) {
	case CLISessionStarted:
		*s = CLISession{ID: e.SessionID, UserCode: e.UserCode, PollTokenHash: e.PollTokenHash, PublicKey: e.PublicKey,
			ClientName: e.ClientName, Host: e.Host, Scopes: e.Scopes, StartedAt: e.StartedAt, ExpiresAt: e.ExpiresAt}
	case CLISessionApproved:
		s.OrgID, s.Decision, s.DecidedBy, s.DecidedAt = e.OrgID, CLIStateApproved, e.By, e.ApprovedAt
		s.KeyID, s.Granted, s.Sealed = e.KeyID, e.Scopes, e.Sealed
	case CLISessionDenied:
		s.OrgID, s.Decision, s.DecidedBy, s.DecidedAt = e.OrgID, CLIStateDenied, e.By, e.DeniedAt
	case CLISessionDelivered:
		s.Delivered = true
	}
}

// Exists reports whether the session was started.
func (s *CLISession) Exists() bool { return !s.StartedAt.IsZero() }

// State returns the session's state at now. Only a pending session
// expires: an approved one keeps its sealed key for the CLI's next poll,
// however late (the key is the approver's, listed with their keys, and
// only the CLI can open the seal).
func (s *CLISession) State(now time.Time) string {
	switch {
	case s.Delivered:
		return CLIStateConsumed
	case s.Decision != "":
		return s.Decision
	case !now.Before(s.ExpiresAt):
		return CLIStateExpired
	}
	return CLIStatePending
}

// KeyName is the name of the key approval mints.
func (s *CLISession) KeyName() string {
	host := s.Host
	if host == "" {
		host = unnamedCLIHost
	}
	return "CLI on " + host
}

// ErrCLISessionNotFound is the one answer for a session id or user code
// that names nothing, a poll token that does not match, and a session
// another organisation decided: the cases are indistinguishable.
func ErrCLISessionNotFound() *Error {
	return NotFound("no CLI sign-in is waiting under this id or code")
}

// VisibleTo reports whether a may see the session under user code code
// (empty: any code): it exists, names that code, and is undecided or was
// decided in a's organisation.
func (s *CLISession) VisibleTo(a Auth, code string) bool {
	return s.Exists() && (code == "" || code == s.UserCode) && (s.OrgID == "" || s.OrgID == a.OrgID)
}

// errCLISessionState refuses deciding a session that is not pending.
func errCLISessionState(state string) *Error {
	why := map[string]string{
		CLIStateApproved: "was approved already",
		CLIStateConsumed: "was approved already",
		CLIStateDenied:   "was denied",
		CLIStateExpired:  "has expired; run phonefleet login again for a new code",
	}[state]
	return Errorf(CodeInvalidArgument, "this CLI sign-in %s", why).With("state", state).WithRetryable(false)
}

// CheckDecidable returns nil when a may approve or deny the session under
// code at now: a signed-in session (permission_denied otherwise), a
// session visible to a (not_found otherwise) that is still pending
// (invalid_argument naming its state otherwise).
func (s *CLISession) CheckDecidable(a Auth, code string, now time.Time) error {
	if err := a.RequireSession("CLI sign-in"); err != nil {
		return err
	}
	if code == "" || !s.VisibleTo(a, code) {
		return ErrCLISessionNotFound()
	}
	if st := s.State(now); st != CLIStatePending {
		return errCLISessionState(st)
	}
	return nil
}

// Grant returns the scopes a key minted for a by approving the session
// carries: asked (nil: every scope the CLI asked for that a holds), each
// of which must be one the CLI asked for (invalid_argument) and one a
// holds (permission_denied: a key never carries more than the session
// that mints it).
func (s *CLISession) Grant(a Auth, asked []Scope) ([]Scope, error) {
	if asked == nil {
		var out []Scope
		for _, sc := range s.Scopes {
			if a.Has(sc) {
				out = append(out, sc)
			}
		}
		if len(out) == 0 {
			return nil, Errorf(CodePermissionDenied, "you hold none of the scopes this CLI asks for (%s)", joinScopes(s.Scopes))
		}
		return out, nil
	}
	checked, err := checkScopes(asked)
	if err != nil {
		return nil, err
	}
	for _, sc := range checked {
		if !slices.Contains(s.Scopes, sc) {
			return nil, Errorf(CodeInvalidArgument, "the CLI did not ask for scope %s; grant only scopes it asked for (%s)", sc, joinScopes(s.Scopes)).
				With("field", "scopes")
		}
		if !a.Has(sc) {
			return nil, Errorf(CodePermissionDenied, "a key never carries more than the session that mints it; this session lacks scope %s", sc).
				With("scope", string(sc))
		}
	}
	return checked, nil
}

func joinScopes(scopes []Scope) string {
	parts := make([]string, len(scopes))
	for i, s := range scopes {
		parts[i] = string(s)
	}
	return strings.Join(parts, ", ")
}

// Approve decides the approval of the session by a under code: the key
// keyID (minted for a with scopes granted) and its token sealed to the CLI.
func (s *CLISession) Approve(a Auth, code, keyID string, granted []Scope, sealed SealedToken, now time.Time) ([]Event, error) {
	if err := s.CheckDecidable(a, code, now); err != nil {
		return nil, err
	}
	if keyID == "" || len(granted) == 0 || sealed.Alg != SealAlgorithm {
		return nil, fmt.Errorf("approve cli session %s: no key, scopes or seal", s.ID)
	}
	return []Event{CLISessionApproved{SessionID: s.ID, OrgID: a.OrgID, By: ActorOf(a), Role: a.Role, KeyID: keyID,
		Scopes: slices.Clone(granted), Sealed: sealed, ApprovedAt: now}}, nil
}

// Deny decides the refusal of the session by a under code.
func (s *CLISession) Deny(a Auth, code string, now time.Time) ([]Event, error) {
	if err := s.CheckDecidable(a, code, now); err != nil {
		return nil, err
	}
	return []Event{CLISessionDenied{SessionID: s.ID, OrgID: a.OrgID, By: ActorOf(a), DeniedAt: now}}, nil
}

// PollTokenMatches reports, in constant time, whether hash is the
// session's poll token hash.
func (s *CLISession) PollTokenMatches(hash []byte) bool {
	return s.Exists() && len(hash) == len(s.PollTokenHash) && subtle.ConstantTimeCompare(hash, s.PollTokenHash) == 1
}

// Poll decides what a poll with the token hashed as hash answers at now:
// the state, and for an approved session the event handing its key over
// (after which the session is consumed and no later poll sees the key). A
// hash that does not match is not_found, as for an unknown session.
func (s *CLISession) Poll(hash []byte, now time.Time) (state string, events []Event, err error) {
	if !s.PollTokenMatches(hash) {
		return "", nil, ErrCLISessionNotFound()
	}
	state = s.State(now)
	if state == CLIStateApproved {
		events = []Event{CLISessionDelivered{SessionID: s.ID, OrgID: s.OrgID, DeliveredAt: now}}
	}
	return state, events, nil
}

// CLICodeClaim is the aggregate of a user code's stream: which session the
// code names now, and until when.
type CLICodeClaim struct {
	SessionID string
	ExpiresAt time.Time
}

// Apply changes the claim by one recorded event of the code's stream.
func (c *CLICodeClaim) Apply(e Event) {
	if e, ok := e.(CLICodeClaimed); ok {
		c.SessionID, c.ExpiresAt = e.SessionID, e.ExpiresAt
	}
}

// Live reports whether the code names a session that may still be
// decided at now.
func (c *CLICodeClaim) Live(now time.Time) bool { return c.SessionID != "" && now.Before(c.ExpiresAt) }

// ErrCLICodeTaken is returned by Claim for a code a live session holds;
// the caller draws another code.
var ErrCLICodeTaken = errors.New("user code is held by a live CLI sign-in")

// Claim decides claiming code for the session started as started.
func (c *CLICodeClaim) Claim(started CLISessionStarted, now time.Time) ([]Event, error) {
	if c.Live(now) {
		return nil, ErrCLICodeTaken
	}
	return []Event{CLICodeClaimed{UserCode: started.UserCode, SessionID: started.SessionID, ExpiresAt: started.ExpiresAt}}, nil
}
