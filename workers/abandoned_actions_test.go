package workers_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/internal/backends"
	"phonefleet/internal/sim"
	"phonefleet/testutil"
	"phonefleet/testutil/fleettest"
)

// hangAfterActing performs the action on the phone, says so on standard
// output, and never returns: the process is killed while the outcome is
// still unrecorded.
type hangAfterActing struct{ domain.Backend }

func (h hangAfterActing) Act(ctx context.Context, a domain.Action) (domain.ActionResult, error) {
	if _, err := h.Backend.Act(ctx, a); err != nil {
		fmt.Println("ACT FAILED", err)
	}
	fmt.Println("ACTED")
	select {}
}

// TestDeviceHostChildProcess is not a test on its own: the kill test runs the
// test binary again with PF_FLEET_DB set, and this child leases the device,
// asks for one tap and hangs right after the phone took it.
func TestDeviceHostChildProcess(t *testing.T) {
	url := os.Getenv("PF_FLEET_DB")
	if url == "" {
		t.Skip("helper process for TestKilledMidActionLeavesPendingUnknownReceipt")
	}
	env := fleettest.Start(t, fleettest.Options{DatabaseURL: url, OrgID: os.Getenv("PF_FLEET_ORG"),
		Wrap: func(_ *domain.Device, b domain.Backend) domain.Backend { return hangAfterActing{b} }})
	dev := os.Getenv("PF_FLEET_DEVICE")
	lease := env.Lease(t, dev)
	fmt.Println("LEASED", lease.LeaseID)
	_, err := env.Fleet.PerformAction().Handle(testutil.Context(t), fleet.PerformAction{Auth: env.Auth, DeviceID: dev,
		Action: "tap", Arguments: json.RawMessage(`{"x":540,"y":1200}`), IdempotencyKey: "killed-tap", LeaseID: lease.LeaseID})
	fmt.Println("UNEXPECTED RETURN", err)
}

// TestKilledMidActionLeavesPendingUnknownReceipt kills (SIGKILL) the
// process executing an action after the phone took the input and before
// the outcome was recorded. After a restart the receipt is pending with
// outcome unknown, the action is never executed again, and a retry with
// its key answers action_outcome_unknown without touching the phone.
func TestKilledMidActionLeavesPendingUnknownReceipt(t *testing.T) {
	url := testutil.DatabaseURL(t)
	org := domain.NewID(domain.PrefixOrganisation)
	env := fleettest.Start(t, fleettest.Options{DatabaseURL: url, OrgID: org, Devices: 1})
	dev := env.DeviceIDs[0]
	inputsOf := func(e *fleettest.Env) int {
		return int(e.Phone(t, dev).Phone().Clock().Sub(sim.ClockStart()) / sim.ClockStep)
	}
	before := inputsOf(env)
	env.Close() // the child becomes the device host

	cmd := exec.Command(os.Args[0], "-test.run=^TestDeviceHostChildProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "PF_FLEET_DB="+url, "PF_FLEET_ORG="+org, "PF_FLEET_DEVICE="+dev)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	timeout := time.After(60 * time.Second)
	var leaseID string
wait:
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the child ended before acting")
			}
			t.Logf("child: %s", l)
			if id, found := strings.CutPrefix(l, "LEASED "); found {
				leaseID = id
			}
			if strings.HasPrefix(l, "ACT FAILED") || strings.HasPrefix(l, "UNEXPECTED") {
				t.Fatalf("child: %s", l)
			}
			if l == "ACTED" {
				break wait
			}
		case <-timeout:
			_ = cmd.Process.Kill()
			t.Fatal("the child did not act within a minute")
		}
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL: no cleanup, no outcome recorded
		t.Fatal(err)
	}
	_ = cmd.Wait()
	go func() {
		for range lines {
		}
	}()

	// The server lets the killed child's claim go once it notices the
	// connection closed, a moment later on a loaded machine.
	watch, err := pgxpool.New(testutil.Context(t), url)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	hostState := backends.HostState(watch)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		_, held, err := hostState(testutil.Context(t), domain.HostSim)
		if err != nil {
			t.Fatal(err)
		}
		if !held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the killed child's sim host claim was still held after a minute")
		}
	}

	// Restart: taking over the devices marks the child's action, recorded
	// as requested and nothing more, as outcome unknown.
	var state string
	env2 := fleettest.Start(t, fleettest.Options{DatabaseURL: url, OrgID: org})
	if err := env2.Pool.QueryRow(testutil.Context(t), `SELECT state FROM action_idempotency WHERE idempotency_key = 'killed-tap'`).Scan(&state); err != nil {
		t.Fatal(err)
	}
	if state != "unknown" {
		t.Errorf("after restart the idempotency row is %q; want unknown", state)
	}
	env2.Settle(t)
	r, err := env2.App.Fleet.GetReceipt.Handle(testutil.Context(t), fleet.GetReceipt{Auth: env2.Auth, IdempotencyKey: "killed-tap"})
	if err != nil {
		t.Fatal(err)
	}
	if r.State != domain.ReceiptPending || !r.OutcomeUnknown {
		t.Errorf("got receipt state %s, outcomeUnknown %v; want pending, true", r.State, r.OutcomeUnknown)
	}
	// The phone comes back in its last recorded state (the tap the killed
	// process applied in memory was never recorded), and the tap is never
	// run again — not by the restart, not by a retry with the key.
	if got := inputsOf(env2); got != before {
		t.Errorf("after restart the phone counts %d inputs; want %d (nothing re-executed)", got, before)
	}
	_, err = env2.Fleet.PerformAction().Handle(testutil.Context(t), fleet.PerformAction{Auth: env2.Auth, DeviceID: dev,
		Action: "tap", Arguments: json.RawMessage(`{"x":540,"y":1200}`), IdempotencyKey: "killed-tap", LeaseID: leaseID})
	if domain.ErrorCode(err) != domain.CodeActionOutcomeUnknown {
		t.Errorf("retry with the key: got %v; want action_outcome_unknown", err)
	}
	if got := inputsOf(env2); got != before {
		t.Errorf("after the retry the phone counts %d inputs; want %d", got, before)
	}
	evs, err := env2.Store.Load(testutil.Context(t), domain.ActionStream(r.ActionID), 1)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range evs {
		types = append(types, e.Type)
	}
	if got := strings.Join(types, ","); got != "action.requested,action.outcome_unknown" {
		t.Errorf("the action's stream is %s; want action.requested,action.outcome_unknown", got)
	}
}
