package domain

import (
	"bytes"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestNewUserCodeIsCanonical(t *testing.T) {
	seen := map[string]bool{}
	for range 2000 {
		c := NewUserCode()
		got, ok := ParseUserCode(c)
		if !ok || got != c {
			t.Fatalf("ParseUserCode(%q) = %q, %v; want the code itself", c, got, ok)
		}
		seen[c] = true
	}
	// 2000 draws from 20^8 codes: a repeat would mean a broken draw.
	if len(seen) != 2000 {
		t.Errorf("got %d distinct codes of 2000; want 2000", len(seen))
	}
}

func TestNewUserCodeUsesEveryLetter(t *testing.T) {
	count := map[rune]int{}
	for range 500 {
		for _, r := range strings.ReplaceAll(NewUserCode(), "-", "") {
			count[r]++
		}
	}
	for _, r := range userCodeAlphabet {
		// 4000 letters over 20: about 200 each; 100 is far below.
		if count[r] < 100 {
			t.Errorf("letter %c drawn %d times of 4000; want about 200", r, count[r])
		}
	}
}

func TestParseUserCode(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"BCDF-GHJK", "BCDF-GHJK", true},
		{"bcdf-ghjk", "BCDF-GHJK", true},
		{"BCDFGHJK", "BCDF-GHJK", true},
		{" bcdf ghjk ", "BCDF-GHJK", true},
		{"B-C-D-F-G-H-J-K", "BCDF-GHJK", true},
		{"BCDF-GHJ", "", false},                           // too short
		{"BCDF-GHJKL", "", false},                         // too long
		{"ABCD-EFGH", "", false},                          // vowels are not in the alphabet
		{"BCD1-GHJK", "", false},                          // digits neither
		{"BCDF_GHJK", "", false},                          // another separator
		{"", "", false},                                   // nothing
		{"BCDF-GHJ\u00c9", "", false},                     // a letter outside ASCII
		{strings.Repeat(" ", 30) + "BCDFGHJK", "", false}, // past the input bound
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, ok := ParseUserCode(tt.in)
			if got != tt.want || ok != tt.ok {
				t.Errorf("ParseUserCode(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
			}
		})
	}
}

// FuzzParseUserCode: the parser never panics; what it accepts is one
// canonical code, which parses to itself.
func FuzzParseUserCode(f *testing.F) {
	for _, s := range []string{"BCDF-GHJK", "bcdfghjk", "", "----", "ABCD-EFGH", "\xff\xfe", "BCDF GHJK"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		code, ok := ParseUserCode(s)
		if !ok {
			if code != "" {
				t.Fatalf("refused %q but returned %q", s, code)
			}
			return
		}
		if len(code) != 9 || code[4] != '-' {
			t.Fatalf("accepted %q as %q; want four letters, a hyphen and four letters", s, code)
		}
		for i, c := range []byte(code) {
			if i != 4 && !strings.ContainsRune(userCodeAlphabet, rune(c)) {
				t.Fatalf("accepted %q as %q, with %q outside the alphabet", s, code, c)
			}
		}
		if again, ok := ParseUserCode(code); !ok || again != code {
			t.Fatalf("canonical %q parses to %q, %v", code, again, ok)
		}
	})
}

func TestPollTokens(t *testing.T) {
	tok := NewPollToken()
	if len(tok) != PollTokenLen || !strings.HasPrefix(tok, PollTokenPrefix) {
		t.Fatalf("got token %q; want %d characters starting %s", tok, PollTokenLen, PollTokenPrefix)
	}
	hash, ok := ParsePollToken(tok)
	if !ok || !bytes.Equal(hash, HashPollToken(tok)) {
		t.Fatalf("ParsePollToken(new token) = %x, %v; want its hash", hash, ok)
	}
	if tok == NewPollToken() {
		t.Fatal("two fresh poll tokens are equal")
	}
	// The last character carries 4 bits; the 2 spare bits must be zero, so
	// a token has one spelling.
	body := tok[len(PollTokenPrefix):]
	last := strings.IndexByte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", body[len(body)-1])
	alt := PollTokenPrefix + body[:len(body)-1] + string("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"[last|1])
	for _, bad := range []string{"", tok[:len(tok)-1], tok + "A", "pbk_" + tok[4:], strings.Replace(tok, tok[10:11], "+", 1), alt} {
		if bad == tok {
			continue
		}
		if _, ok := ParsePollToken(bad); ok {
			t.Errorf("ParsePollToken(%q) accepted; want refused", bad)
		}
	}
}

