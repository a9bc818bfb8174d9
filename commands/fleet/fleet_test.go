package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/sim"
	"phonefleet/testutil"
	"phonefleet/testutil/fleettest"
	"phonefleet/workers"
)

var bg = testutil.Background

func act(env *fleettest.Env, dev, lease, key, action, args string) (fleet.ActOutcome, error) {
	return env.Fleet.PerformAction().Handle(bg, fleet.PerformAction{Auth: env.Auth, DeviceID: dev, Action: action,
		Arguments: json.RawMessage(args), IdempotencyKey: key, LeaseID: lease})
}

// inputs is how many inputs a sim phone has accepted: its logical clock
// advances by one step per accepted input and never otherwise.
func inputs(t *testing.T, env *fleettest.Env, dev string) int {
	t.Helper()
	return int(env.Phone(t, dev).Phone().Clock().Sub(sim.ClockStart()) / sim.ClockStep)
}

func codeOf(err error) domain.Code { return domain.ErrorCode(err) }

// TestFiftyRacersOneLease: of 50 goroutines acquiring one device's lease at
// once, exactly one wins; every other one is told the device is already
// leased.
func TestFiftyRacersOneLease(t *testing.T) {
	env := fleettest.Start(t, fleettest.Options{Devices: 1, MaxConns: 20})
	dev := env.DeviceIDs[0]
	const racers = 50
	var wins atomic.Int32
	errs := make(chan error, racers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < racers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := env.Fleet.AcquireLease().Handle(bg, fleet.AcquireLease{Auth: env.Auth, DeviceID: dev})
			if err == nil {
				wins.Add(1)
				return
			}
			errs <- err
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	if got := wins.Load(); got != 1 {
		t.Fatalf("got %d winners; want exactly 1", got)
	}
	losers := 0
	for err := range errs {
		losers++
		e := domain.AsError(err)
		if e.Code != domain.CodeDeviceUnavailable || e.Extra["reason"] != domain.ReasonAlreadyLeased {
			t.Errorf("loser got %v; want device_unavailable, reason already_leased", err)
		}
	}
	if losers != racers-1 {
		t.Errorf("got %d losers; want %d", losers, racers-1)
	}
	evs, err := env.Store.Load(bg, domain.DeviceStream(dev), 1)
	if err != nil {
		t.Fatal(err)
	}
	acquired := 0
	for _, e := range evs {
		if e.Type == "lease.acquired" {
			acquired++
		}
	}
	if acquired != 1 {
		t.Errorf("the device stream records %d lease.acquired; want 1", acquired)
	}
}

// TestFencingTokensGrowAcrossExpiry runs acquire/expire cycles on an
// injected clock — expiry recorded by the worker, or noticed by the next
// acquire — with racers at every cycle: the tokens granted strictly
// increase and the holder of an expired lease can no longer act.
func TestFencingTokensGrowAcrossExpiry(t *testing.T) {
	clock := fleettest.NewClock(time.Date(2026, 5, 1, 8, 0, 0, 0, time.UTC))
	env := fleettest.Start(t, fleettest.Options{Devices: 1, Clock: clock, MaxConns: 20})
	dev := env.DeviceIDs[0]
	expiry := workers.LeaseExpiry{Expire: env.App.Fleet.ExpireLease, Pool: env.Pool, Now: clock.Now}
	var last int64
	var lastLease string
	for cycle := 0; cycle < 12; cycle++ {
		var mu sync.Mutex
		var granted []int64
		var wg sync.WaitGroup
		for r := 0; r < 5; r++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l, err := env.Fleet.AcquireLease().Handle(bg, fleet.AcquireLease{Auth: env.Auth, DeviceID: dev, TTLSeconds: 30})
				if err == nil {
					mu.Lock()
					granted = append(granted, l.FencingToken)
					lastLease = l.LeaseID
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(granted) != 1 {
			t.Fatalf("cycle %d: got %d leases granted; want 1", cycle, len(granted))
		}
		if granted[0] <= last {
			t.Fatalf("cycle %d: got fencing token %d after %d; want it to grow", cycle, granted[0], last)
		}
		last = granted[0]
		clock.Advance(31 * time.Second)
		if _, err := act(env, dev, lastLease, fmt.Sprintf("late-%d", cycle), "key", `{"key":"HOME"}`); codeOf(err) != domain.CodeLeaseMismatch {
			t.Fatalf("cycle %d: acting on an expired lease: got %v; want lease_mismatch", cycle, err)
		}
		if cycle%2 == 0 {
			// The worker records the expiry; odd cycles leave it to the
			// next acquire.
			env.Settle(t)
			n, err := expiry.RunOnce(bg)
			if err != nil {
				t.Fatal(err)
			}
			if n != 1 {
				t.Fatalf("cycle %d: the worker expired %d leases; want 1", cycle, n)
			}
		}
	}
}

// TestDuplicateKeysActOnce sends 200 concurrent actions carrying 50 keys,
// each four times: every key acts exactly once — counted by the phone's
// own input clock — and every request answers the key's one outcome, or
// idempotency_conflict (retryable) while it was in flight.
func TestDuplicateKeysActOnce(t *testing.T) {
	env := fleettest.Start(t, fleettest.Options{Devices: 1, QueueLimit: 256, MaxConns: 20})
	dev := env.DeviceIDs[0]
	lease := env.Lease(t, dev).LeaseID
	before := inputs(t, env, dev)
	const keys, copies = 50, 4
	type answer struct {
		key      string
		receipt  domain.Receipt
		replayed bool
		err      error
	}
	answers := make(chan answer, keys*copies)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < keys*copies; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("dup-%02d", i%keys)
			<-start
			out, err := act(env, dev, lease, key, "key", `{"key":"VOLUME_DOWN"}`)
			answers <- answer{key, out.Receipt, out.Replayed, err}
		}()
	}
	close(start)
	wg.Wait()
	close(answers)
	actionIDs := map[string]string{}
	conflicts := 0
	for a := range answers {
		switch {
		case a.err != nil:
			e := domain.AsError(a.err)
			if e.Code != domain.CodeIdempotencyConflict || e.Retryable == nil || !*e.Retryable {
				t.Fatalf("key %s: got %v; want a receipt or a retryable idempotency_conflict", a.key, a.err)
			}
			conflicts++
		case a.receipt.State != domain.ReceiptCommitted:
			t.Fatalf("key %s: got receipt state %s; want committed", a.key, a.receipt.State)
		default:
			if id, ok := actionIDs[a.key]; ok && id != a.receipt.ActionID {
				t.Fatalf("key %s answered two actions, %s and %s", a.key, id, a.receipt.ActionID)
			}
			actionIDs[a.key] = a.receipt.ActionID
		}
	}
	if got := inputs(t, env, dev) - before; got != keys {
		t.Fatalf("the phone took %d inputs; want exactly %d (one per key)", got, keys)
	}
	var rows int
	if err := env.Pool.QueryRow(bg, `SELECT count(*) FROM action_idempotency WHERE device_id = $1`, dev).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != keys {
		t.Errorf("got %d idempotency rows; want %d", rows, keys)
	}
	// Every key now answers its recorded outcome, without acting.
	for k := 0; k < keys; k++ {
		key := fmt.Sprintf("dup-%02d", k)
		out, err := act(env, dev, lease, key, "key", `{"key":"VOLUME_DOWN"}`)
		if err != nil || !out.Replayed || out.Receipt.State != domain.ReceiptCommitted {
			t.Fatalf("replay of %s: got %+v, %v; want the committed receipt, replayed", key, out, err)
		}
		if id, ok := actionIDs[key]; ok && id != out.Receipt.ActionID {
			t.Fatalf("replay of %s answered action %s; want %s", key, out.Receipt.ActionID, id)
		}
	}
	if got := inputs(t, env, dev) - before; got != keys {
		t.Fatalf("after replays the phone took %d inputs; want still %d", got, keys)
	}
	t.Logf("%d requests: %d answered with the outcome, %d with a retryable conflict", keys*copies, keys*copies-conflicts, conflicts)
}

