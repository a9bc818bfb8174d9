package backends

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"phonefleet/domain"
	"phonefleet/testutil"
)

// A gateway's claim is held by one process at a time; its epoch counts the
// takes, and a take is a takeover unless this process was the last to
// hold it; HostState reads both from any connection.
func TestGatewayClaimsTakeAndRelease(t *testing.T) {
	ctx := context.Background()
	pool := testutil.FreshPool(t)
	state := HostState(pool)
	gw := domain.NewID(domain.PrefixGateway)
	key := domain.GatewayHostKey(gw)
	want := func(wantEpoch int64, wantHeld bool) {
		t.Helper()
		epoch, held, err := state(ctx, key)
		if err != nil || epoch != wantEpoch || held != wantHeld {
			t.Fatalf("HostState(%s) = epoch %d, held %v (%v); want %d, %v", key, epoch, held, err, wantEpoch, wantHeld)
		}
	}
	take := func(c *GatewayClaims, wantTookOver bool) {
		t.Helper()
		tookOver, err := c.Take(ctx, gw)
		if err != nil || tookOver != wantTookOver {
			t.Fatalf("Take: took over %v (%v); want %v", tookOver, err, wantTookOver)
		}
	}
	a, b := NewGatewayClaims(pool), NewGatewayClaims(pool)
	t.Cleanup(a.Close)
	t.Cleanup(b.Close)

	want(0, false)
	take(a, true) // nobody known drove it before
	if !a.Holds(key) || !slices.Equal(a.Held(), []string{key}) || b.Holds(key) {
		t.Fatalf("after a's take: a holds %v (%v), b holds %v", a.Holds(key), a.Held(), b.Holds(key))
	}
	want(1, true)
	if _, err := b.Take(ctx, gw); !errors.Is(err, ErrHeld) {
		t.Fatalf("b.Take while a holds it: %v; want ErrHeld", err)
	}
	take(a, false) // kept
	want(1, true)

	a.Release(gw)
	if a.Holds(key) || len(a.Held()) != 0 {
		t.Fatalf("after Release a still holds %v", a.Held())
	}
	want(1, false)
	take(a, false) // nobody drove it meanwhile: its own actions, nothing to settle
	want(2, true)

	a.Release(gw)
	take(b, true)
	want(3, true)
	b.Release(gw)
	take(a, true) // b drove it in between
	want(4, true)

	// The claims' connection dies: every claim goes with it.
	other := domain.NewID(domain.PrefixGateway)
	take2, err := a.Take(ctx, other)
	if err != nil || !take2 {
		t.Fatalf("Take(other): %v, %v", take2, err)
	}
	a.mu.Lock()
	_ = a.conn.Close(ctx)
	a.mu.Unlock()
	if err := a.Check(ctx); err == nil {
		t.Fatal("Check after the connection closed: no error")
	}
	if len(a.Held()) != 0 || a.Holds(key) {
		t.Fatalf("after the connection was lost a holds %v", a.Held())
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, held, err := state(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if !held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lock of a closed connection is still held")
		}
		time.Sleep(20 * time.Millisecond)
	}
	take(b, true)
	// a connects again; nobody drove the other gateway meanwhile.
	if tookOver, err := a.Take(ctx, other); err != nil || tookOver || !a.Holds(domain.GatewayHostKey(other)) {
		t.Fatalf("a re-taking the other gateway: took over %v (%v), holds %v; want false, true", tookOver, err, a.Held())
	}
}

// HostState tells the sim host's lock from a gateway's, and refuses a key
// of neither kind.
func TestHostStateOfTheSimHost(t *testing.T) {
	ctx := context.Background()
	pool := testutil.FreshPool(t)
	state := HostState(pool)
	gw := domain.NewID(domain.PrefixGateway)
	claims := NewGatewayClaims(pool)
	t.Cleanup(claims.Close)
	if _, err := claims.Take(ctx, gw); err != nil {
		t.Fatal(err)
	}
	if epoch, held, err := state(ctx, domain.HostSim); err != nil || epoch != 0 || held {
		t.Fatalf("sim host with only a gateway held: epoch %d, held %v (%v); want 0, false", epoch, held, err)
	}
	h := NewSimHost(pool)
	t.Cleanup(h.Release)
	if hosting, _, err := h.TryHost(ctx); err != nil || !hosting {
		t.Fatalf("TryHost: %v, %v", hosting, err)
	}
	if epoch, held, err := state(ctx, domain.HostSim); err != nil || epoch != 1 || !held {
		t.Fatalf("sim host held: epoch %d, held %v (%v); want 1, true", epoch, held, err)
	}
	h.Release()
	if epoch, held, err := state(ctx, domain.HostSim); err != nil || epoch != 1 || held {
		t.Fatalf("sim host released: epoch %d, held %v (%v); want 1, false", epoch, held, err)
	}
	if _, _, err := state(ctx, "elsewhere"); err == nil {
		t.Fatal("HostState of an unknown host: no error")
	}
}

// Two gateways whose claim names have the same 32-bit hashtext are claimed
// by two processes at once, each its own: claim keys come from a registry
// (advisory_keys), not from a hash (issue 27).
func TestGatewayClaimsOfCollidingNamesAreDistinct(t *testing.T) {
	ctx := context.Background()
	pool := testutil.FreshPool(t)
	state := HostState(pool)
	// Found by hashing gw_1 … gw_300000: these two collide.
	gw1, gw2 := "gw_156085", "gw_15316"
	var same bool
	if err := pool.QueryRow(ctx, `SELECT hashtext($1) = hashtext($2)`, gatewayLockPrefix+domain.GatewayHostKey(gw1),
		gatewayLockPrefix+domain.GatewayHostKey(gw2)).Scan(&same); err != nil || !same {
		t.Fatalf("hashtext of the two claim names equal: %v (%v); want true (the fixture no longer collides)", same, err)
	}
	a, b := NewGatewayClaims(pool), NewGatewayClaims(pool)
	t.Cleanup(a.Close)
	t.Cleanup(b.Close)
	if _, err := a.Take(ctx, gw1); err != nil {
		t.Fatalf("a.Take(%s): %v", gw1, err)
	}
	if _, err := b.Take(ctx, gw2); err != nil {
		t.Fatalf("b.Take(%s) while a holds %s: %v; want it taken (another gateway)", gw2, gw1, err)
	}
	if _, err := b.Take(ctx, gw1); !errors.Is(err, ErrHeld) {
		t.Fatalf("b.Take(%s) while a holds it: %v; want ErrHeld", gw1, err)
	}
	for _, gw := range []string{gw1, gw2} {
		if _, held, err := state(ctx, domain.GatewayHostKey(gw)); err != nil || !held {
			t.Fatalf("HostState(%s): held %v (%v); want true", gw, held, err)
		}
	}
	a.Release(gw1)
	if _, held, err := state(ctx, domain.GatewayHostKey(gw1)); err != nil || held {
		t.Fatalf("HostState(%s) after a's release: held %v (%v); want false", gw1, held, err)
	}
	if _, held, err := state(ctx, domain.GatewayHostKey(gw2)); err != nil || !held {
		t.Fatalf("HostState(%s) after a released the other: held %v (%v); want true", gw2, held, err)
	}
}
