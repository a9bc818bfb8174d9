package identity_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/identity"
	"phonefleet/projections"
	"phonefleet/testutil"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// keyEnv is a key store: the event store, the api_keys projection running,
// and a verifier over it with an injected clock and pepper.
type keyEnv struct {
	store    *eventstore.Store
	runner   *projections.Runner
	hasher   *identity.Hasher
	clock    *testutil.Clock
	verifier *identity.KeyVerifier
	pool     *pgxpool.Pool
}

func newKeyEnv(t *testing.T) *keyEnv {
	t.Helper()
	pool := testutil.SmallPool(t, 6)
	store := eventstore.New(pool, eventstore.WithUpcaster(domain.Events))
	runner, err := projections.NewRunner(store, quiet, []projections.Projection{projections.APIKeys{}},
		projections.WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testutil.Context(t))
	done := make(chan struct{})
	if err := runner.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	go func() { runner.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	hasher, err := identity.NewHasher([]byte(strings.Repeat("k", identity.PepperLen)))
	if err != nil {
		t.Fatal(err)
	}
	clock := newClock()
	return &keyEnv{store: store, runner: runner, hasher: hasher, clock: clock, pool: pool,
		verifier: &identity.KeyVerifier{Lookup: projections.APIKeyReader{DB: pool}, Hasher: hasher, Now: clock.Now}}
}

// record appends ev to the key's stream and waits for the key store.
func (e *keyEnv) record(t *testing.T, keyID string, ev domain.Event) {
	t.Helper()
	name, version, data, err := domain.Events.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	a, err := e.store.Append(testutil.Context(t), domain.APIKeyStream(keyID), eventstore.AnyVersion,
		eventstore.NewEvent{Type: name, SchemaVersion: version, OrgID: "org_a", Data: data})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(testutil.Context(t), 30*time.Second)
	defer cancel()
	if err := e.runner.WaitFor(ctx, projections.APIKeysName, a); err != nil {
		t.Fatal(err)
	}
}

// mint records a new key of org_a with scopes and returns its token.
func (e *keyEnv) mint(t *testing.T, scopes []domain.Scope, devices []string, lifetime time.Duration) identity.APIKeyToken {
	t.Helper()
	tok, err := identity.NewAPIKeyToken()
	if err != nil {
		t.Fatal(err)
	}
	now := e.clock.Now()
	e.record(t, tok.KeyID, domain.APIKeyMinted{KeyID: tok.KeyID, OrgID: "org_a", Name: "test", Scopes: scopes,
		DeviceIDs: devices, MintedBy: "user_1", MintedByRole: domain.RoleAdmin, Instance: "https://issuer.example",
		SecretHash: e.hasher.Hash(tok.Secret), MintedAt: now, ExpiresAt: now.Add(lifetime)})
	return tok
}