// faulty wraps a backend, replacing Act's answer, and Observe's when
// observeFails is set.
type faulty struct {
	domain.Backend
	act          func(ctx context.Context, a domain.Action) (domain.ActionResult, error)
	observeFails error
}

func (f faulty) Act(ctx context.Context, a domain.Action) (domain.ActionResult, error) {
	return f.act(ctx, a)
}

func (f faulty) Observe(ctx context.Context, opts domain.ObserveOptions) (domain.Observation, error) {
	if f.observeFails != nil {
		return domain.Observation{}, f.observeFails
	}
	return f.Backend.Observe(ctx, opts)
}

// TestBackendFailures checks how an action ends when the device
// misbehaves. An error the backend does not classify (a plain Go error,
// as a driver's socket error is) is never recorded as internal_error,
// which every retry of the key would answer as a 500 for good (issue 27):
// before the action is sent it is backend_command_failed, once it was
// handed over, outcome unknown.
func TestBackendFailures(t *testing.T) {
	tests := []struct {
		name string
		// act wraps the real phone's Act.
		act func(inner domain.Backend) func(ctx context.Context, a domain.Action) (domain.ActionResult, error)
		// observeFails, when set, is what looking at the screen answers.
		observeFails error
		wantCode     domain.Code
		wantState    string
		wantInputs   int
		unknown      bool
	}{
		{
			name: "outcome never comes back",
			act: func(inner domain.Backend) func(context.Context, domain.Action) (domain.ActionResult, error) {
				return func(ctx context.Context, a domain.Action) (domain.ActionResult, error) {
					_, _ = inner.Act(ctx, a) // it happened, but nobody heard
					return domain.ActionResult{}, domain.Errorf(domain.CodeActionOutcomeUnknown, "no answer")
				}
			},
			wantCode: domain.CodeActionOutcomeUnknown, wantState: domain.ReceiptPending, wantInputs: 1, unknown: true,
		},
		{
			name: "device dropped before dispatch",
			act: func(domain.Backend) func(context.Context, domain.Action) (domain.ActionResult, error) {
				return func(context.Context, domain.Action) (domain.ActionResult, error) {
					return domain.ActionResult{}, domain.Errorf(domain.CodeDeviceDisconnected, "the device dropped off its transport")
				}
			},
			wantCode: domain.CodeDeviceDisconnected, wantState: domain.ReceiptFailed, wantInputs: 0,
		},
		{
			name: "transport failed",
			act: func(domain.Backend) func(context.Context, domain.Action) (domain.ActionResult, error) {
				return func(context.Context, domain.Action) (domain.ActionResult, error) {
					return domain.ActionResult{}, domain.Errorf(domain.CodeBackendCommandFailed, "input tap failed")
				}
			},
			wantCode: domain.CodeBackendCommandFailed, wantState: domain.ReceiptFailed, wantInputs: 0,
		},
		{
			name: "unclassified error once handed over",
			act: func(domain.Backend) func(context.Context, domain.Action) (domain.ActionResult, error) {
				return func(context.Context, domain.Action) (domain.ActionResult, error) {
					return domain.ActionResult{}, errors.New("write unix @->/dev/socket: broken pipe")
				}
			},
			wantCode: domain.CodeActionOutcomeUnknown, wantState: domain.ReceiptPending, wantInputs: 0, unknown: true,
		},
		{
			name: "unclassified error looking before the action",
			act: func(inner domain.Backend) func(context.Context, domain.Action) (domain.ActionResult, error) {
				return inner.Act
			},
			observeFails: errors.New("read unix @->/dev/socket: connection reset by peer"),
			wantCode:     domain.CodeBackendCommandFailed, wantState: domain.ReceiptFailed, wantInputs: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := fleettest.Start(t, fleettest.Options{Devices: 1, Wrap: func(_ *domain.Device, b domain.Backend) domain.Backend {
				return faulty{Backend: b, act: tt.act(b), observeFails: tt.observeFails}
			}})
			dev := env.DeviceIDs[0]
			lease := env.Lease(t, dev).LeaseID
			before := inputs(t, env, dev)
			_, err := act(env, dev, lease, "k", "key", `{"key":"HOME"}`)
			if got := codeOf(err); got != tt.wantCode {
				t.Fatalf("got %v; want %s", err, tt.wantCode)
			}
			env.Settle(t)
			r, err := env.App.Fleet.GetReceipt.Handle(bg, fleet.GetReceipt{Auth: env.Auth, IdempotencyKey: "k"})
			if err != nil {
				t.Fatal(err)
			}
			if r.State != tt.wantState || r.OutcomeUnknown != tt.unknown {
				t.Errorf("got receipt state %s, outcomeUnknown %v; want %s, %v", r.State, r.OutcomeUnknown, tt.wantState, tt.unknown)
			}
			if r.Error == nil || r.Error.Code != tt.wantCode {
				t.Errorf("got receipt error %+v; want %s", r.Error, tt.wantCode)
			}
			// A retry with the key answers the recorded outcome and never acts.
			if _, err := act(env, dev, lease, "k", "key", `{"key":"HOME"}`); codeOf(err) != tt.wantCode {
				t.Errorf("retry: got %v; want %s again", err, tt.wantCode)
			}
			if got := inputs(t, env, dev) - before; got != tt.wantInputs {
				t.Errorf("the phone took %d inputs; want %d", got, tt.wantInputs)
			}
		})
	}
}

