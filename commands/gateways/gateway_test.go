package gateways_test

import (
	"bytes"
	"context"
	"errors"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"phonefleet/commands"
	"phonefleet/commands/gateways"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/identity"
	"phonefleet/internal/releases"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// gwEnv is an application with the gateway capability on a database of
// its own, the gateways read model running, an injected clock, and every
// command's log line (debug) captured.
type gwEnv struct {
	app   commands.Application
	store *eventstore.Store
	clock *testutil.Clock
	logs  *testutil.SyncBuffer
}

var (
	gwAdmin  = domain.Auth{OrgID: "org_gw_a", Kind: domain.PrincipalConsole, UserID: "u_ada", Role: domain.RoleAdmin, Scopes: domain.AllScopes}
	gwMember = domain.Auth{OrgID: "org_gw_a", Kind: domain.PrincipalConsole, UserID: "u_bob", Role: domain.RoleMember, Scopes: domain.AllScopes}
	gwKey    = domain.Auth{OrgID: "org_gw_a", Kind: domain.PrincipalAPIKey, APIKeyID: "key_1", Scopes: domain.AllScopes}
	gwApp    = domain.Auth{OrgID: "org_gw_a", Kind: domain.PrincipalApp, UserID: "u_ada", ClientID: "app-1", Role: domain.RoleAdmin, Scopes: domain.AllScopes}
	gwOther  = domain.Auth{OrgID: "org_gw_b", Kind: domain.PrincipalConsole, UserID: "u_eve", Role: domain.RoleAdmin, Scopes: domain.AllScopes}
)

const gwSHA = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func newGWEnv(t *testing.T) *gwEnv {
	t.Helper()
	pool := testutil.SmallPool(t, 6)
	store := eventstore.New(pool, eventstore.WithUpcaster(domain.Events))
	runner, err := projections.NewRunner(store, slog.New(slog.DiscardHandler),
		[]projections.Projection{projections.Gateways{}}, projections.WithPollInterval(20*time.Millisecond))
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
	hasher, _ := identity.NewHasher(bytes.Repeat([]byte{9}, identity.PepperLen))
	path := filepath.Join(t.TempDir(), "releases.json")
	manifest := `{"releases":[{"version":"1.2.0","channel":"stable","url":"https://dl.example/1.2.0","sha256":"` + gwSHA +
		`","publishedAt":"2026-01-02T03:04:05Z"},{"version":"1.10.0","channel":"stable","url":"https://dl.example/1.10.0","sha256":"` + gwSHA +
		`","publishedAt":"2026-02-02T03:04:05Z"}]}`
	if err := os.WriteFile(path, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	rel, err := releases.Load(path, false)
	if err != nil {
		t.Fatal(err)
	}
	clock := testutil.NewClock(time.Now().UTC().Truncate(time.Minute))
	logs := &testutil.SyncBuffer{}
	app := commands.NewApplication(commands.Capabilities{
		Gateways: gateways.New(gateways.Config{Store: store, Hasher: hasher, Releases: rel, Now: clock.Now,
			ReadModels: testutil.ReadModels{RM: runner}}),
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	return &gwEnv{app: app, store: store, clock: clock, logs: logs}
}

func (e *gwEnv) code(t *testing.T, ttl time.Duration) gateways.CreatedGatewayEnrollmentCode {
	t.Helper()
	c, err := e.app.Gateways.CreateGatewayEnrollmentCode.Handle(testutil.Context(t),
		gateways.CreateGatewayEnrollmentCode{Auth: gwAdmin, Name: "rack 1", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// wantRefusal checks err is a 401 with reason.
func wantRefusal(t *testing.T, what string, err error, reason domain.UnauthorizedReason) {
	t.Helper()
	var de *domain.Error
	if !errors.As(err, &de) || de.Code != domain.CodeUnauthorized || de.Extra["reason"] != string(reason) {
		t.Errorf("%s: got %v; want unauthorized (%s)", what, err, reason)
	}
}

func wantCode(t *testing.T, what string, err error, code domain.Code) {
	t.Helper()
	var de *domain.Error
	if !errors.As(err, &de) || de.Code != code {
		t.Errorf("%s: got %v; want %s", what, err, code)
	}
}

func TestGatewayEnrollAuthenticateAndRevoke(t *testing.T) {
	e := newGWEnv(t)
	ctx := testutil.Context(t)
	c := e.code(t, 0)
	if !strings.HasPrefix(c.Code, identity.GatewayCodePrefix) || !c.ExpiresAt.Equal(e.clock.Now().Add(time.Hour)) {
		t.Fatalf("code: %+v; want a pfe_ code expiring in an hour", c)
	}
	g, err := e.app.Gateways.EnrollGateway.Handle(ctx, gateways.EnrollGateway{Code: c.Code, Version: "1.2.0"})
	if err != nil {
		t.Fatal(err)
	}
	if g.OrgID != gwAdmin.OrgID || g.Name != "rack 1" || !strings.HasPrefix(g.Credential, identity.GatewayCredentialPrefix) ||
		!domain.HasPrefix(g.GatewayID, domain.PrefixGateway) {
		t.Fatalf("enrolled: %+v", g)
	}
	p, err := e.app.Gateways.AuthenticateGateway.Handle(ctx, gateways.AuthenticateGateway{Credential: g.Credential})
	if err != nil || p.GatewayID != g.GatewayID || p.OrgID != gwAdmin.OrgID {
		t.Fatalf("authenticate: %+v %v", p, err)
	}

	// A code enrolls one gateway. Its exchange retried (the first answer
	// lost) within domain.GatewayEnrollAgainWindow, while the gateway never
	// connected, answers that gateway and credential again; afterwards a
	// used code is refused.
	again, err := e.app.Gateways.EnrollGateway.Handle(ctx, gateways.EnrollGateway{Code: c.Code, Name: "another name"})
	if err != nil || again != g {
		t.Fatalf("the exchange retried: %+v, %v; want the first answer %+v", again, err, g)
	}
	e.clock.Advance(domain.GatewayEnrollAgainWindow)
	_, err = e.app.Gateways.EnrollGateway.Handle(ctx, gateways.EnrollGateway{Code: c.Code})
	wantRefusal(t, "a code used a window ago", err, domain.ReasonInvalidToken)
	// A forged code (this code's id, another secret), an unknown one and a
	// malformed one: one answer.
	if id, _, err := identity.ParseGatewayCode(forgeGatewayToken(c.Code)); err != nil || id != c.CodeID {
		t.Fatalf("the forged code does not parse as code %s: %s %v", c.CodeID, id, err)
	}
	_, err = e.app.Gateways.EnrollGateway.Handle(ctx, gateways.EnrollGateway{Code: forgeGatewayToken(c.Code)})
	wantRefusal(t, "a forged code", err, domain.ReasonInvalidToken)
	forged, _ := identity.NewGatewayCode()
	_, err = e.app.Gateways.EnrollGateway.Handle(ctx, gateways.EnrollGateway{Code: forged.Token})
	wantRefusal(t, "an unknown code", err, domain.ReasonInvalidToken)
	_, err = e.app.Gateways.EnrollGateway.Handle(ctx, gateways.EnrollGateway{Code: "pfe_nope"})
	wantRefusal(t, "a malformed code", err, domain.ReasonInvalidToken)

	// Forged, malformed and missing credentials.
	other2 := struct{ Token string }{forgeGatewayToken(g.Credential)} // the right id, another secret
	_, err = e.app.Gateways.AuthenticateGateway.Handle(ctx, gateways.AuthenticateGateway{Credential: other2.Token})
	wantRefusal(t, "a forged credential", err, domain.ReasonInvalidToken)
	unknown, _ := identity.NewGatewayCredential(domain.NewID(domain.PrefixGateway))
	_, err = e.app.Gateways.AuthenticateGateway.Handle(ctx, gateways.AuthenticateGateway{Credential: unknown.Token})
	wantRefusal(t, "an unknown gateway", err, domain.ReasonInvalidToken)
	_, err = e.app.Gateways.AuthenticateGateway.Handle(ctx, gateways.AuthenticateGateway{Credential: "pbk_x"})
	wantRefusal(t, "a malformed credential", err, domain.ReasonMalformedCredentials)
	_, err = e.app.Gateways.AuthenticateGateway.Handle(ctx, gateways.AuthenticateGateway{})
	wantRefusal(t, "no credential", err, domain.ReasonMissingCredentials)

	// Releases: the highest version of the channel, with the credential.
	r, err := e.app.Gateways.CurrentRelease.Handle(ctx, gateways.CurrentRelease{Credential: g.Credential})
	if err != nil || r.Version != "1.10.0" || r.URL != "https://dl.example/1.10.0" {
		t.Fatalf("current release: %+v %v", r, err)
	}
	_, err = e.app.Gateways.CurrentRelease.Handle(ctx, gateways.CurrentRelease{Credential: g.Credential, Channel: "beta"})
	wantCode(t, "a channel without releases", err, domain.CodeNotFound)
	_, err = e.app.Gateways.CurrentRelease.Handle(ctx, gateways.CurrentRelease{Credential: g.Credential, Channel: "Bad Channel"})
	wantCode(t, "a malformed channel", err, domain.CodeInvalidArgument)
	_, err = e.app.Gateways.CurrentRelease.Handle(ctx, gateways.CurrentRelease{Credential: other2.Token})
	wantRefusal(t, "releases with a forged credential", err, domain.ReasonInvalidToken)

	// Another organisation's gateway is not found; the admin revokes it.
	_, err = e.app.Gateways.RevokeGateway.Handle(ctx, gateways.RevokeGateway{Auth: gwOther, GatewayID: g.GatewayID})
	wantCode(t, "revoking another organisation's gateway", err, domain.CodeNotFound)
	if _, err := e.app.Gateways.RevokeGateway.Handle(ctx, gateways.RevokeGateway{Auth: gwAdmin, GatewayID: g.GatewayID}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.app.Gateways.RevokeGateway.Handle(ctx, gateways.RevokeGateway{Auth: gwAdmin, GatewayID: g.GatewayID}); err != nil {
		t.Fatalf("revoking again: %v", err)
	}
	_, err = e.app.Gateways.AuthenticateGateway.Handle(ctx, gateways.AuthenticateGateway{Credential: g.Credential})
	wantRefusal(t, "a revoked gateway", err, domain.ReasonRevokedKey)
	_, err = e.app.Gateways.CurrentRelease.Handle(ctx, gateways.CurrentRelease{Credential: g.Credential})
	wantRefusal(t, "releases for a revoked gateway", err, domain.ReasonRevokedKey)

	list, err := e.app.Gateways.ListGateways.Handle(ctx, gateways.ListGateways{Auth: gwAdmin})
	if err != nil || len(list) != 1 || list[0].State != domain.GatewayStateRevoked || list[0].Version != "1.2.0" ||
		list[0].RevokedBy == nil || list[0].RevokedBy.ID != gwAdmin.UserID {
		t.Fatalf("list: %+v %v", list, err)
	}
	if list, err := e.app.Gateways.ListGateways.Handle(ctx, gateways.ListGateways{Auth: gwOther}); err != nil || len(list) != 0 {
		t.Fatalf("another organisation's list: %+v %v", list, err)
	}

	// Every step is an event; no secret is in any event or any log line.
	var types []string
	rows, err := e.store.Pool().Query(ctx, `SELECT event_type FROM events WHERE event_type LIKE 'gateway.%' ORDER BY position`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		types = append(types, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{"gateway.enrollment_code_created", "gateway.enrollment_code_used", "gateway.enrolled", "gateway.revoked"}
	if strings.Join(types, ",") != strings.Join(want, ",") {
		t.Errorf("events: %v; want %v", types, want)
	}
	_, codeSecret, _ := identity.ParseGatewayCode(c.Code)
	_, credSecret, _ := identity.ParseGatewayCredential(g.Credential)
	var all string
	if err := e.store.Pool().QueryRow(ctx, `SELECT coalesce(string_agg(data::text || metadata::text, ' '), '') FROM events`).Scan(&all); err != nil {
		t.Fatal(err)
	}
	logs := e.logs.String()
	if !strings.Contains(logs, "EnrollGateway") {
		t.Fatalf("the commands logged nothing: %q", logs)
	}
	for _, secret := range []string{c.Code, codeSecret, g.Credential, credSecret} {
		if strings.Contains(all, secret) {
			t.Errorf("a secret %.8s… is in the events", secret)
		}
		if strings.Contains(logs, secret) {
			t.Errorf("a secret %.8s… is in the logs", secret)
		}
	}
}

func TestGatewayCodeExpires(t *testing.T) {
	e := newGWEnv(t)
	ctx := testutil.Context(t)
	short := e.code(t, time.Minute)
	later := e.code(t, 2*time.Minute)
	e.clock.Advance(time.Minute)
	_, err := e.app.Gateways.EnrollGateway.Handle(ctx, gateways.EnrollGateway{Code: short.Code})
	wantRefusal(t, "a code at its expiry", err, domain.ReasonInvalidToken)
	e.clock.Advance(time.Minute - time.Microsecond)
	if _, err := e.app.Gateways.EnrollGateway.Handle(ctx, gateways.EnrollGateway{Code: later.Code}); err != nil {
		t.Fatalf("a code just before its expiry: %v", err)
	}
	for _, ttl := range []time.Duration{59 * time.Second, 24*time.Hour + time.Second} {
		_, err := e.app.Gateways.CreateGatewayEnrollmentCode.Handle(ctx, gateways.CreateGatewayEnrollmentCode{Auth: gwAdmin, TTL: ttl})
		wantCode(t, "ttl "+ttl.String(), err, domain.CodeInvalidArgument)
	}
}

// TestGatewayCodeEnrollsOneGatewayUnderRace: exchanges of one code racing
// enroll one gateway, and every one of them answers it.
func TestGatewayCodeEnrollsOneGatewayUnderRace(t *testing.T) {
	e := newGWEnv(t)
	c := e.code(t, 0)
	const n = 4
	var wg sync.WaitGroup
	errs, outs := make([]error, n), make([]gateways.EnrolledGateway, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = e.app.Gateways.EnrollGateway.Handle(testutil.Context(t), gateways.EnrollGateway{Code: c.Code})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil || outs[i] != outs[0] {
			t.Errorf("exchange %d: %+v, %v; want the one gateway %+v", i, outs[i], err, outs[0])
		}
	}
	var enrolled int
	if err := e.store.Pool().QueryRow(testutil.Context(t), `SELECT count(*) FROM events WHERE event_type = 'gateway.enrolled'`).Scan(&enrolled); err != nil || enrolled != 1 {
		t.Fatalf("%d gateways enrolled (%v); want 1", enrolled, err)
	}
}

// TestGatewayCodeIsNotExchangedAgainOnceConnected: once the gateway a code
// enrolled has connected (its first answer did arrive), or was revoked,
// the code is refused even within domain.GatewayEnrollAgainWindow.
func TestGatewayCodeIsNotExchangedAgainOnceConnected(t *testing.T) {
	e := newGWEnv(t)
	ctx := testutil.Context(t)
	for _, end := range []string{"connected", "revoked"} {
		c := e.code(t, 0)
		g, err := e.app.Gateways.EnrollGateway.Handle(ctx, gateways.EnrollGateway{Code: c.Code})
		if err != nil {
			t.Fatal(err)
		}
		if end == "connected" {
			_, err = e.app.Gateways.RecordGatewayConnection.Handle(ctx, gateways.RecordGatewayConnection{GatewayID: g.GatewayID, Connected: true, Instance: "inst_1"})
		} else {
			_, err = e.app.Gateways.RevokeGateway.Handle(ctx, gateways.RevokeGateway{Auth: gwAdmin, GatewayID: g.GatewayID})
		}
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.app.Gateways.EnrollGateway.Handle(ctx, gateways.EnrollGateway{Code: c.Code})
		wantRefusal(t, "the code of a gateway "+end, err, domain.ReasonInvalidToken)
	}
}

func TestGatewayManagementIsForAdminsOnly(t *testing.T) {
	e := newGWEnv(t)
	ctx := testutil.Context(t)
	c := e.code(t, 0)
	g, err := e.app.Gateways.EnrollGateway.Handle(ctx, gateways.EnrollGateway{Code: c.Code})
	if err != nil {
		t.Fatal(err)
	}
	for name, a := range map[string]domain.Auth{"member": gwMember, "api key": gwKey, "app": gwApp} {
		_, err := e.app.Gateways.CreateGatewayEnrollmentCode.Handle(ctx, gateways.CreateGatewayEnrollmentCode{Auth: a})
		wantCode(t, name+" creates a code", err, domain.CodePermissionDenied)
		_, err = e.app.Gateways.ListGateways.Handle(ctx, gateways.ListGateways{Auth: a})
		wantCode(t, name+" lists", err, domain.CodePermissionDenied)
		_, err = e.app.Gateways.RevokeGateway.Handle(ctx, gateways.RevokeGateway{Auth: a, GatewayID: g.GatewayID})
		wantCode(t, name+" revokes", err, domain.CodePermissionDenied)
	}
	if _, err := e.app.Gateways.AuthenticateGateway.Handle(ctx, gateways.AuthenticateGateway{Credential: g.Credential}); err != nil {
		t.Fatalf("the gateway after refused revocations: %v", err)
	}
}

// forgeGatewayToken returns a well-formed token naming tok's id with
// another secret (a valid checksum, so only the store can refuse it).
func forgeGatewayToken(tok string) string {
	const alphabet = "0123456789abcdefghjkmnpqrstvwxyz"
	head := tok[:len(tok)-33]
	secret := []byte(tok[len(tok)-33 : len(tok)-7])
	for i := range secret {
		secret[i] = alphabet[(strings.IndexByte(alphabet, secret[i])+1)%32]
	}
	body := head + string(secret)
	sum := crc32.ChecksumIEEE([]byte(body))
	var check [7]byte
	for i := 6; i >= 0; i-- {
		check[i] = alphabet[sum&31]
		sum >>= 5
	}
	return body + string(check[:])
}
