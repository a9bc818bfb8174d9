package keys_test

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"phonefleet/commands/cqrs"
	"phonefleet/commands/keys"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/identity"
	"phonefleet/projections"
	"phonefleet/testutil"
)

type keyCmds struct {
	store  *eventstore.Store
	mint   keys.MintAPIKeyHandler
	rotate keys.RotateAPIKeyHandler
	renew  keys.RenewAPIKeyHandler
	narrow keys.NarrowAPIKeyHandler
	revoke keys.RevokeAPIKeyHandler
	reader projections.APIKeyReader
	hasher *identity.Hasher
}

func newKeyCmds(t *testing.T) *keyCmds {
	t.Helper()
	pool := testutil.SmallPool(t, 6)
	store := eventstore.New(pool, eventstore.WithUpcaster(domain.Events))
	runner, err := projections.NewRunner(store, slog.New(slog.DiscardHandler), []projections.Projection{projections.APIKeys{}},
		projections.WithPollInterval(20*time.Millisecond))
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
	hasher, _ := identity.NewHasher(bytes.Repeat([]byte{1}, identity.PepperLen))
	deps := keys.APIKeyDeps{Store: store, ReadModels: runner}
	return &keyCmds{store: store, hasher: hasher, reader: projections.APIKeyReader{DB: pool},
		mint:   keys.MintAPIKeyHandler{APIKeyDeps: deps, Hasher: hasher},
		rotate: keys.RotateAPIKeyHandler{APIKeyDeps: deps, Hasher: hasher, Grace: time.Hour},
		renew:  keys.RenewAPIKeyHandler{APIKeyDeps: deps},
		narrow: keys.NarrowAPIKeyHandler{APIKeyDeps: deps},
		revoke: keys.RevokeAPIKeyHandler{APIKeyDeps: deps}}
}

// eventsOf returns the event names of a key's stream.
func (k *keyCmds) eventsOf(t *testing.T, keyID string) []string {
	t.Helper()
	evs, err := k.store.Load(testutil.Context(t), domain.APIKeyStream(keyID), 1)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return out
}

func TestAPIKeyCommandsEmitEvents(t *testing.T) {
	k := newKeyCmds(t)
	admin := domain.LocalOperator("org_a")
	// As the edge does: the authenticated principal is the events' actor.
	ctx := eventstore.WithActor(testutil.Context(t), "user", admin.UserID)
	minted, err := k.mint.Handle(ctx, keys.MintAPIKey{Auth: admin, Name: "ci", Scopes: []domain.Scope{domain.ScopeDevicesRead, domain.ScopeDevicesAct}})
	if err != nil {
		t.Fatal(err)
	}
	// The store holds an HMAC of the secret, never the token.
	evs, _ := k.store.Load(ctx, domain.APIKeyStream(minted.KeyID), 1)
	if bytes.Contains(evs[0].Data, []byte(minted.Token[len(minted.Token)-33:])) {
		t.Fatal("the minted event holds the secret; want only its HMAC")
	}
	// Read-your-writes: the key store has the key when Handle returns.
	if _, err := k.reader.Get(ctx, admin, minted.KeyID); err != nil {
		t.Fatalf("key store after mint: %v", err)
	}
	if _, err := k.rotate.Handle(ctx, keys.RotateAPIKey{Auth: admin, KeyID: minted.KeyID}); err != nil {
		t.Fatal(err)
	}
	if err := cqrs.Err(k.renew.Handle(ctx, keys.RenewAPIKey{Auth: admin, KeyID: minted.KeyID, Lifetime: 48 * time.Hour})); err != nil {
		t.Fatal(err)
	}
	if err := cqrs.Err(k.narrow.Handle(ctx, keys.NarrowAPIKey{Auth: admin, KeyID: minted.KeyID, Scopes: []domain.Scope{domain.ScopeDevicesRead}})); err != nil {
		t.Fatal(err)
	}
	if err := cqrs.Err(k.revoke.Handle(ctx, keys.RevokeAPIKey{Auth: admin, KeyID: minted.KeyID})); err != nil {
		t.Fatal(err)
	}
	if err := cqrs.Err(k.revoke.Handle(ctx, keys.RevokeAPIKey{Auth: admin, KeyID: minted.KeyID})); err != nil {
		t.Fatalf("second revoke: %v; want success", err)
	}
	want := []string{"api_key.minted", "api_key.rotated", "api_key.renewed", "api_key.narrowed", "api_key.revoked"}
	if got := k.eventsOf(t, minted.KeyID); !slices.Equal(got, want) {
		t.Fatalf("got events %v; want %v", got, want)
	}
	rec, err := k.reader.Get(ctx, admin, minted.KeyID)
	if err != nil || rec.RevokedAt.IsZero() || len(rec.Scopes) != 1 {
		t.Fatalf("got %+v (%v); want the key store revoked and narrowed", rec, err)
	}
	meta, _ := evs[0].DecodeMetadata()
	if meta.ActorKind != "user" || meta.ActorID != admin.UserID {
		t.Fatalf("got actor %+v; want the minting person", meta)
	}
}

