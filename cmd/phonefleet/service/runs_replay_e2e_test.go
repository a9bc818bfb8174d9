package service

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"phonefleet/commands/fleet"
	"phonefleet/commands/runs"
	"phonefleet/domain"
	"phonefleet/testutil"
)

// TestAReplayedScriptReproducesARunOnAnotherPhone: a run a worker drove on
// one phone is exported as a script; the built-in executor follows it on a
// second phone to the same screen (the same layout: clocks and batteries
// in the status bar differ from phone to phone) and succeeds, and on a third phone whose
// screen differs it stops failed with stale_frame before acting there.
func TestAReplayedScriptReproducesARunOnAnotherPhone(t *testing.T) {
	h := startRunHarness(t, localEnv(t, testutil.DatabaseURL(t), 3))
	var devs []string
	waitUntil(t, 30*time.Second, "three sim phones", func() (bool, error) {
		page, err := h.app.Fleet.ListDevices.Handle(h.ctx, fleet.ListDevices{Auth: h.auth})
		devs = devs[:0]
		for _, d := range page.Devices {
			devs = append(devs, d.DeviceID)
		}
		return len(devs) == 3, err
	})
	screen := func(dev string) string {
		t.Helper()
		o, err := h.app.Fleet.ObserveDevice.Handle(h.ctx, fleet.ObserveDevice{Auth: h.auth, DeviceID: dev, Snapshot: true})
		if err != nil {
			t.Fatal(err)
		}
		var root domain.UIElement
		if err := json.Unmarshal(o.Snapshot, &root); err != nil {
			t.Fatal(err)
		}
		return domain.LayoutSignature(root)
	}

	// The original: an external worker opens Notes and goes home.
	orig, err := h.app.Runs.StartRun.Handle(h.ctx, runs.StartRun{Auth: h.auth, DeviceID: devs[0], Goal: "open notes, then home",
		Executor: domain.ExecutorExternal})
	if err != nil {
		t.Fatal(err)
	}
	_, tok, _ := strings.Cut(orig.VrxBaseURL, "/vrx/")
	acc := runs.RunAccess{Token: tok}
	for i, step := range []struct{ action, args string }{{"open_app", `{"package":"com.example.notes"}`}, {"key", `{"key":"HOME"}`}} {
		obs, err := h.app.Runs.RunObserve.Handle(h.ctx, runs.RunObserve{Access: acc, Image: "none"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.app.Runs.RunAct.Handle(h.ctx, runs.RunAct{Access: acc, Action: step.action, Arguments: json.RawMessage(step.args),
			IdempotencyKey: "orig-" + string(rune('a'+i)), ObservedFrame: obs.Frame.FrameID}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.app.Runs.RunFinish.Handle(h.ctx, runs.RunFinish{Access: acc, State: domain.RunStateSucceeded}); err != nil {
		t.Fatal(err)
	}
	var script domain.RunScript
	waitUntil(t, 30*time.Second, "the exported script", func() (bool, error) {
		var err error
		script, err = h.app.Runs.GetRunScript.Handle(h.ctx, runs.GetRunScript{Auth: h.auth, RunID: orig.Run.AgentRunID})
		return len(script.Steps) == 3, err
	})
	raw, err := json.Marshal(script)
	if err != nil {
		t.Fatal(err)
	}

	// Replayed on a fresh phone: the same steps, the same screen.
	replay := h.start(t, "replay", func(c *runs.StartRun) { c.DeviceID, c.Script = devs[1], raw })
	if v := h.waitEnded(t, replay.RunID); v.State != domain.RunStateSucceeded || v.StepSeq != 2 {
		t.Fatalf("replay on a fresh phone: %+v (%s)", v, str0(v.Detail))
	}
	if a, b := screen(devs[0]), screen(devs[1]); a != b {
		t.Fatalf("replay ended on screen %s, the original on %s", b, a)
	}

	// A phone showing something else: the first step's screen never
	// comes, so the replay diverges there (replay_diverged) before acting.
	lease, err := h.app.Fleet.AcquireLease.Handle(h.ctx, fleet.AcquireLease{Auth: h.auth, DeviceID: devs[2]})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.app.Fleet.PerformAction.Handle(h.ctx, fleet.PerformAction{Auth: h.auth, DeviceID: devs[2], LeaseID: lease.LeaseID,
		Action: "open_app", Arguments: json.RawMessage(`{"package":"com.android.settings"}`), IdempotencyKey: "elsewhere"}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.app.Fleet.ReleaseLease.Handle(h.ctx, fleet.ReleaseLease{Auth: h.auth, DeviceID: devs[2], LeaseID: lease.LeaseID}); err != nil {
		t.Fatal(err)
	}
	before := screen(devs[2])
	changed := h.start(t, "replay on a changed screen", func(c *runs.StartRun) { c.DeviceID, c.Script = devs[2], raw })
	v := h.waitEnded(t, changed.RunID)
	if v.State != domain.RunStateFailed || str0(v.Reason) != domain.RunReasonReplayDiverged || v.StepSeq != 0 {
		t.Fatalf("replay on a changed screen: %+v (%s)", v, str0(v.Detail))
	}
	if after := screen(devs[2]); after != before {
		t.Fatal("the replay acted on a phone whose screen differed")
	}
}
