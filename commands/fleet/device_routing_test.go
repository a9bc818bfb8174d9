package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"phonefleet/commands/fleet"
	"phonefleet/commands/runs"
	"phonefleet/domain"
	"phonefleet/internal/devices"
	"phonefleet/internal/sim"
	"phonefleet/testutil"
	"phonefleet/testutil/fleettest"
)

// loopback is a Transport between fleets of one test: a call goes to the
// fleet whose runtime holds the host, as the cluster transport sends it to
// the process holding it. lose, when set, decides a call's fate first.
type loopback struct {
	mu    sync.Mutex
	envs  []*fleettest.Env
	calls int
	// lose returns the error the caller sees instead of the holder's
	// answer, after deliver (when true) has run the call on the holder.
	lose func(op string) (deliver bool, err error)
}

func (l *loopback) Forward(ctx context.Context, host, op string, body []byte) ([]byte, error) {
	l.mu.Lock()
	l.calls++
	lose := l.lose
	l.mu.Unlock()
	for _, e := range l.envs {
		for _, h := range e.Runtime.HeldHosts() {
			if h != host {
				continue
			}
			if lose != nil {
				deliver, err := lose(op)
				if deliver {
					e.Calls.Serve(ctx, op, body)
				}
				if err != nil {
					return nil, err
				}
			}
			return e.Calls.Serve(ctx, op, body), nil
		}
	}
	return nil, fmt.Errorf("nobody holds %s: %w", host, devices.ErrNotDelivered)
}

// twoInstances starts two fleets on one database and organisation: h
// holds the sim host, n does not; both forward through one loopback.
func twoInstances(t *testing.T) (h, n *fleettest.Env, lb *loopback, dev string) {
	t.Helper()
	url := testutil.DatabaseURL(t)
	org := domain.NewID(domain.PrefixOrganisation)
	lb = &loopback{}
	h = fleettest.Start(t, fleettest.Options{DatabaseURL: url, OrgID: org, Devices: 1, WaitForReceipts: true, Transport: lb})
	n = fleettest.Start(t, fleettest.Options{DatabaseURL: url, OrgID: org, WaitForReceipts: true, Transport: lb})
	if !h.Runtime.Hosting() || n.Runtime.Hosting() {
		t.Fatalf("hosting: first %v, second %v; want the first only", h.Runtime.Hosting(), n.Runtime.Hosting())
	}
	lb.envs = []*fleettest.Env{h, n}
	return h, n, lb, h.DeviceIDs[0]
}

func notesText(t *testing.T, env *fleettest.Env, dev string) string {
	t.Helper()
	field, ok := env.Phone(t, dev).Phone().Snapshot().Find(func(e sim.Element) bool { return e.Focusable })
	if !ok {
		t.Fatal("Notes shows no text field")
	}
	return field.Text
}