func TestAPIKeyCommandsRefuse(t *testing.T) {
	k := newKeyCmds(t)
	ctx := testutil.Context(t)
	admin := domain.LocalOperator("org_a")
	minted, err := k.mint.Handle(ctx, keys.MintAPIKey{Auth: admin, Scopes: []domain.Scope{domain.ScopeDevicesRead}})
	if err != nil {
		t.Fatal(err)
	}
	keyAuth := domain.Auth{OrgID: "org_a", Kind: domain.PrincipalAPIKey, APIKeyID: minted.KeyID, Scopes: []domain.Scope{domain.ScopeDevicesRead}}
	foreign := domain.LocalOperator("org_b")
	tests := []struct {
		name string
		run  func() error
		code domain.Code
	}{
		{"a key cannot mint", func() error {
			_, err := k.mint.Handle(ctx, keys.MintAPIKey{Auth: keyAuth, Scopes: []domain.Scope{domain.ScopeDevicesRead}})
			return err
		}, domain.CodePermissionDenied},
		{"a key cannot revoke another way than itself", func() error {
			return cqrs.Err(k.revoke.Handle(ctx, keys.RevokeAPIKey{Auth: keyAuth, KeyID: minted.KeyID}))
		}, domain.CodePermissionDenied},
		{"another organisation's admin", func() error {
			return cqrs.Err(k.renew.Handle(ctx, keys.RenewAPIKey{Auth: foreign, KeyID: minted.KeyID}))
		}, domain.CodeNotFound},
		{"another organisation's admin rotating", func() error {
			_, err := k.rotate.Handle(ctx, keys.RotateAPIKey{Auth: foreign, KeyID: minted.KeyID})
			return err
		}, domain.CodeNotFound},
		{"a key revoking another key as itself", func() error {
			return cqrs.Err(k.revoke.Handle(ctx, keys.RevokeAPIKey{Auth: keyAuth, KeyID: domain.NewID(domain.PrefixAPIKey), Self: true}))
		}, domain.CodeNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := domain.ErrorCode(tt.run()); got != tt.code {
				t.Fatalf("got %s; want %s", got, tt.code)
			}
		})
	}
	if got := k.eventsOf(t, minted.KeyID); len(got) != 1 {
		t.Fatalf("got events %v after refusals; want only the mint", got)
	}
}

func TestAPIKeyConcurrentChangesAreSerialised(t *testing.T) {
	k := newKeyCmds(t)
	ctx := testutil.Context(t)
	admin := domain.LocalOperator("org_a")
	minted, err := k.mint.Handle(ctx, keys.MintAPIKey{Auth: admin, Scopes: []domain.Scope{domain.ScopeDevicesRead}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = cqrs.Err(k.renew.Handle(ctx, keys.RenewAPIKey{Auth: admin, KeyID: minted.KeyID, Lifetime: time.Duration(i+1) * time.Hour}))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("renew %d: %v; want every concurrent renewal applied in turn", i, err)
		}
	}
	if got := k.eventsOf(t, minted.KeyID); len(got) != 5 {
		t.Fatalf("got %d events; want 5", len(got))
	}
}
