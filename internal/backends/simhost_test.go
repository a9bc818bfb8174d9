package backends

import (
	"context"
	"testing"

	"phonefleet/domain"
	"phonefleet/testutil"
)

// The sim host claim survives a lost lock connection (the database
// restarted): the process takes the lock again, keeps its phones and
// reports no takeover, unless another process held the lock meanwhile.
func TestSimHostKeepsItsPhonesAcrossALostConnection(t *testing.T) {
	ctx := context.Background()
	pool := testutil.FreshPool(t)
	d := &domain.Device{ID: domain.NewID(domain.PrefixDevice), OrgID: "org_a", Backend: domain.BackendSim, Model: "Pixel7"}
	try := func(h *SimHost, wantHosting, wantTookOver bool) {
		t.Helper()
		hosting, tookOver, err := h.TryHost(ctx)
		if err != nil || hosting != wantHosting || tookOver != wantTookOver {
			t.Fatalf("TryHost: got hosting %v, took over %v (%v); want %v, %v", hosting, tookOver, err, wantHosting, wantTookOver)
		}
	}
	a, b := NewSimHost(pool), NewSimHost(pool)
	t.Cleanup(a.Release)
	t.Cleanup(b.Release)

	try(a, true, true)  // first take
	try(a, true, false) // kept
	try(b, false, false)
	phone, err := a.Device(ctx, d)
	if err != nil {
		t.Fatal(err)
	}

	// The lock's connection dies, as in an immediate restart.
	a.lockMu.Lock()
	_ = a.lockConn.Close(ctx)
	a.lockMu.Unlock()
	try(a, true, false)
	if again, err := a.Device(ctx, d); err != nil || again != phone {
		t.Fatalf("after re-taking the lock: got another phone (%v); want the same one, nobody else drove it", err)
	}

	// Another process drives the phones in between: the next take is a
	// takeover and the phones are restored afresh.
	a.Release()
	try(b, true, true)
	b.Release()
	try(a, true, true)
	if again, err := a.Device(ctx, d); err != nil || again == phone {
		t.Fatalf("after another host: got the old phone (%v); want it restored from its saved state", err)
	}
}
