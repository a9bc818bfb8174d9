package backends

import (
	"context"
	"testing"
	"time"

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

// A phone being restored holds up only the calls for that phone: a phone
// restored already is answered while another's state is still being read
// (here, while a transaction holds the table its state is read from), the
// calls waiting on one restore all get the one phone, and a restore that
// fails is not remembered.
func TestSimHostRestoresEachPhoneOnItsOwn(t *testing.T) {
	ctx := testutil.Context(t)
	pool := testutil.FreshPool(t)
	h := NewSimHost(pool)
	t.Cleanup(h.Release)
	if hosting, _, err := h.TryHost(ctx); err != nil || !hosting {
		t.Fatalf("TryHost: %v, %v", hosting, err)
	}
	device := func() *domain.Device {
		return &domain.Device{ID: domain.NewID(domain.PrefixDevice), OrgID: "org_a", Backend: domain.BackendSim, Model: "Pixel7"}
	}
	a, b := device(), device()
	phoneA, err := h.Device(ctx, a)
	if err != nil {
		t.Fatal(err)
	}

	// b's state cannot be read until the lock is released.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `LOCK TABLE device_states IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	type got struct {
		dev *SimDevice
		err error
	}
	waiting := make(chan got, 2)
	for range 2 {
		go func() {
			dev, err := h.Device(ctx, b)
			waiting <- got{dev, err}
		}()
	}
	for blocked := false; !blocked; time.Sleep(10 * time.Millisecond) {
		if err := pool.QueryRow(ctx, `SELECT count(*) > 0 FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND query LIKE 'SELECT model, state FROM device_states%'`).Scan(&blocked); err != nil {
			t.Fatal(err)
		}
	}
	// a is answered now, with b's restore waiting on the lock: nothing
	// releases it until a's answer is in.
	answered := make(chan got, 1)
	go func() {
		dev, err := h.Device(ctx, a)
		answered <- got{dev, err}
	}()
	select {
	case r := <-answered:
		if r.err != nil || r.dev != phoneA {
			t.Fatalf("phone a: got %p (%v); want the phone restored before, %p", r.dev, r.err, phoneA)
		}
	case r := <-waiting:
		t.Fatalf("b was answered (%v) while its state could not be read", r.err)
	case <-time.After(30 * time.Second): // a hang, not a speed: a is answered at once or never
		t.Fatal("phone a was not answered while phone b's restore waited: the restore holds up every phone")
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	r1, r2 := <-waiting, <-waiting
	if r1.err != nil || r2.err != nil || r1.dev == nil || r1.dev != r2.dev {
		t.Fatalf("two calls for b: got %p (%v) and %p (%v); want one phone", r1.dev, r1.err, r2.dev, r2.err)
	}

	// A restore whose caller is gone fails and is tried again by the next
	// call.
	c := device()
	gone, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := h.Device(gone, c); err == nil {
		t.Fatal("a restore under a cancelled context succeeded")
	}
	if dev, err := h.Device(ctx, c); err != nil || dev == nil {
		t.Fatalf("after a failed restore: got %v; want the phone restored", err)
	}
}