// FuzzParsePollToken: the parser never panics; what it accepts has the
// token's shape and hashes as HashPollToken does.
func FuzzParsePollToken(f *testing.F) {
	f.Add(NewPollToken())
	f.Add("pfp_")
	f.Add("")
	f.Add("pfp_" + strings.Repeat("A", 43))
	f.Add("pfp_" + strings.Repeat("/", 43))
	f.Fuzz(func(t *testing.T, s string) {
		hash, ok := ParsePollToken(s)
		if !ok {
			return
		}
		if len(s) != PollTokenLen || !strings.HasPrefix(s, PollTokenPrefix) || !bytes.Equal(hash, HashPollToken(s)) {
			t.Fatalf("accepted %q (hash %x); want a token's shape and its hash", s, hash)
		}
	})
}

func newCLIKey(t *testing.T) (*ecdh.PrivateKey, string) {
	t.Helper()
	priv, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return priv, base64.RawURLEncoding.EncodeToString(priv.PublicKey().Bytes())
}

func TestSealedTokenOpensOnlyForItsKeyAndSession(t *testing.T) {
	priv, pub := newCLIKey(t)
	other, _ := newCLIKey(t)
	const token = "pbk_0123456789abcdef0123456789abcdef_secret"
	sealed, err := SealCLIToken(pub, "cls_1", token)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(sealed.Ciphertext+sealed.Nonce+sealed.EphemeralPublicKey, "secret") {
		t.Fatalf("the sealed token shows its plaintext: %+v", sealed)
	}
	got, err := OpenCLIToken(priv, "cls_1", sealed)
	if err != nil || got != token {
		t.Fatalf("OpenCLIToken = %q, %v; want the token", got, err)
	}
	again, err := SealCLIToken(pub, "cls_1", token)
	if err != nil || again.Ciphertext == sealed.Ciphertext || again.EphemeralPublicKey == sealed.EphemeralPublicKey {
		t.Fatalf("sealing twice gave the same ciphertext or ephemeral key (%v)", err)
	}

	flip := func(s string) string {
		b, _ := base64.RawURLEncoding.DecodeString(s)
		b[len(b)/2] ^= 1
		return base64.RawURLEncoding.EncodeToString(b)
	}
	tests := []struct {
		name    string
		key     *ecdh.PrivateKey
		session string
		sealed  SealedToken
	}{
		{"another key", other, "cls_1", sealed},
		{"another session", priv, "cls_2", sealed},
		{"altered ciphertext", priv, "cls_1", SealedToken{sealed.Alg, sealed.EphemeralPublicKey, sealed.Nonce, flip(sealed.Ciphertext)}},
		{"altered nonce", priv, "cls_1", SealedToken{sealed.Alg, sealed.EphemeralPublicKey, flip(sealed.Nonce), sealed.Ciphertext}},
		{"altered ephemeral key", priv, "cls_1", SealedToken{sealed.Alg, flip(sealed.EphemeralPublicKey), sealed.Nonce, sealed.Ciphertext}},
		{"another algorithm", priv, "cls_1", SealedToken{"none", sealed.EphemeralPublicKey, sealed.Nonce, sealed.Ciphertext}},
		{"not base64", priv, "cls_1", SealedToken{sealed.Alg, "***", sealed.Nonce, sealed.Ciphertext}},
		{"no key", nil, "cls_1", sealed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := OpenCLIToken(tt.key, tt.session, tt.sealed); err == nil {
				t.Fatalf("opened as %q; want ErrSealedToken", got)
			}
		})
	}
}

func TestParseCLIPublicKey(t *testing.T) {
	_, pub := newCLIKey(t)
	if _, err := ParseCLIPublicKey(pub); err != nil {
		t.Fatalf("a fresh public key: %v", err)
	}
	for _, bad := range []string{"", "abc", pub + "A", base64.StdEncoding.EncodeToString(make([]byte, 32)), strings.Repeat("A", 100)} {
		_, err := ParseCLIPublicKey(bad)
		if ErrorCode(err) != CodeInvalidArgument || AsError(err).Extra["field"] != "publicKey" {
			t.Errorf("ParseCLIPublicKey(%q): got %v; want invalid_argument naming publicKey", bad, err)
		}
	}
	// The all-zero key is a low-order point: accepted as a key, refused
	// when sealing (its shared secret would be zero).
	zero := base64.RawURLEncoding.EncodeToString(make([]byte, 32))
	if _, err := SealCLIToken(zero, "cls_1", "x"); ErrorCode(err) != CodeInvalidArgument {
		t.Errorf("sealing to the all-zero key: got %v; want invalid_argument", err)
	}
}