// TestForwardedActionsRunOnceInOrder: actions sent alternately to the
// instance driving the device and to one that does not all run on the
// driving one's queue, in order, once each; a key repeated on either
// instance answers the recorded receipt without acting; observing, power
// and leases with a reset promise work from either instance.
func TestForwardedActionsRunOnceInOrder(t *testing.T) {
	h, n, lb, dev := twoInstances(t)
	lease, err := n.Fleet.AcquireLease().Handle(bg, fleet.AcquireLease{Auth: n.Auth, DeviceID: dev, ResetOnRelease: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct{ key, action, args string }{{"open", "open_app", `{"package":"com.example.notes"}`}} {
		if _, err := act(n, dev, lease.LeaseID, step.key, step.action, step.args); err != nil {
			t.Fatal(err)
		}
	}
	field, ok := h.Phone(t, dev).Phone().Snapshot().Find(func(e sim.Element) bool { return e.Focusable })
	if !ok {
		t.Fatal("Notes shows no text field")
	}
	if _, err := act(n, dev, lease.LeaseID, "focus", "tap", `{"ref":"`+field.Ref+`"}`); err != nil {
		t.Fatal(err)
	}
	const text = "forwarded"
	receipts := map[string]domain.Receipt{}
	for i, c := range text {
		env := []*fleettest.Env{h, n}[i%2]
		key := fmt.Sprintf("ch-%d", i)
		out, err := act(env, dev, lease.LeaseID, key, "type_text", fmt.Sprintf(`{"text":%q}`, string(c)))
		if err != nil || out.Receipt.State != "committed" || out.Replayed {
			t.Fatalf("action %d via %d: %+v, %v", i, i%2, out, err)
		}
		receipts[key] = out.Receipt
	}
	calls := lb.calls
	for i := range text {
		key := fmt.Sprintf("ch-%d", i)
		env := []*fleettest.Env{n, h}[i%2] // the other instance this time
		out, err := act(env, dev, lease.LeaseID, key, "type_text", fmt.Sprintf(`{"text":%q}`, string(text[i])))
		if err != nil || !out.Replayed || out.Receipt.ActionID != receipts[key].ActionID {
			t.Fatalf("repeat of %s: %+v, %v; want the receipt of %s replayed", key, out, err, receipts[key].ActionID)
		}
	}
	if lb.calls <= calls {
		t.Fatalf("no repeat was forwarded")
	}
	if got := notesText(t, h, dev); got != text {
		t.Fatalf("Notes holds %q; want %q", got, text)
	}

	obs, err := n.Fleet.ObserveDevice().Handle(bg, fleet.ObserveDevice{Auth: n.Auth, DeviceID: dev, Image: true, Marks: true})
	if err != nil || len(obs.Image) == 0 || len(obs.Marks) == 0 || obs.Frame.FrameID == "" {
		t.Fatalf("observe via the other instance: %v (image %d bytes, %d marks)", err, len(obs.Image), len(obs.Marks))
	}
	view, err := n.Fleet.PowerDevice().Handle(bg, fleet.PowerDevice{Auth: n.Auth, DeviceID: dev, Wake: false, LeaseID: lease.LeaseID})
	if err != nil || view.Status != "asleep" {
		t.Fatalf("stop via the other instance: %+v, %v", view, err)
	}
	if h.Phone(t, dev).Phone().ScreenOn() {
		t.Fatal("the phone's screen is still on")
	}
}

// TestForwardedActionLostAnswer: when the holder's answer is lost, the
// caller answers from what the holder recorded: the recorded outcome; or
// action_outcome_unknown while it is recorded with no outcome; and when
// nothing was recorded, it records the action failed (device_disconnected)
// so the holder, if the call still reaches it, finds the key used and
// never acts.
func TestForwardedActionLostAnswer(t *testing.T) {
	h, n, lb, dev := twoInstances(t)
	lease := h.Lease(t, dev).LeaseID
	lost := errors.New("answer lost")

	// Delivered and done, answer lost: the recorded receipt answers.
	lb.lose = func(string) (bool, error) { return true, lost }
	out, err := act(n, dev, lease, "lost-answer", "key", `{"key":"home"}`)
	if err != nil || out.Receipt.State != "committed" {
		t.Fatalf("answer lost after the action: %+v, %v; want the committed receipt", out, err)
	}
	before := h.Phone(t, dev).Phone().Clock()

	// Never delivered, the transport said nothing: the caller records it
	// failed, and the late delivery finds the key used.
	var late func()
	lb.lose = func(string) (bool, error) { return false, lost }
	_, err = act(n, dev, lease, "never-delivered", "key", `{"key":"home"}`)
	if code := domain.ErrorCode(err); code != domain.CodeDeviceDisconnected {
		t.Fatalf("call never delivered: %v; want device_disconnected", err)
	}
	// The key is closed with that failure: the answer, and every repeat,
	// says retryable false (the same call only replays it; a new key
	// tries again), so that a careful client moves on instead of
	// repeating the key until it gives up.
	if e := domain.AsError(err); e.Retryable == nil || *e.Retryable {
		t.Errorf("call never delivered: %+v; want retryable false", e)
	}
	lb.lose = nil
	late = func() {
		_, err := act(h, dev, lease, "never-delivered", "key", `{"key":"home"}`)
		if e := domain.AsError(err); e.Code != domain.CodeDeviceDisconnected || e.Retryable == nil || *e.Retryable {
			t.Errorf("late delivery: %v; want the recorded device_disconnected, retryable false", err)
		}
	}
	late()
	if got := h.Phone(t, dev).Phone().Clock(); !got.Equal(before) {
		t.Fatal("the phone acted on a call its caller had settled as failed")
	}
	rs, err := h.App.Fleet.ListReceipts.Handle(bg, fleet.ListReceipts{Auth: h.Auth, ReceiptQuery: fleet.ReceiptQuery{DeviceID: dev}})
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]string{}
	for _, r := range rs.Receipts {
		states[r.IdempotencyKey] = r.State
	}
	if states["lost-answer"] != "committed" || states["never-delivered"] != "failed" {
		t.Fatalf("receipts: %v; want lost-answer committed and never-delivered failed", states)
	}

	// Nobody holds the host: nothing sent, nothing recorded.
	h.Close()
	_, err = act(n, dev, lease, "nobody", "key", `{"key":"home"}`)
	if e := domain.AsError(err); e.Code != domain.CodeDeviceUnavailable || e.Extra["reason"] != domain.ReasonOffline {
		t.Fatalf("with no holder: %v; want device_unavailable offline", err)
	}
	var count int
	if err := n.Pool.QueryRow(bg, `SELECT count(*) FROM action_idempotency WHERE idempotency_key = 'nobody'`).Scan(&count); err != nil || count != 0 {
		t.Fatalf("a call nobody took was recorded (%d rows, %v)", count, err)
	}
}

// TestTakeoverSettlesOnlyItsHost: marking a host's abandoned actions
// leaves another host's action in flight alone, and it then commits.
func TestTakeoverSettlesOnlyItsHost(t *testing.T) {
	open := make(chan struct{})
	entered := make(chan struct{}, 1)
	var mu sync.Mutex
	var order []string
	env := fleettest.Start(t, fleettest.Options{Devices: 1, Wrap: func(_ *domain.Device, b domain.Backend) domain.Backend {
		return gate{Backend: b, entered: entered, open: open, mu: &mu, order: &order}
	}})
	dev := env.DeviceIDs[0]
	lease := env.Lease(t, dev).LeaseID
	done := make(chan error, 1)
	go func() {
		_, err := act(env, dev, lease, "in-flight", "key", `{"key":"home"}`)
		done <- err
	}()
	<-entered
	n, err := env.Fleet.MarkAbandonedActions().Handle(bg, fleet.MarkAbandonedActions{Host: domain.GatewayHostKey("gw_other")})
	if err != nil || n != 0 {
		t.Fatalf("a gateway's takeover marked %d actions (%v); want none of the sim host's", n, err)
	}
	close(open)
	if err := <-done; err != nil {
		t.Fatalf("the action in flight: %v; want it committed", err)
	}
	var host string
	if err := env.Pool.QueryRow(bg, `SELECT host FROM action_idempotency WHERE idempotency_key = 'in-flight'`).Scan(&host); err != nil || host != domain.HostSim {
		t.Fatalf("the action's host is %q (%v); want %q", host, err, domain.HostSim)
	}
}

// TestForwardedLiveScreen: a live screen opened on the instance that does
// not drive the device shows the device's screen, through the one driving
// it, and a change on the phone reaches it as a new picture.
func TestForwardedLiveScreen(t *testing.T) {
	h, n, _, dev := twoInstances(t)
	st := fleet.NewStreams(n.Fleet)
	s, err := st.OpenStream().Handle(bg, fleet.OpenStream{Auth: n.Auth, DeviceID: dev, FPS: 10})
	if err != nil {
		t.Fatalf("open a live screen via the other instance: %v", err)
	}
	defer s.Close()
	first, err := s.Next(bg)
	if err != nil || len(first.JPEG) == 0 || first.Width == 0 {
		t.Fatalf("first frame: %d bytes, %dx%d, %v", len(first.JPEG), first.Width, first.Height, err)
	}
	lease := h.Lease(t, dev).LeaseID
	if _, err := act(h, dev, lease, "open-notes", "open_app", `{"package":"com.example.notes"}`); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		f, err := s.Next(bg)
		if err != nil {
			t.Fatal(err)
		}
		if f.Seq > first.Seq {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the phone's change never reached the live screen opened on the other instance")
		}
	}
}