// gate blocks Act until opened, recording the order actions arrive in.
type gate struct {
	domain.Backend
	entered chan struct{}
	open    chan struct{}
	mu      *sync.Mutex
	order   *[]string
}

func (g gate) Act(ctx context.Context, a domain.Action) (domain.ActionResult, error) {
	g.entered <- struct{}{}
	<-g.open
	g.mu.Lock()
	*g.order = append(*g.order, a.Text)
	g.mu.Unlock()
	return g.Backend.Act(ctx, a)
}

// TestActionsRunInArrivalOrderAndQueueIsBounded: actions on one device run
// one at a time in the order they arrived; when the queue is full the next
// one is refused with device_busy and nothing is recorded for it.
func TestActionsRunInArrivalOrderAndQueueIsBounded(t *testing.T) {
	open := make(chan struct{})
	entered := make(chan struct{}, 8)
	var mu sync.Mutex
	var order []string
	env := fleettest.Start(t, fleettest.Options{Devices: 1, QueueLimit: 4, Wrap: func(_ *domain.Device, b domain.Backend) domain.Backend {
		return gate{Backend: b, entered: entered, open: open, mu: &mu, order: &order}
	}})
	dev := env.DeviceIDs[0]
	lease := env.Lease(t, dev).LeaseID
	// Focus the Notes field so typed text lands somewhere.
	if _, err := env.Phone(t, dev).Act(bg, domain.Action{Type: domain.ActionOpenApp, Package: sim.PkgNotes}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	results := make([]error, 4)
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, results[i] = act(env, dev, lease, fmt.Sprintf("ord-%d", i), "type_text", fmt.Sprintf(`{"text":"%d"}`, i))
		}()
		// The first runs (and waits at the gate); each later one waits in
		// the queue before the next is sent.
		if i == 0 {
			<-entered
			continue
		}
		deadline := time.Now().Add(10 * time.Second)
		waiting := func() int { return env.Unfinished(t, dev) - 1 } // one runs, at the gate
		for waiting() != i && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if got := waiting(); got != i {
			t.Fatalf("after sending %d actions got %d waiting; want %d", i+1, got, i)
		}
	}
	_, err := act(env, dev, lease, "ord-busy", "type_text", `{"text":"x"}`)
	e := domain.AsError(err)
	if e.Code != domain.CodeDeviceBusy || e.Extra["retryAfterMs"] == nil {
		t.Fatalf("fifth action: got %v; want device_busy with retryAfterMs", err)
	}
	close(open)
	wg.Wait()
	for i, err := range results {
		if err != nil && codeOf(err) != domain.CodeInvalidArgument {
			t.Errorf("action %d: %v", i, err)
		}
	}
	if got := strings.Join(order, ","); got != "0,1,2,3" {
		t.Errorf("actions ran in order %s; want 0,1,2,3", got)
	}
	env.Settle(t)
	if _, err := env.App.Fleet.GetReceipt.Handle(bg, fleet.GetReceipt{Auth: env.Auth, IdempotencyKey: "ord-busy"}); codeOf(err) != domain.CodeReceiptNotFound {
		t.Errorf("the refused action: got %v; want no receipt", err)
	}
}