var (
	cliT0     = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cliAdminA = Auth{OrgID: "org_a", Kind: PrincipalConsole, UserID: "u_ann", Role: RoleAdmin, Scopes: AllScopes}
	cliReader = Auth{OrgID: "org_a", Kind: PrincipalConsole, UserID: "u_rob", Role: RoleMember, Scopes: []Scope{ScopeDevicesRead}}
	cliAdminB = Auth{OrgID: "org_b", Kind: PrincipalConsole, UserID: "u_bea", Role: RoleAdmin, Scopes: AllScopes}
	cliKey    = Auth{OrgID: "org_a", Kind: PrincipalAPIKey, APIKeyID: "key_1", Scopes: AllScopes}
	cliApp    = Auth{OrgID: "org_a", Kind: PrincipalApp, UserID: "u_ann", ClientID: "app", Scopes: AllScopes}
)

// startedCLISession returns a session started at cliT0 and its poll token.
func startedCLISession(t *testing.T, in CLISessionRequest) (*CLISession, string) {
	t.Helper()
	if in.PublicKey == "" {
		_, in.PublicKey = newCLIKey(t)
	}
	tok := NewPollToken()
	ev, err := StartCLISession(NewID(PrefixCLISession), NewUserCode(), HashPollToken(tok), in, cliT0)
	if err != nil {
		t.Fatal(err)
	}
	s := &CLISession{}
	s.Apply(ev)
	return s, tok
}

func TestStartCLISessionChecksWhatTheCLISays(t *testing.T) {
	_, pub := newCLIKey(t)
	tests := []struct {
		name  string
		in    CLISessionRequest
		field string
	}{
		{"no public key", CLISessionRequest{}, "publicKey"},
		{"client name too long", CLISessionRequest{PublicKey: pub, ClientName: strings.Repeat("x", 101)}, "clientName"},
		{"host with a control character", CLISessionRequest{PublicKey: pub, Host: "evil\nhost"}, "host"},
		{"host too long", CLISessionRequest{PublicKey: pub, Host: strings.Repeat("h", 65)}, "host"},
		{"unknown scope", CLISessionRequest{PublicKey: pub, Scopes: []Scope{"devices:everything"}}, "scopes"},
		{"no scope", CLISessionRequest{PublicKey: pub, Scopes: []Scope{}}, "scopes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := StartCLISession(NewID(PrefixCLISession), NewUserCode(), HashPollToken(NewPollToken()), tt.in, cliT0)
			if ErrorCode(err) != CodeInvalidArgument || AsError(err).Extra["field"] != tt.field {
				t.Fatalf("got %v; want invalid_argument naming %s", err, tt.field)
			}
		})
	}

	s, _ := startedCLISession(t, CLISessionRequest{PublicKey: pub, Host: "  laptop  "})
	if s.ClientName != DefaultCLIClientName || s.Host != "laptop" || !slices.Equal(s.Scopes, DefaultCLIScopes) {
		t.Errorf("got client %q, host %q, scopes %v; want the defaults and the trimmed host", s.ClientName, s.Host, s.Scopes)
	}
	if s.KeyName() != "CLI on laptop" || !s.ExpiresAt.Equal(cliT0.Add(CLISessionLifetime)) {
		t.Errorf("got key name %q, expiry %v", s.KeyName(), s.ExpiresAt)
	}
	unnamed, _ := startedCLISession(t, CLISessionRequest{PublicKey: pub})
	if unnamed.KeyName() != "CLI on an unnamed host" {
		t.Errorf("got key name %q for a host not named", unnamed.KeyName())
	}
	asked, _ := startedCLISession(t, CLISessionRequest{PublicKey: pub, Scopes: []Scope{ScopeRunsStart, ScopeDevicesRead, ScopeRunsStart}})
	if want := []Scope{ScopeDevicesRead, ScopeRunsStart}; !slices.Equal(asked.Scopes, want) {
		t.Errorf("got scopes %v; want %v (spec order, no repeats)", asked.Scopes, want)
	}
}

