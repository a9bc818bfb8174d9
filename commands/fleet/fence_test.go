package fleet_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/testutil"
	"phonefleet/testutil/fleettest"
	"phonefleet/workers"
)

// countActs counts the actions a fleet's backends carry out.
type countActs struct {
	domain.Backend
	n *atomic.Int32
}

func (c countActs) Act(ctx context.Context, a domain.Action) (domain.ActionResult, error) {
	c.n.Add(1)
	return c.Backend.Act(ctx, a)
}

// SaveState keeps the wrapped sim phone's state saved with each outcome.
func (c countActs) SaveState() ([]byte, error) {
	if sb, ok := c.Backend.(domain.StatefulBackend); ok {
		return sb.SaveState()
	}
	return nil, nil
}

// A process that lost its sim host claim (its database session ended)
// while it still believes it drives the phones is a zombie: when another
// process has taken the host over, the zombie's next action is refused
// before it reaches its copy of the phone (its claim generation is stale
// in the database), nothing is performed twice, the zombie stops hosting at
// once, and the device is driven by the new holder alone.
func TestZombieHostIsFencedAfterATakeover(t *testing.T) {
	ctx := testutil.Context(t)
	var actsA, actsB atomic.Int32
	counting := func(n *atomic.Int32) func(*domain.Device, domain.Backend) domain.Backend {
		return func(_ *domain.Device, b domain.Backend) domain.Backend { return countActs{b, n} }
	}
	a := fleettest.Start(t, fleettest.Options{Devices: 1, Wrap: counting(&actsA)})
	b := fleettest.Start(t, fleettest.Options{DatabaseURL: a.URL, OrgID: a.OrgID, Wrap: counting(&actsB)})
	if !a.Sim.Hosting() || b.Sim.Hosting() {
		t.Fatalf("at start: a hosts %v, b %v; want a only", a.Sim.Hosting(), b.Sim.Hosting())
	}
	dev := a.DeviceIDs[0]
	lease := a.Lease(t, dev)
	act := func(env *fleettest.Env, key string) (fleet.ActOutcome, error) {
		return env.Fleet.PerformAction().Handle(ctx, fleet.PerformAction{Auth: env.Auth, DeviceID: dev, LeaseID: lease.LeaseID,
			Action: "key", Arguments: json.RawMessage(`{"key":"HOME"}`), IdempotencyKey: key})
	}
	if out, err := act(a, "before"); err != nil || out.Receipt.State != domain.ReceiptCommitted {
		t.Fatalf("acting through the holder: %+v (%v); want committed", out.Receipt, err)
	}

	// a's claim goes with its database session; a has not noticed yet.
	var ended bool
	if err := a.Pool.QueryRow(ctx, `SELECT bool_or(pg_terminate_backend(l.pid)) FROM pg_locks l JOIN advisory_keys k ON k.name = 'phonefleet:sim-host'
		WHERE l.locktype = 'advisory' AND l.granted AND l.classid::bigint = 1885761652 AND l.objid::bigint = k.key AND l.objsubid = 2`).
		Scan(&ended); err != nil || !ended {
		t.Fatalf("ending the holder's lock session: %v (%v)", ended, err)
	}
	// b takes the host over, settling what a left.
	settleB := workers.AbandonedActions{Mark: b.App.Fleet.MarkAbandonedActions, Logger: fleettest.Quiet}.Settle
	deadline := time.Now().Add(20 * time.Second)
	for !b.Sim.Hosting() {
		if time.Now().After(deadline) {
			t.Fatal("b never took the sim host over")
		}
		if err := b.Runtime.Prepare(ctx, settleB); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !a.Sim.Hosting() {
		t.Skip("a noticed the lost claim by itself before acting (its host retry ticked); the zombie window closed")
	}

	// The zombie's next action is refused before its phone is touched.
	before := actsA.Load()
	_, err := act(a, "zombie")
	if code := domain.ErrorCode(err); code != domain.CodeDeviceUnavailable {
		t.Fatalf("acting through the zombie: %v; want device_unavailable (it no longer drives the device)", err)
	}
	if n := actsA.Load() - before; n != 0 {
		t.Fatalf("the zombie acted %d times after losing its claim; want 0", n)
	}
	if a.Sim.Hosting() {
		t.Fatal("the zombie still hosts the sim phones after its write was fenced; want it to stop at once")
	}
	if !b.Sim.Hosting() {
		t.Fatal("the new holder lost the host")
	}
	var receipt string
	if err := a.Pool.QueryRow(ctx, `SELECT state FROM action_idempotency WHERE org_id = $1 AND idempotency_key = 'zombie'`, a.OrgID).
		Scan(&receipt); err != nil || receipt != "failed" {
		t.Fatalf("the zombie's action is recorded %q (%v); want failed (nothing was done)", receipt, err)
	}

	// The device goes on under the new holder, once per action.
	if out, err := act(b, "after"); err != nil || out.Receipt.State != domain.ReceiptCommitted {
		t.Fatalf("acting through the new holder: %+v (%v); want committed", out.Receipt, err)
	}
	if n := actsB.Load(); n != 1 {
		t.Fatalf("the new holder acted %d times; want 1", n)
	}
	if n := actsA.Load(); n != 1 {
		t.Fatalf("the first holder acted %d times in all; want 1 (before it lost its claim)", n)
	}
}

// actHook runs before on an action, then acts.
type actHook struct {
	domain.Backend
	before func()
}

func (h actHook) Act(ctx context.Context, a domain.Action) (domain.ActionResult, error) {
	h.before()
	return h.Backend.Act(ctx, a)
}

// SaveState keeps the wrapped sim phone's state saved with each outcome.
func (h actHook) SaveState() ([]byte, error) {
	if sb, ok := h.Backend.(domain.StatefulBackend); ok {
		return sb.SaveState()
	}
	return nil, nil
}

// The zombie window: another process takes the sim host over after the
// holder's check right before the act and before the act itself, so the
// zombie acts once on its own copy of the phone. Its outcome write is then
// refused (fenced): the action ends settled as outcome unknown — never
// pending, never committed — its first attempt and every retry of its key
// answer action_outcome_unknown (not 500), and the zombie stops hosting.
func TestZombieWindowBetweenTheCheckAndTheAct(t *testing.T) {
	ctx := testutil.Context(t)
	var b *fleettest.Env
	armed := make(chan struct{}, 1)
	takeOver := func() {
		select {
		case <-armed:
		default:
			return
		}
		// The holder's claim goes with its lock session; b takes the host.
		pool, err := pgxpool.New(ctx, b.URL)
		if err != nil {
			t.Error(err)
			return
		}
		defer pool.Close()
		var ended bool
		if err := pool.QueryRow(ctx, `SELECT bool_or(pg_terminate_backend(l.pid)) FROM pg_locks l JOIN advisory_keys k ON k.name = 'phonefleet:sim-host'
			WHERE l.locktype = 'advisory' AND l.granted AND l.classid::bigint = 1885761652 AND l.objid::bigint = k.key AND l.objsubid = 2`).
			Scan(&ended); err != nil || !ended {
			t.Errorf("ending the holder's lock session: %v (%v)", ended, err)
			return
		}
		settleB := workers.AbandonedActions{Mark: b.App.Fleet.MarkAbandonedActions, Logger: fleettest.Quiet}.Settle
		for deadline := time.Now().Add(20 * time.Second); !b.Sim.Hosting(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Error("b never took the sim host over")
				return
			}
			if err := b.Runtime.Prepare(ctx, settleB); err != nil {
				t.Error(err)
				return
			}
		}
	}
	a := fleettest.Start(t, fleettest.Options{Devices: 1, Wrap: func(_ *domain.Device, be domain.Backend) domain.Backend {
		return actHook{be, takeOver}
	}})
	b = fleettest.Start(t, fleettest.Options{DatabaseURL: a.URL, OrgID: a.OrgID})
	dev := a.DeviceIDs[0]
	lease := a.Lease(t, dev)
	act := func(env *fleettest.Env, key string) (fleet.ActOutcome, error) {
		return env.Fleet.PerformAction().Handle(ctx, fleet.PerformAction{Auth: env.Auth, DeviceID: dev, LeaseID: lease.LeaseID,
			Action: "key", Arguments: json.RawMessage(`{"key":"HOME"}`), IdempotencyKey: key})
	}
	armed <- struct{}{}
	out, err := act(a, "window")
	if code := domain.ErrorCode(err); code != domain.CodeActionOutcomeUnknown {
		t.Fatalf("the action the zombie performed after the takeover: %+v %v (%s); want action_outcome_unknown", out.Receipt, err, code)
	}
	if a.Sim.Hosting() {
		t.Error("the zombie still hosts the sim phones after its outcome write was fenced")
	}
	var state string
	if err := a.Pool.QueryRow(ctx, `SELECT state FROM action_idempotency WHERE org_id = $1 AND idempotency_key = 'window'`, a.OrgID).
		Scan(&state); err != nil || state != "unknown" {
		t.Errorf("the action's key is recorded %q (%v); want unknown", state, err)
	}
	var committed int
	if err := a.Pool.QueryRow(ctx, `SELECT count(*) FROM events e JOIN action_idempotency i ON e.stream_id = 'action-' || i.action_id
		WHERE i.org_id = $1 AND i.idempotency_key = 'window' AND e.event_type = 'action.committed'`, a.OrgID).Scan(&committed); err != nil {
		t.Fatal(err)
	} else if committed != 0 {
		t.Errorf("the action has %d committed events; want 0", committed)
	}
	for _, env := range []*fleettest.Env{a, b, b} {
		if _, err := act(env, "window"); domain.ErrorCode(err) != domain.CodeActionOutcomeUnknown {
			t.Errorf("a retry of the key: %v; want action_outcome_unknown", err)
		}
	}
}