// TestForwardedRunSteps: a run's device surface on the instance that does
// not drive its device observes and acts through the one that does; each
// step is counted once, in the holder's unit with the action, and a key
// repeated after the run moved on answers the recorded receipt.
func TestForwardedRunSteps(t *testing.T) {
	h, n, _, dev := twoInstances(t)
	s := fleettest.StartExternalRun(t, n, dev, nil)
	acc := fleettest.RunToken(t, s)
	obs, err := n.App.Runs.RunObserve.Handle(bg, runs.RunObserve{Access: acc, Image: "jpeg", MaxWidth: 360})
	if err != nil || len(obs.Elements) == 0 {
		t.Fatalf("observe through the other instance: %v", err)
	}
	for i, k := range []string{"open", "back"} {
		args := `{"package":"com.example.notes"}`
		action := "open_app"
		if i == 1 {
			action, args = "key", `{"key":"BACK"}`
		}
		out, err := n.App.Runs.RunAct.Handle(bg, runs.RunAct{Access: acc, Action: action, Arguments: json.RawMessage(args), IdempotencyKey: k})
		if err != nil || out.Receipt.State != "committed" || out.Receipt.AgentRunID != s.Run.AgentRunID {
			t.Fatalf("step %s through the other instance: %+v, %v", k, out.Receipt, err)
		}
	}
	out, err := n.App.Runs.RunAct.Handle(bg, runs.RunAct{Access: acc, Action: "open_app", Arguments: json.RawMessage(`{"package":"com.example.notes"}`), IdempotencyKey: "open"})
	if err != nil || !out.Replayed {
		t.Fatalf("the first step's key again: %+v, %v; want its receipt replayed", out, err)
	}
	run, err := h.App.Runs.GetRun.Handle(bg, runs.GetRun{Auth: h.Auth, RunID: s.Run.RunID})
	if err != nil || run.StepSeq != 2 {
		t.Fatalf("the run: %+v, %v; want 2 steps taken", run, err)
	}
}