func TestCLISessionLifecycle(t *testing.T) {
	priv, pub := newCLIKey(t)
	s, tok := startedCLISession(t, CLISessionRequest{PublicKey: pub, Host: "laptop"})
	hash := HashPollToken(tok)

	if st, evs, err := s.Poll(hash, cliT0.Add(time.Minute)); err != nil || st != CLIStatePending || evs != nil {
		t.Fatalf("poll while pending: got %s %v %v; want pending and no event", st, evs, err)
	}
	if _, _, err := s.Poll(HashPollToken(NewPollToken()), cliT0); ErrorCode(err) != CodeNotFound {
		t.Fatalf("poll with another token: got %v; want not_found", err)
	}

	at := cliT0.Add(2 * time.Minute)
	granted, err := s.Grant(cliAdminA, nil)
	if err != nil || !slices.Equal(granted, DefaultCLIScopes) {
		t.Fatalf("grant: got %v %v; want the default scopes", granted, err)
	}
	sealed, err := SealCLIToken(s.PublicKey, s.ID, "the-token")
	if err != nil {
		t.Fatal(err)
	}
	evs, err := s.Approve(cliAdminA, s.UserCode, "key_1", granted, sealed, at)
	if err != nil || len(evs) != 1 {
		t.Fatalf("approve: got %v %v", evs, err)
	}
	ap := evs[0].(CLISessionApproved)
	if ap.OrgID != "org_a" || ap.By != (Actor{Kind: ActorUser, ID: "u_ann"}) || ap.Role != RoleAdmin || ap.KeyID != "key_1" {
		t.Errorf("got %+v; want org_a, u_ann (admin), key_1", ap)
	}
	s.Apply(ap)
	if s.State(at) != CLIStateApproved || s.State(at.Add(time.Hour)) != CLIStateApproved {
		t.Errorf("an approved session is %s (and %s an hour later); want approved both times", s.State(at), s.State(at.Add(time.Hour)))
	}
	if _, err := s.Approve(cliAdminA, s.UserCode, "key_2", granted, sealed, at); ErrorCode(err) != CodeInvalidArgument || AsError(err).Extra["state"] != CLIStateApproved {
		t.Errorf("approving twice: got %v; want invalid_argument with state approved", err)
	}

	st, evs, err := s.Poll(hash, at.Add(time.Hour))
	if err != nil || st != CLIStateApproved || len(evs) != 1 {
		t.Fatalf("first poll after approval: got %s %v %v; want approved and the delivery event", st, evs, err)
	}
	if got, err := OpenCLIToken(priv, s.ID, s.Sealed); err != nil || got != "the-token" {
		t.Fatalf("the CLI opens %q, %v; want the token", got, err)
	}
	s.Apply(evs[0])
	if st, evs, err := s.Poll(hash, at.Add(time.Hour)); err != nil || st != CLIStateConsumed || evs != nil {
		t.Fatalf("second poll: got %s %v %v; want consumed and no event", st, evs, err)
	}
}

