package checkpoints_test

import (
	"crypto/rand"
	"errors"
	"sync"
	"testing"
	"time"

	"phonefleet/commands/checkpoints"
	"phonefleet/commands/cqrs"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/receiptchain"
	"phonefleet/testutil"
	"phonefleet/testutil/fleettest"
)

func newBox(t *testing.T) *domain.SecretBox {
	t.Helper()
	key := make([]byte, 32)
	rand.Read(key)
	box, err := domain.NewSecretBox(key)
	if err != nil {
		t.Fatal(err)
	}
	return box
}

// request records one receipt's request in org's chain, as the fleet
// would (one chain entry).
func request(t *testing.T, env *fleettest.Env, org, key string, at time.Time) {
	t.Helper()
	req := domain.ActionRequested{ActionID: domain.NewID(domain.PrefixAction), DeviceID: "dev_x", IdempotencyKey: key,
		Action: domain.ActionTap, Arguments: []byte(`{"x":1,"y":1}`), Actor: domain.Actor{Kind: "user", ID: "user_a"},
		LeaseID: "lse_x", FencingToken: 1, RequestedAt: at}
	name, version, data, err := domain.Events.Encode(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Store.Append(testutil.Context(t), domain.ActionStream(req.ActionID), eventstore.NoStream,
		eventstore.NewEvent{Type: name, SchemaVersion: version, OrgID: org, Data: data}); err != nil {
		t.Fatal(err)
	}
}

// TestInstancesAgreeAndSignOnce: two instances (two capabilities over
// one database, sharing the server key) starting together generate one
// key between them; signing together, they sign each due head once; the
// policy signs after Every entries or after Interval with an entry added,
// and never a chain that did not move; a rotated key signs the next
// checkpoint while the old one stays published, and every checkpoint
// verifies against the published keys.
func TestInstancesAgreeAndSignOnce(t *testing.T) {
	env := fleettest.Start(t, fleettest.Options{})
	ctx := testutil.Context(t)
	clock := testutil.NewClock(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	box := newBox(t)
	policy := domain.CheckpointPolicy{Every: 3, Interval: time.Hour}
	var inst [2]checkpoints.Handlers
	for i := range inst {
		c := &checkpoints.Checkpoints{Store: env.Store, Pool: env.Pool, Box: box, Policy: policy, Now: clock.Now, ReadModels: env.Runner}
		inst[i] = c.Handlers(cqrs.Decorator{})
	}
	both := func(run func(h checkpoints.Handlers) (any, error)) [2]any {
		var out [2]any
		var wg sync.WaitGroup
		for i := range inst {
			wg.Go(func() {
				v, err := run(inst[i])
				if err != nil {
					t.Error(err)
				}
				out[i] = v
			})
		}
		wg.Wait()
		return out
	}

	keys := both(func(h checkpoints.Handlers) (any, error) {
		k, err := h.EnsureSigningKey.Handle(ctx, checkpoints.EnsureSigningKey{})
		return k.KeyID, err
	})
	if keys[0] != keys[1] || keys[0] == "" {
		t.Fatalf("got keys %v; want both instances on one key", keys)
	}
	if evs, _ := env.Store.Load(ctx, domain.ReceiptSigningKeysStream, 1); len(evs) != 1 {
		t.Fatalf("got %d key events; want 1", len(evs))
	}

	const org = "org_checkpoints"
	signBoth := func() int {
		t.Helper()
		env.Settle(t)
		n := both(func(h checkpoints.Handlers) (any, error) {
			return h.SignCheckpoints.Handle(ctx, checkpoints.SignCheckpoints{})
		})
		env.Settle(t)
		return n[0].(int) + n[1].(int)
	}
	for i := range 2 {
		request(t, env, org, "k"+string(rune('a'+i)), clock.Now())
	}
	if n := signBoth(); n != 1 {
		t.Fatalf("first checkpoint: got %d signed by the two instances; want 1", n)
	}
	request(t, env, org, "kc", clock.Now())
	if n := signBoth(); n != 0 {
		t.Errorf("one entry later, within the interval: got %d signed; want 0", n)
	}
	clock.Advance(time.Hour)
	if n := signBoth(); n != 1 {
		t.Errorf("one entry later, the interval passed: got %d signed; want 1", n)
	}
	clock.Advance(2 * time.Hour)
	if n := signBoth(); n != 0 {
		t.Errorf("a chain that did not move: got %d signed; want 0", n)
	}
	for i := range 3 {
		request(t, env, org, "kd"+string(rune('a'+i)), clock.Now())
	}
	if n := signBoth(); n != 1 {
		t.Errorf("Every entries later: got %d signed; want 1", n)
	}

	rotated, err := inst[0].RotateSigningKey.Handle(ctx, checkpoints.RotateSigningKey{})
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	for i := range 3 {
		request(t, env, org, "ke"+string(rune('a'+i)), clock.Now())
	}
	if n := signBoth(); n != 1 {
		t.Errorf("after rotation: got %d signed; want 1", n)
	}

	auth := domain.Auth{OrgID: org, Kind: domain.PrincipalAPIKey, APIKeyID: "key_a", Scopes: []domain.Scope{domain.ScopeDevicesRead}}
	page, err := inst[1].ListCheckpoints.Handle(ctx, checkpoints.ListCheckpoints{Auth: auth, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Checkpoints) != 2 || page.Checkpoints[0].Entries != 9 || page.Checkpoints[1].Entries != 6 || page.NextBefore != 6 {
		t.Fatalf("got page %+v; want the checkpoints of entries 9 and 6, then more before 6", page)
	}
	rest, err := inst[1].ListCheckpoints.Handle(ctx, checkpoints.ListCheckpoints{Auth: auth, Before: page.NextBefore})
	if err != nil {
		t.Fatal(err)
	}
	all := append(page.Checkpoints, rest.Checkpoints...)
	if len(all) != 4 || all[2].Entries != 3 || all[3].Entries != 2 || rest.NextBefore != 0 {
		t.Fatalf("got checkpoints %+v; want entries 9, 6, 3, 2", all)
	}
	if all[0].KeyID != rotated.KeyID || all[1].KeyID != keys[0] {
		t.Errorf("got keys %s, %s; want the rotated key %s after the first %s", all[0].KeyID, all[1].KeyID, rotated.KeyID, keys[0])
	}
	set, err := inst[1].ListSigningKeys.Handle(ctx, checkpoints.ListSigningKeys{})
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Keys) != 2 || set.Keys[0].KeyID != rotated.KeyID || set.Keys[1].ValidUntil == nil {
		t.Fatalf("got keys %+v; want the rotated key first, the first one retired", set)
	}
	for _, c := range all {
		if err := set.CheckSignature(c); err != nil {
			t.Errorf("checkpoint of entry %d: %v", c.Entries, err)
		}
	}
	tampered := all[0]
	tampered.Entries++
	if err := set.CheckSignature(tampered); !errors.Is(err, receiptchain.ErrBadSignature) {
		t.Errorf("a checkpoint whose count was changed: got %v; want %v", err, receiptchain.ErrBadSignature)
	}

	// Tenancy and the export's gate.
	other := auth
	other.OrgID = "org_other"
	if p, err := inst[1].ListCheckpoints.Handle(ctx, checkpoints.ListCheckpoints{Auth: other}); err != nil || len(p.Checkpoints) != 0 {
		t.Errorf("another organisation: got %+v, %v; want an empty page", p, err)
	}
	narrowed := auth
	narrowed.Devices = []string{"dev_x"}
	if _, err := inst[1].ListCheckpoints.Handle(ctx, checkpoints.ListCheckpoints{Auth: narrowed}); domain.ErrorCode(err) != domain.CodePermissionDenied {
		t.Errorf("a key narrowed to devices: got %v; want permission_denied", err)
	}

	// An instance with another server key cannot use the keys: it fails
	// to start (it could sign nothing) and may not rotate.
	stranger := &checkpoints.Checkpoints{Store: env.Store, Pool: env.Pool, Box: newBox(t), Policy: policy, Now: clock.Now}
	h := stranger.Handlers(cqrs.Decorator{})
	if _, err := h.EnsureSigningKey.Handle(ctx, checkpoints.EnsureSigningKey{}); !errors.Is(err, domain.ErrSecretUnreadable) {
		t.Errorf("start with another server key: got %v; want %v", err, domain.ErrSecretUnreadable)
	}
	if _, err := h.RotateSigningKey.Handle(ctx, checkpoints.RotateSigningKey{}); domain.ErrorCode(err) != domain.CodeInvalidArgument {
		t.Errorf("rotate with another server key: got %v; want invalid_argument", err)
	}
}

// TestRotationKeepsTheOldKeyValidPastItsLastSignature: a checkpoint the
// old key signs while a rotation is decided, on an instance whose clock is
// a minute ahead of the rotating one's, commits before the rotation does.
// The old key must stay valid until after that checkpoint's signedAt:
// every checkpoint verifies against the published keys, and a checkpoint
// signed afterwards by the instance behind chooses the key valid at its
// time.
func TestRotationKeepsTheOldKeyValidPastItsLastSignature(t *testing.T) {
	env := fleettest.Start(t, fleettest.Options{})
	ctx := testutil.Context(t)
	behind := testutil.NewClock(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	ahead := func() time.Time { return behind.Now().Add(time.Minute) }
	box := newBox(t)
	policy := domain.CheckpointPolicy{Every: 1, Interval: time.Hour}
	signer := (&checkpoints.Checkpoints{Store: env.Store, Pool: env.Pool, Box: box, Policy: policy, Now: ahead,
		ReadModels: env.Runner}).Handlers(cqrs.Decorator{})
	const org = "org_rotation_race"
	var once sync.Once
	rotating := false
	rotatorNow := func() time.Time {
		if rotating {
			// The other instance signs now, with the key it reads: the old one.
			once.Do(func() {
				request(t, env, org, "during", behind.Now())
				env.Settle(t)
				if n, err := signer.SignCheckpoints.Handle(ctx, checkpoints.SignCheckpoints{}); err != nil || n != 1 {
					t.Errorf("signing during the rotation: got %d, %v; want 1 signed", n, err)
				}
			})
		}
		return behind.Now()
	}
	rotator := (&checkpoints.Checkpoints{Store: env.Store, Pool: env.Pool, Box: box, Policy: policy, Now: rotatorNow,
		ReadModels: env.Runner}).Handlers(cqrs.Decorator{})
	first, err := rotator.EnsureSigningKey.Handle(ctx, checkpoints.EnsureSigningKey{})
	if err != nil {
		t.Fatal(err)
	}
	request(t, env, org, "before", behind.Now())
	env.Settle(t)
	if n, err := signer.SignCheckpoints.Handle(ctx, checkpoints.SignCheckpoints{}); err != nil || n != 1 {
		t.Fatalf("first checkpoint: got %d, %v; want 1 signed", n, err)
	}
	behind.Advance(time.Second)
	rotating = true
	rotated, err := rotator.RotateSigningKey.Handle(ctx, checkpoints.RotateSigningKey{})
	if err != nil {
		t.Fatal(err)
	}
	rotating = false
	// The instance behind signs next: at its time the old key still signs.
	request(t, env, org, "after", behind.Now())
	env.Settle(t)
	behindSigner := (&checkpoints.Checkpoints{Store: env.Store, Pool: env.Pool, Box: box, Policy: policy, Now: behind.Now,
		ReadModels: env.Runner}).Handlers(cqrs.Decorator{})
	if n, err := behindSigner.SignCheckpoints.Handle(ctx, checkpoints.SignCheckpoints{}); err != nil || n != 1 {
		t.Fatalf("checkpoint after the rotation: got %d, %v; want 1 signed", n, err)
	}
	env.Settle(t)

	set, err := signer.ListSigningKeys.Handle(ctx, checkpoints.ListSigningKeys{})
	if err != nil {
		t.Fatal(err)
	}
	auth := domain.Auth{OrgID: org, Kind: domain.PrincipalAPIKey, APIKeyID: "key_a", Scopes: []domain.Scope{domain.ScopeDevicesRead}}
	page, err := signer.ListCheckpoints.Handle(ctx, checkpoints.ListCheckpoints{Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Checkpoints) != 3 {
		t.Fatalf("got %d checkpoints; want 3", len(page.Checkpoints))
	}
	for _, c := range page.Checkpoints {
		if err := set.CheckSignature(c); err != nil {
			t.Errorf("checkpoint of entry %d (key %s, signed %s): %v", c.Entries, c.KeyID, c.SignedAt, err)
		}
	}
	if got := page.Checkpoints[1].KeyID; got != first.KeyID {
		t.Errorf("got the checkpoint signed during the rotation under %s; want the old key %s", got, first.KeyID)
	}
	if rotated.KeyID == first.KeyID {
		t.Errorf("got no new key from the rotation")
	}
}
