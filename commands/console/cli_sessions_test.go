package console_test

import (
	"bytes"
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"log/slog"
	"slices"
	"testing"
	"time"

	"phonefleet/commands"
	"phonefleet/commands/console"
	"phonefleet/commands/cqrs"
	"phonefleet/commands/keys"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/identity"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// cliEnv is an application with API keys, CLI sign-in and the console's
// telemetry on a database of its own, with the key store and console
// events read models running.
type cliEnv struct {
	app    commands.Application
	store  *eventstore.Store
	clock  *testutil.Clock
	keys   *identity.KeyVerifier
	reader projections.APIKeyReader
}

func newCLIEnv(t *testing.T) *cliEnv {
	t.Helper()
	pool := testutil.SmallPool(t, 6)
	store := eventstore.New(pool, eventstore.WithUpcaster(domain.Events))
	runner, err := projections.NewRunner(store, slog.New(slog.DiscardHandler),
		[]projections.Projection{projections.APIKeys{}, projections.ConsoleEvents{}}, projections.WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := runner.Ensure(testutil.Context(t)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testutil.Context(t))
	done := make(chan struct{})
	go func() { runner.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	hasher, _ := identity.NewHasher(bytes.Repeat([]byte{7}, identity.PepperLen))
	reader := projections.APIKeyReader{DB: pool}
	clock := testutil.NewClock(time.Now().UTC().Truncate(time.Minute))
	app := commands.NewApplication(commands.Capabilities{
		APIKeys: &keys.Keys{Deps: keys.APIKeyDeps{Store: store, ReadModels: runner}, Hasher: hasher, Grace: time.Hour, Reader: reader},
		Console: console.New(console.Config{Store: store, Now: clock.Now, ReadModels: testutil.ReadModels{RM: runner}}),
	})
	return &cliEnv{app: app, store: store, clock: clock, keys: &identity.KeyVerifier{Lookup: reader, Hasher: hasher}, reader: reader}
}

// cliKeyPair is the key pair a CLI starts a session with.
func cliKeyPair(t *testing.T) (*ecdh.PrivateKey, string) {
	t.Helper()
	priv, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return priv, base64.RawURLEncoding.EncodeToString(priv.PublicKey().Bytes())
}

var (
	cliAnn = domain.Auth{OrgID: "org_a", Kind: domain.PrincipalConsole, UserID: "u_ann", Role: domain.RoleAdmin, Scopes: domain.AllScopes}
	cliBea = domain.Auth{OrgID: "org_b", Kind: domain.PrincipalConsole, UserID: "u_bea", Role: domain.RoleAdmin, Scopes: domain.AllScopes}
)

func (e *cliEnv) start(t *testing.T, pub string, scopes []domain.Scope) console.StartedCLISession {
	t.Helper()
	s, err := e.app.Console.StartCLISession.Handle(testutil.Context(t), console.StartCLISession{
		CLISessionRequest: domain.CLISessionRequest{PublicKey: pub, ClientName: "phonefleet 0.1.0", Host: "laptop", Scopes: scopes}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (e *cliEnv) poll(t *testing.T, s console.StartedCLISession) console.CLISessionPoll {
	t.Helper()
	p, err := e.app.Console.PollCLISession.Handle(testutil.Context(t), console.PollCLISession{SessionID: s.Session.SessionID, PollToken: s.PollToken})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCLISignInDeliversAKeyOnce(t *testing.T) {
	e := newCLIEnv(t)
	ctx := testutil.Context(t)
	priv, pub := cliKeyPair(t)
	started := e.start(t, pub, nil)
	if started.Session.State != domain.CLIStatePending || !started.Session.ExpiresAt.Equal(e.clock.Now().Add(domain.CLISessionLifetime)) {
		t.Fatalf("got %+v; want pending until ten minutes from now", started.Session)
	}
	if p := e.poll(t, started); p.State != domain.CLIStatePending || p.Sealed != nil {
		t.Fatalf("poll before approval: got %+v; want pending without a key", p)
	}

	// The person looks the code up as they typed it.
	typed := string(bytes.ToLower([]byte(started.Session.UserCode)))
	v, err := e.app.Console.GetCLISessionByCode.Handle(ctx, console.GetCLISessionByCode{Auth: cliAnn, UserCode: typed})
	if err != nil {
		t.Fatal(err)
	}
	if v.SessionID != started.Session.SessionID || v.ClientName != "phonefleet 0.1.0" || v.KeyName != "CLI on laptop" ||
		!slices.Equal(v.Grantable, domain.DefaultCLIScopes) {
		t.Fatalf("by code: got %+v", v)
	}

	e.clock.Advance(time.Minute)
	approved, err := e.app.Console.ApproveCLISession.Handle(ctx, console.ApproveCLISession{Auth: cliAnn,
		SessionID: started.Session.SessionID, UserCode: typed, Scopes: []domain.Scope{domain.ScopeDevicesRead, domain.ScopeRunsStart}})
	if err != nil {
		t.Fatal(err)
	}
	if approved.State != domain.CLIStateApproved || approved.KeyID == "" || approved.DecidedBy == nil || approved.DecidedBy.ID != "u_ann" {
		t.Fatalf("approve: got %+v", approved)
	}

	// The first poll receives the sealed token, which the CLI opens.
	p := e.poll(t, started)
	if p.State != domain.CLIStateApproved || p.Sealed == nil || p.KeyID != approved.KeyID {
		t.Fatalf("first poll after approval: got %+v; want approved with the sealed key", p)
	}
	token, err := domain.OpenCLIToken(priv, started.Session.SessionID, *p.Sealed)
	if err != nil {
		t.Fatal(err)
	}
	a, err := e.keys.Verify(ctx, token)
	if err != nil {
		t.Fatalf("the delivered token does not verify: %v", err)
	}
	if a.OrgID != "org_a" || a.APIKeyID != approved.KeyID || !slices.Equal(a.Scopes, []domain.Scope{domain.ScopeDevicesRead, domain.ScopeRunsStart}) {
		t.Errorf("the key is %+v; want org_a's, with devices:read and runs:start", a)
	}
	rec, err := e.reader.Get(ctx, cliAnn, approved.KeyID)
	if err != nil || rec.Name != "CLI on laptop" || rec.MintedBy != "u_ann" {
		t.Errorf("key record: got %+v %v; want named CLI on laptop, minted by u_ann", rec, err)
	}

	// Every later poll: consumed, without the key.
	if p := e.poll(t, started); p.State != domain.CLIStateConsumed || p.Sealed != nil || p.KeyID != "" {
		t.Fatalf("second poll: got %+v; want consumed without the key", p)
	}

	// Neither secret is in the store: not the poll token, not the key's
	// token (only its seal).
	evs, err := e.store.Load(ctx, domain.CLISessionStream(started.Session.SessionID), 1)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ev := range evs {
		names = append(names, ev.Type)
		for _, secret := range []string{started.PollToken, token, token[len(token)-33:]} {
			if bytes.Contains(ev.Data, []byte(secret)) {
				t.Errorf("event %s holds a secret in clear", ev.Type)
			}
		}
	}
	if want := []string{"cli_session.started", "cli_session.approved", "cli_session.delivered"}; !slices.Equal(names, want) {
		t.Errorf("session stream: got %v; want %v", names, want)
	}
	if evs[1].OrgID != "org_a" || evs[0].OrgID != "" {
		t.Errorf("organisations: started %q, approved %q; want none, then org_a", evs[0].OrgID, evs[1].OrgID)
	}
}

func TestCLISignInRefusals(t *testing.T) {
	e := newCLIEnv(t)
	ctx := testutil.Context(t)
	_, pub := cliKeyPair(t)
	s := e.start(t, pub, nil)
	id, code := s.Session.SessionID, s.Session.UserCode

	if _, err := e.app.Console.StartCLISession.Handle(ctx, console.StartCLISession{CLISessionRequest: domain.CLISessionRequest{PublicKey: "nope"}}); domain.ErrorCode(err) != domain.CodeInvalidArgument {
		t.Errorf("start with a malformed public key: got %v; want invalid_argument", err)
	}
	for name, cmd := range map[string]console.PollCLISession{
		"another token":     {SessionID: id, PollToken: domain.NewPollToken()},
		"a malformed token": {SessionID: id, PollToken: "pfp_x"},
		"an unknown id":     {SessionID: domain.NewID(domain.PrefixCLISession), PollToken: s.PollToken},
		"a malformed id":    {SessionID: "cls_1", PollToken: s.PollToken},
	} {
		_, err := e.app.Console.PollCLISession.Handle(ctx, cmd)
		if want := domain.ErrCLISessionNotFound(); domain.ErrorCode(err) != domain.CodeNotFound || domain.AsError(err).Message != want.Message {
			t.Errorf("poll with %s: got %v; want %v", name, err, want)
		}
	}

	key := domain.Auth{OrgID: "org_a", Kind: domain.PrincipalAPIKey, APIKeyID: "key_1", Scopes: domain.AllScopes}
	app := domain.Auth{OrgID: "org_a", Kind: domain.PrincipalApp, UserID: "u_ann", ClientID: "app", Scopes: domain.AllScopes}
	for _, a := range []domain.Auth{key, app} {
		if _, err := e.app.Console.GetCLISessionByCode.Handle(ctx, console.GetCLISessionByCode{Auth: a, UserCode: code}); domain.ErrorCode(err) != domain.CodePermissionDenied {
			t.Errorf("%s looks a code up: got %v; want permission_denied", a.Kind, err)
		}
		if _, err := e.app.Console.ApproveCLISession.Handle(ctx, console.ApproveCLISession{Auth: a, SessionID: id, UserCode: code}); domain.ErrorCode(err) != domain.CodePermissionDenied {
			t.Errorf("%s approves: got %v; want permission_denied", a.Kind, err)
		}
	}
	if _, err := e.app.Console.ApproveCLISession.Handle(ctx, console.ApproveCLISession{Auth: cliAnn, SessionID: id}); domain.ErrorCode(err) != domain.CodeInvalidArgument {
		t.Errorf("approve without the code: got %v; want invalid_argument", err)
	}
	if _, err := e.app.Console.ApproveCLISession.Handle(ctx, console.ApproveCLISession{Auth: cliAnn, SessionID: id, UserCode: domain.NewUserCode()}); domain.ErrorCode(err) != domain.CodeNotFound {
		t.Errorf("approve with another code: got %v; want not_found", err)
	}
	if _, err := e.app.Console.ApproveCLISession.Handle(ctx, console.ApproveCLISession{Auth: cliAnn, SessionID: id, UserCode: code,
		Scopes: []domain.Scope{domain.ScopeAppsDelete}}); domain.ErrorCode(err) != domain.CodeInvalidArgument {
		t.Errorf("grant a scope the CLI did not ask for: got %v; want invalid_argument", err)
	}
	if keys, _ := e.reader.List(ctx, cliAnn); len(keys) != 0 {
		t.Errorf("refused approvals minted %d keys; want none", len(keys))
	}
}

func TestCLISignInTenancy(t *testing.T) {
	e := newCLIEnv(t)
	ctx := testutil.Context(t)
	_, pub := cliKeyPair(t)
	s := e.start(t, pub, nil)
	id, code := s.Session.SessionID, s.Session.UserCode
	if _, err := e.app.Console.DenyCLISession.Handle(ctx, console.DenyCLISession{Auth: cliAnn, SessionID: id, UserCode: code}); err != nil {
		t.Fatal(err)
	}
	unknownID, unknownCode := domain.NewID(domain.PrefixCLISession), domain.NewUserCode()

	same := func(what string, theirs, unknown error) {
		t.Helper()
		if domain.ErrorCode(theirs) != domain.CodeNotFound || theirs.Error() != unknown.Error() {
			t.Errorf("%s: organisation A's session answers %v; an unknown one %v; want one not_found", what, theirs, unknown)
		}
	}
	_, theirs := e.app.Console.GetCLISessionByCode.Handle(ctx, console.GetCLISessionByCode{Auth: cliBea, UserCode: code})
	_, unknown := e.app.Console.GetCLISessionByCode.Handle(ctx, console.GetCLISessionByCode{Auth: cliBea, UserCode: unknownCode})
	same("by code", theirs, unknown)
	_, theirs = e.app.Console.ApproveCLISession.Handle(ctx, console.ApproveCLISession{Auth: cliBea, SessionID: id, UserCode: code})
	_, unknown = e.app.Console.ApproveCLISession.Handle(ctx, console.ApproveCLISession{Auth: cliBea, SessionID: unknownID, UserCode: code})
	same("approve", theirs, unknown)
	_, theirs = e.app.Console.DenyCLISession.Handle(ctx, console.DenyCLISession{Auth: cliBea, SessionID: id, UserCode: code})
	_, unknown = e.app.Console.DenyCLISession.Handle(ctx, console.DenyCLISession{Auth: cliBea, SessionID: unknownID, UserCode: code})
	same("deny", theirs, unknown)

	// A itself sees its decision; the CLI hears of it.
	v, err := e.app.Console.GetCLISessionByCode.Handle(ctx, console.GetCLISessionByCode{Auth: cliAnn, UserCode: code})
	if err != nil || v.State != domain.CLIStateDenied || len(v.Grantable) != 0 {
		t.Errorf("A's own lookup: got %+v %v; want denied, nothing grantable", v, err)
	}
	if p := e.poll(t, s); p.State != domain.CLIStateDenied || p.Sealed != nil {
		t.Errorf("poll: got %+v; want denied", p)
	}
}

func TestCLISignInExpires(t *testing.T) {
	e := newCLIEnv(t)
	ctx := testutil.Context(t)
	_, pub := cliKeyPair(t)
	s := e.start(t, pub, nil)
	e.clock.Advance(domain.CLISessionLifetime)
	if p := e.poll(t, s); p.State != domain.CLIStateExpired {
		t.Fatalf("poll after ten minutes: got %s; want expired", p.State)
	}
	_, err := e.app.Console.ApproveCLISession.Handle(ctx, console.ApproveCLISession{Auth: cliAnn, SessionID: s.Session.SessionID, UserCode: s.Session.UserCode})
	if domain.ErrorCode(err) != domain.CodeInvalidArgument || domain.AsError(err).Extra["state"] != domain.CLIStateExpired {
		t.Fatalf("approve after expiry: got %v; want invalid_argument with state expired", err)
	}
	if keys, _ := e.reader.List(ctx, cliAnn); len(keys) != 0 {
		t.Errorf("an expired approval minted %d keys; want none", len(keys))
	}
}

// TestCLIApprovalLostToADenialMintsNoKey: a person denies the session
// while another's approval is being recorded with its key — after the
// approval was decided, before the unit holding it and the key committed.
// The unit fails on the session's moved stream, is decided again on the
// denied session and refused: no key exists that nobody received, with no
// revocation needed (issue 27: a crash there could not revoke one).
func TestCLIApprovalLostToADenialMintsNoKey(t *testing.T) {
	e := newCLIEnv(t)
	ctx := testutil.Context(t)
	_, pub := cliKeyPair(t)
	s := e.start(t, pub, nil)
	var decided int
	racing := console.ApproveCLISessionHandler{
		CLISessions: console.NewCLISessions(console.CLISessionConfig{Store: e.store, Now: e.clock.Now}),
		Mint: cqrs.Fake[keys.MintAPIKey, keys.MintedAPIKey](func(ctx context.Context, m keys.MintAPIKey) (keys.MintedAPIKey, error) {
			approve := m.Also
			m.Also = func(k keys.MintedAPIKey, u *eventstore.Unit) error {
				err := approve(k, u)
				if decided++; decided == 1 {
					if _, err := e.app.Console.DenyCLISession.Handle(ctx, console.DenyCLISession{Auth: cliAnn, SessionID: s.Session.SessionID, UserCode: s.Session.UserCode}); err != nil {
						t.Fatal(err)
					}
				}
				return err
			}
			return e.app.Keys.MintAPIKey.Handle(ctx, m)
		}),
	}
	_, err := racing.Handle(ctx, console.ApproveCLISession{Auth: cliAnn, SessionID: s.Session.SessionID, UserCode: s.Session.UserCode})
	if domain.ErrorCode(err) != domain.CodeInvalidArgument || domain.AsError(err).Extra["state"] != domain.CLIStateDenied {
		t.Fatalf("got %v; want invalid_argument with state denied", err)
	}
	if decided != 2 {
		t.Errorf("the approval was decided %d times; want twice (the second on the denied session)", decided)
	}
	if keys, err := e.reader.List(ctx, cliAnn); err != nil || len(keys) != 0 {
		t.Fatalf("keys after the lost approval: %+v %v; want none", keys, err)
	}
	if p := e.poll(t, s); p.State != domain.CLIStateDenied {
		t.Errorf("poll: got %s; want denied", p.State)
	}
}

// TestCLISessionsWithoutTheCapability: a deployment without CLI sign-in
// answers service_unavailable.
func TestCLISessionsWithoutTheCapability(t *testing.T) {
	app := commands.NewApplication(commands.Capabilities{})
	_, err := app.Console.StartCLISession.Handle(testutil.Context(t), console.StartCLISession{})
	if domain.ErrorCode(err) != domain.CodeServiceUnavailable {
		t.Errorf("got %v; want service_unavailable", err)
	}
	_, err = app.Console.ListConsoleEvents.Handle(testutil.Context(t), console.ListConsoleEvents{Auth: cliAnn})
	if domain.ErrorCode(err) != domain.CodeServiceUnavailable {
		t.Errorf("got %v; want service_unavailable", err)
	}
}