func TestCLISessionDecisions(t *testing.T) {
	t.Run("deny", func(t *testing.T) {
		s, tok := startedCLISession(t, CLISessionRequest{})
		evs, err := s.Deny(cliReader, s.UserCode, cliT0)
		if err != nil {
			t.Fatal(err)
		}
		s.Apply(evs[0])
		if st, evs, err := s.Poll(HashPollToken(tok), cliT0); st != CLIStateDenied || evs != nil || err != nil {
			t.Fatalf("poll: got %s %v %v; want denied", st, evs, err)
		}
		if !s.VisibleTo(cliReader, s.UserCode) || s.VisibleTo(cliAdminB, s.UserCode) {
			t.Error("a denied session must be visible to its organisation only")
		}
		if _, err := s.Deny(cliAdminB, s.UserCode, cliT0); ErrorCode(err) != CodeNotFound {
			t.Errorf("another organisation denying it: got %v; want not_found", err)
		}
	})
	t.Run("expiry", func(t *testing.T) {
		s, tok := startedCLISession(t, CLISessionRequest{})
		end := cliT0.Add(CLISessionLifetime)
		if s.State(end.Add(-time.Microsecond)) != CLIStatePending || s.State(end) != CLIStateExpired {
			t.Fatalf("got %s just before the end and %s at it; want pending then expired", s.State(end.Add(-time.Microsecond)), s.State(end))
		}
		if st, _, _ := s.Poll(HashPollToken(tok), end); st != CLIStateExpired {
			t.Errorf("poll after the end: got %s; want expired", st)
		}
		if _, err := s.Deny(cliAdminA, s.UserCode, end); ErrorCode(err) != CodeInvalidArgument || AsError(err).Extra["state"] != CLIStateExpired {
			t.Errorf("deciding an expired session: got %v; want invalid_argument with state expired", err)
		}
	})
	t.Run("who may decide", func(t *testing.T) {
		s, _ := startedCLISession(t, CLISessionRequest{})
		for _, tt := range []struct {
			name string
			a    Auth
			code string
			want Code
		}{
			{"an API key", cliKey, s.UserCode, CodePermissionDenied},
			{"an OAuth app", cliApp, s.UserCode, CodePermissionDenied},
			{"the wrong code", cliAdminA, NewUserCode(), CodeNotFound},
			{"no code", cliAdminA, "", CodeNotFound},
		} {
			if err := s.CheckDecidable(tt.a, tt.code, cliT0); ErrorCode(err) != tt.want {
				t.Errorf("%s: got %v; want %s", tt.name, err, tt.want)
			}
		}
		if err := s.CheckDecidable(cliAdminB, s.UserCode, cliT0); err != nil {
			t.Errorf("a pending session is any signed-in person's to decide with its code: got %v", err)
		}
		if err := s.CheckDecidable(LocalOperator("org_local"), s.UserCode, cliT0); err != nil {
			t.Errorf("the local operator: got %v; want allowed", err)
		}
	})
}

func TestCLISessionGrant(t *testing.T) {
	s, _ := startedCLISession(t, CLISessionRequest{Scopes: []Scope{ScopeDevicesRead, ScopeRunsStart, ScopeOrdersPlace}})
	tests := []struct {
		name  string
		a     Auth
		asked []Scope
		want  []Scope
		code  Code
	}{
		{"everything asked that the admin holds", cliAdminA, nil, []Scope{ScopeDevicesRead, ScopeRunsStart, ScopeOrdersPlace}, ""},
		{"narrowed by the approver", cliAdminA, []Scope{ScopeDevicesRead}, []Scope{ScopeDevicesRead}, ""},
		{"a member without orders:place gets the rest", Auth{OrgID: "org_a", Kind: PrincipalConsole, UserID: "m", Role: RoleMember,
			Scopes: []Scope{ScopeDevicesRead, ScopeRunsStart}}, nil, []Scope{ScopeDevicesRead, ScopeRunsStart}, ""},
		{"a scope not asked for", cliAdminA, []Scope{ScopeDevicesAct}, nil, CodeInvalidArgument},
		{"a scope the approver lacks", cliReader, []Scope{ScopeRunsStart}, nil, CodePermissionDenied},
		{"nothing in common", Auth{OrgID: "org_a", Kind: PrincipalConsole, UserID: "x", Scopes: []Scope{ScopeAppsRead}}, nil, nil, CodePermissionDenied},
		{"an empty grant", cliAdminA, []Scope{}, nil, CodeInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.Grant(tt.a, tt.asked)
			if tt.code != "" {
				if ErrorCode(err) != tt.code {
					t.Fatalf("got %v %v; want %s", got, err, tt.code)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("got %v %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestCLICodeClaim(t *testing.T) {
	s, _ := startedCLISession(t, CLISessionRequest{})
	started := CLISessionStarted{SessionID: s.ID, UserCode: s.UserCode, ExpiresAt: s.ExpiresAt}
	var c CLICodeClaim
	evs, err := c.Claim(started, cliT0)
	if err != nil || len(evs) != 1 {
		t.Fatalf("claim a free code: got %v %v", evs, err)
	}
	c.Apply(evs[0])
	next := CLISessionStarted{SessionID: NewID(PrefixCLISession), UserCode: s.UserCode, ExpiresAt: s.ExpiresAt.Add(CLISessionLifetime)}
	if _, err := c.Claim(next, s.ExpiresAt.Add(-time.Second)); err != ErrCLICodeTaken {
		t.Fatalf("claim a live code: got %v; want ErrCLICodeTaken", err)
	}
	evs, err = c.Claim(next, s.ExpiresAt)
	if err != nil || evs[0].(CLICodeClaimed).SessionID != next.SessionID {
		t.Fatalf("claim a code whose session expired: got %v %v; want it claimed for the new session", evs, err)
	}
}