// TestStaleFrameIsRefusedBeforeActing: an observedFrame that no longer
// shows the screen fails the action with stale_frame and the phone takes
// no input.
func TestStaleFrameIsRefusedBeforeActing(t *testing.T) {
	env := fleettest.Start(t, fleettest.Options{Devices: 1})
	dev := env.DeviceIDs[0]
	lease := env.Lease(t, dev).LeaseID
	obs, err := env.Fleet.ObserveDevice().Handle(bg, fleet.ObserveDevice{Auth: env.Auth, DeviceID: dev, Snapshot: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := act(env, dev, lease, "move", "open_app", `{"package":"com.example.notes"}`); err != nil {
		t.Fatal(err)
	}
	before := inputs(t, env, dev)
	_, err = env.Fleet.PerformAction().Handle(bg, fleet.PerformAction{Auth: env.Auth, DeviceID: dev, Action: "key",
		Arguments: json.RawMessage(`{"key":"BACK"}`), IdempotencyKey: "stale", LeaseID: lease, ObservedFrame: obs.Frame.FrameID})
	if codeOf(err) != domain.CodeStaleFrame {
		t.Fatalf("got %v; want stale_frame", err)
	}
	if got := inputs(t, env, dev) - before; got != 0 {
		t.Errorf("the phone took %d inputs; want none", got)
	}
	// A frame of the current screen is accepted.
	obs, err = env.Fleet.ObserveDevice().Handle(bg, fleet.ObserveDevice{Auth: env.Auth, DeviceID: dev, Image: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Fleet.PerformAction().Handle(bg, fleet.PerformAction{Auth: env.Auth, DeviceID: dev, Action: "key",
		Arguments: json.RawMessage(`{"key":"BACK"}`), IdempotencyKey: "fresh", LeaseID: lease, ObservedFrame: obs.Frame.FrameID}); err != nil {
		t.Fatalf("fresh frame: %v", err)
	}
}

// TestBackendKinds: a device of a kind without an adapter answers
// backend_not_implemented; a row naming no valid kind, or an adb device
// naming no serial, backend_resolution_failed. None records anything.
func TestBackendKinds(t *testing.T) {
	env := fleettest.Start(t, fleettest.Options{})
	ids, err := env.Fleet.RegisterDevices().Handle(bg, fleet.RegisterDevices{OrgID: env.OrgID, Backend: domain.BackendADB, Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	robot, err := env.Fleet.RegisterDevices().Handle(bg, fleet.RegisterDevices{OrgID: env.OrgID, Backend: domain.BackendRobot, Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	bogus := domain.NewID(domain.PrefixDevice)
	name, version, data, err := domain.Events.Encode(domain.DeviceRegistered{DeviceID: bogus, OrgID: env.OrgID, Name: "odd", Backend: "quantum"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Store.Append(bg, domain.DeviceStream(bogus), eventstore.NoStream, eventstore.NewEvent{Type: name, SchemaVersion: version,
		OrgID: env.OrgID, Data: data}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, dev string
		want      domain.Code
	}{
		{"adb without a serial", ids[0], domain.CodeBackendResolutionFailed},
		{"robot", robot[0], domain.CodeBackendNotImplemented},
		{"unknown kind", bogus, domain.CodeBackendResolutionFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lease := env.Lease(t, tt.dev).LeaseID
			if _, err := act(env, tt.dev, lease, "kind-"+tt.name, "tap", `{"x":1,"y":1}`); codeOf(err) != tt.want {
				t.Errorf("act: got %v; want %s", err, tt.want)
			}
			if _, err := env.Fleet.ObserveDevice().Handle(bg, fleet.ObserveDevice{Auth: env.Auth, DeviceID: tt.dev, Image: true}); codeOf(err) != tt.want {
				t.Errorf("observe: got %v; want %s", err, tt.want)
			}
			env.Settle(t)
			if _, err := env.App.Fleet.GetReceipt.Handle(bg, fleet.GetReceipt{Auth: env.Auth, IdempotencyKey: "kind-" + tt.name}); codeOf(err) != domain.CodeReceiptNotFound {
				t.Errorf("got %v; want no receipt", err)
			}
		})
	}
}

// TestTenancy: another organisation's device, frame and receipt answer as
// missing ones do.
func TestTenancy(t *testing.T) {
	env := fleettest.Start(t, fleettest.Options{Devices: 1})
	dev := env.DeviceIDs[0]
	lease := env.Lease(t, dev).LeaseID
	out, err := act(env, dev, lease, "mine", "key", `{"key":"HOME"}`)
	if err != nil {
		t.Fatal(err)
	}
	env.Settle(t)
	other := domain.LocalOperator(domain.NewID(domain.PrefixOrganisation))
	narrowed := env.Auth
	narrowed.Devices = []string{domain.NewID(domain.PrefixDevice)}
	for _, tt := range []struct {
		name string
		auth domain.Auth
	}{{"other organisation", other}, {"device outside the key's subset", narrowed}} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := env.App.Fleet.GetDevice.Handle(bg, fleet.GetDevice{Auth: tt.auth, DeviceID: dev}); codeOf(err) != domain.CodeDeviceUnavailable {
				t.Errorf("device: got %v; want device_unavailable (not_found), as the lease below", err)
			}
			if _, err := env.Fleet.AcquireLease().Handle(bg, fleet.AcquireLease{Auth: tt.auth, DeviceID: dev}); codeOf(err) != domain.CodeDeviceUnavailable {
				t.Errorf("lease: got %v; want device_unavailable", err)
			}
			if _, err := env.App.Fleet.GetFrame.Handle(bg, fleet.GetFrame{Auth: tt.auth, FrameID: out.Receipt.Frames.After, FrameOptions: fleet.FrameOptions{}}); codeOf(err) != domain.CodeFrameNotFound {
				t.Errorf("frame: got %v; want frame_not_found", err)
			}
			if _, err := env.App.Fleet.GetReceipt.Handle(bg, fleet.GetReceipt{Auth: tt.auth, IdempotencyKey: "mine"}); codeOf(err) != domain.CodeReceiptNotFound {
				t.Errorf("receipt: got %v; want receipt_not_found", err)
			}
			page, err := env.App.Fleet.ListReceipts.Handle(bg, fleet.ListReceipts{Auth: tt.auth, ReceiptQuery: fleet.ReceiptQuery{}})
			if err != nil || len(page.Receipts) != 0 {
				t.Errorf("receipt feed: got %d receipts, %v; want none", len(page.Receipts), err)
			}
		})
	}
}

// TestPhonesSurviveRestart: a restarted fleet brings each phone back as it
// was (its saved state), and runs nothing again.
func TestPhonesSurviveRestart(t *testing.T) {
	url := testutil.DatabaseURL(t)
	org := domain.NewID(domain.PrefixOrganisation)
	env := fleettest.Start(t, fleettest.Options{DatabaseURL: url, OrgID: org, Devices: 1})
	dev := env.DeviceIDs[0]
	lease := env.Lease(t, dev).LeaseID
	text := "héllo 世界 ✓"
	if _, err := act(env, dev, lease, "s1", "open_app", `{"package":"com.example.notes"}`); err != nil {
		t.Fatal(err)
	}
	field, ok := env.Phone(t, dev).Phone().Snapshot().Find(func(e sim.Element) bool { return e.Focusable })
	if !ok {
		t.Fatal("Notes shows no text field")
	}
	if _, err := act(env, dev, lease, "s1b", "tap", `{"ref":"`+field.Ref+`"}`); err != nil {
		t.Fatal(err)
	}
	if _, err := act(env, dev, lease, "s2", "type_text", `{"text":"`+text+`"}`); err != nil {
		t.Fatal(err)
	}
	wantHash := env.Phone(t, dev).Phone().ScreenHash()
	wantInputs := inputs(t, env, dev)
	env.Close()

	env2 := fleettest.Start(t, fleettest.Options{DatabaseURL: url, OrgID: org})
	p := env2.Phone(t, dev).Phone()
	if got := p.ScreenHash(); got != wantHash {
		t.Errorf("after restart got screen %s; want %s", got, wantHash)
	}
	if got := inputs(t, env2, dev); got != wantInputs {
		t.Errorf("after restart the phone counts %d inputs; want %d", got, wantInputs)
	}
	if _, ok := p.Snapshot().Find(func(e sim.Element) bool { return e.Text == text }); !ok {
		t.Errorf("after restart the Notes field does not hold %q", text)
	}
	// The lease and the keys carry over too.
	if _, err := act(env2, dev, lease, "s2", "type_text", `{"text":"`+text+`"}`); err != nil {
		t.Errorf("replay after restart: %v", err)
	}
	if got := inputs(t, env2, dev); got != wantInputs {
		t.Errorf("a replay after restart acted: %d inputs; want %d", got, wantInputs)
	}
}

// TestScopes: each fleet operation needs its scope (spec 5.4); a key
// without it gets permission_denied naming the scope.
func TestScopes(t *testing.T) {
	env := fleettest.Start(t, fleettest.Options{Devices: 1})
	dev := env.DeviceIDs[0]
	key := func(scopes ...domain.Scope) domain.Auth {
		return domain.Auth{OrgID: env.OrgID, Kind: domain.PrincipalAPIKey, APIKeyID: "key_scoped", Scopes: scopes}
	}
	readOnly := key(domain.ScopeDevicesRead)
	leaser := key(domain.ScopeDevicesRead, domain.ScopeDevicesLease)
	lease, err := env.Fleet.AcquireLease().Handle(bg, fleet.AcquireLease{Auth: leaser, DeviceID: dev})
	if err != nil {
		t.Fatalf("a key with devices:lease: %v", err)
	}
	tests := []struct {
		name  string
		call  func() error
		scope string
	}{
		{"lease without devices:lease", func() error {
			_, err := env.Fleet.AcquireLease().Handle(bg, fleet.AcquireLease{Auth: readOnly, DeviceID: dev})
			return err
		}, "devices:lease"},
		{"act without devices:act", func() error {
			_, err := env.Fleet.PerformAction().Handle(bg, fleet.PerformAction{Auth: leaser, DeviceID: dev, Action: "key",
				Arguments: json.RawMessage(`{"key":"HOME"}`), IdempotencyKey: "scoped", LeaseID: lease.LeaseID})
			return err
		}, "devices:act"},
		{"wake without devices:act", func() error {
			_, err := env.Fleet.PowerDevice().Handle(bg, fleet.PowerDevice{Auth: leaser, DeviceID: dev, Wake: true, LeaseID: lease.LeaseID})
			return err
		}, "devices:act"},
		{"read without devices:read", func() error {
			_, err := env.App.Fleet.ListDevices.Handle(bg, fleet.ListDevices{Auth: key(domain.ScopeDevicesAct), DeviceQuery: fleet.DeviceQuery{}})
			return err
		}, "devices:read"},
		{"review by a key", func() error {
			_, err := env.Fleet.ReviewReceipt().Handle(bg, fleet.ReviewReceipt{Auth: readOnly, IdempotencyKey: "scoped"})
			return err
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := domain.AsError(tt.call())
			if e.Code != domain.CodePermissionDenied {
				t.Fatalf("got %v; want permission_denied", e)
			}
			if tt.scope != "" && e.Extra["scope"] != tt.scope {
				t.Errorf("got scope %v; want %s", e.Extra["scope"], tt.scope)
			}
		})
	}
	// The key's actions are attributed to the key, never to a person.
	actor := key(domain.ScopeDevicesRead, domain.ScopeDevicesLease, domain.ScopeDevicesAct)
	out, err := env.Fleet.PerformAction().Handle(bg, fleet.PerformAction{Auth: actor, DeviceID: dev, Action: "key",
		Arguments: json.RawMessage(`{"key":"HOME"}`), IdempotencyKey: "by-key", LeaseID: lease.LeaseID})
	if err != nil {
		t.Fatal(err)
	}
	if out.Receipt.Actor.APIKeyID != "key_scoped" || out.Receipt.Actor.UserID != "" {
		t.Errorf("got actor %+v; want apiKeyId key_scoped only", out.Receipt.Actor)
	}
}
