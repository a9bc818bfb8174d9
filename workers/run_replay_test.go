package workers_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"phonefleet/commands/fleet"
	"phonefleet/commands/runs"
	"phonefleet/domain"
	"phonefleet/internal/sim"
)

// counterButtons opens the counter on a sim phone and returns the centres
// of its + and Reset buttons (every sim phone of the fleet is one model).
func counterButtons(t *testing.T, e *runEnv, dev string) (inc, reset [2]int) {
	t.Helper()
	p := e.Phone(t, dev).Phone()
	if _, err := p.OpenApp(sim.PkgCounter); err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(p.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	var root domain.UIElement
	if err := json.Unmarshal(raw, &root); err != nil {
		t.Fatal(err)
	}
	for id, out := range map[string]*[2]int{"increment": &inc, "reset": &reset} {
		el, ok := domain.FindAnchor(root, domain.ElementAnchor{ID: sim.PkgCounter + ":id/" + id})
		if !ok {
			t.Fatalf("the counter shows no %s button", id)
		}
		out[0], out[1] = el.Centre()
	}
	return inc, reset
}

func (e *runEnv) divergence(t *testing.T, id string) runs.RunDivergence {
	t.Helper()
	d, err := e.app.Runs.GetRunDivergence.Handle(bg, runs.GetRunDivergence{Auth: e.Auth, RunID: id})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestRunReplayDivergence: a run on phone A (open the counter, tap + and
// Reset by their coordinates) is exported as a guarded plan and replayed:
//   - on phone B, in the same state, it succeeds, its taps bound to the
//     elements (by ref) and its report names no divergence;
//   - on phone C, whose counter was left at -1, Reset at step 3 finds the
//     count already 0: its effect (unchanged) differs from the original's
//     (changed), and the report names step 3, effect_differs, both frames
//     and both effects;
//   - on phone D, left showing Settings, the home screen step 1 was decided
//     on never comes: the report names step 1, screen_not_reached.
func TestRunReplayDivergence(t *testing.T) {
	e := startRunEnv(t, 4)
	a, b, c, d := e.DeviceIDs[0], e.DeviceIDs[1], e.DeviceIDs[2], e.DeviceIDs[3]
	// Every phone has the counter, and shows the home screen.
	for _, dev := range e.DeviceIDs {
		p := e.Phone(t, dev).Phone()
		if _, err := p.InstallApp(sim.PkgCounter); err != nil {
			t.Fatal(err)
		}
		if _, err := p.PressKey("HOME"); err != nil {
			t.Fatal(err)
		}
	}
	inc, reset := counterButtons(t, e, c)
	// Phone C: the counter at -1, then home. Phone D: Settings in front.
	pc := e.Phone(t, c).Phone()
	if _, err := pc.TapElement(mustFind(t, pc, "decrement")); err != nil {
		t.Fatal(err)
	}
	if _, err := pc.PressKey("HOME"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Phone(t, d).Phone().OpenApp(sim.PkgSettings); err != nil {
		t.Fatal(err)
	}

	x := e.executor(nil)
	orig := e.start(t, a, func(s *runs.StartRun) {
		s.Goal = fmt.Sprintf("open %s\ntap %d %d\ntap %d %d\nfinish succeeded", sim.PkgCounter, inc[0], inc[1], reset[0], reset[1])
	})
	e.drive(t, x, 1)
	if v := e.run(t, orig); v.State != domain.RunStateSucceeded || v.StepSeq != 3 {
		t.Fatalf("original: got %s after %d steps (%s); want succeeded after 3", v.State, v.StepSeq, deref(v.Detail))
	}
	if rep := e.divergence(t, orig); rep.Replay || rep.Divergence != nil {
		t.Errorf("original: got report %+v; want no replay, no divergence", rep)
	}
	script, err := e.app.Runs.GetRunScript.Handle(bg, runs.GetRunScript{Auth: e.Auth, RunID: orig})
	if err != nil {
		t.Fatal(err)
	}
	if len(script.Steps) != 4 {
		t.Fatalf("script: got %d steps; want 3 and finish", len(script.Steps))
	}
	for i, st := range script.Steps[:3] {
		if st.WaitFor == nil || st.FrameID == "" || st.Effect != domain.EffectChanged {
			t.Errorf("script step %d: got %+v; want a guard, its frame and effect changed", i+1, st)
		}
	}
	if el := script.Steps[2].Element; el == nil || el.ID != sim.PkgCounter+":id/reset" {
		t.Errorf("script step 3: got element %+v; want the Reset button", el)
	}
	raw, err := json.Marshal(script)
	if err != nil {
		t.Fatal(err)
	}
	replay := func(dev string) string {
		return e.start(t, dev, func(s *runs.StartRun) { s.Goal, s.Script = "replay", raw })
	}

	ok := replay(b)
	e.drive(t, x, 1)
	if v := e.run(t, ok); v.State != domain.RunStateSucceeded || v.StepSeq != 3 {
		t.Fatalf("replay on B: got %s after %d steps (%s); want succeeded after 3", v.State, v.StepSeq, deref(v.Detail))
	}
	if rep := e.divergence(t, ok); !rep.Replay || rep.Steps != 3 || rep.Divergence != nil {
		t.Errorf("replay on B: got report %+v; want a replay of 3 steps without divergence", rep)
	}
	for _, st := range e.steps(t, ok)[1:] {
		if !strings.Contains(string(st.Arguments), `"ref"`) {
			t.Errorf("replay on B: step %d acted with %s; want a tap bound to an element (ref)", st.Seq, st.Arguments)
		}
	}

	cases := []struct {
		name, dev  string
		step       int
		reason     string
		wantEffect [2]string
	}{
		{"counter at -1", c, 3, domain.DivergedEffectDiffers, [2]string{domain.EffectChanged, domain.EffectUnchanged}},
		{"settings in front", d, 1, domain.DivergedScreenNotReached, [2]string{domain.EffectChanged, ""}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := replay(tc.dev)
			e.drive(t, x, 1)
			v := e.run(t, id)
			if v.State != domain.RunStateFailed || deref(v.Reason) != domain.RunReasonReplayDiverged ||
				!strings.HasPrefix(deref(v.Detail), fmt.Sprintf("step %d: %s", tc.step, tc.reason)) {
				t.Fatalf("got %s %s (%s); want failed replay_diverged at step %d %s", v.State, deref(v.Reason), deref(v.Detail), tc.step, tc.reason)
			}
			rep := e.divergence(t, id)
			dv := rep.Divergence
			if !rep.Replay || dv == nil {
				t.Fatalf("got report %+v; want a divergence", rep)
			}
			if dv.Step != tc.step || dv.Reason != tc.reason || dv.ExpectedFrame != script.Steps[tc.step-1].FrameID ||
				dv.ActualFrame == "" || dv.ActualFrame == dv.ExpectedFrame || [2]string{dv.ExpectedEffect, dv.ActualEffect} != tc.wantEffect {
				t.Errorf("got divergence %+v; want step %d %s, the original's frame %s and the replay's, effects %v",
					*dv, tc.step, tc.reason, script.Steps[tc.step-1].FrameID, tc.wantEffect)
			}
			// The replay's frame is a frame of the replay's phone.
			fr, err := e.app.Fleet.GetFrame.Handle(bg, fleet.GetFrame{Auth: e.Auth, FrameID: dv.ActualFrame})
			if err != nil || fr.DeviceID != tc.dev {
				t.Errorf("the replay's frame: got %+v, %v; want a frame of %s", fr, err, tc.dev)
			}
			if got := len(e.steps(t, id)); got != tc.step-1 && !(tc.reason == domain.DivergedEffectDiffers && got == tc.step) {
				t.Errorf("got %d steps taken; want the steps before the divergence", got)
			}
			// The report is the run's events: a capability that never saw
			// the run (no cache) reads it equal from the store.
			fresh := runs.New(runs.Config{Store: e.Store, ReadModels: e.Runner, Devices: e.Fleet, Now: e.Now})
			again, err := runs.GetRunDivergenceHandler{Runs: fresh}.Handle(bg, runs.GetRunDivergence{Auth: e.Auth, RunID: id})
			if err != nil || !reflect.DeepEqual(again.Divergence, rep.Divergence) || again.Replay != rep.Replay || again.Steps != rep.Steps {
				t.Errorf("read afresh: got %+v, %v; want %+v", again, err, rep)
			}
		})
	}
	if rep := e.divergence(t, ok); rep.Divergence != nil {
		t.Errorf("replay on B read again: got %+v", rep.Divergence)
	}
}

func mustFind(t *testing.T, p *sim.Phone, id string) string {
	t.Helper()
	raw, _ := json.Marshal(p.Snapshot())
	var root domain.UIElement
	if err := json.Unmarshal(raw, &root); err != nil {
		t.Fatal(err)
	}
	el, ok := domain.FindAnchor(root, domain.ElementAnchor{ID: sim.PkgCounter + ":id/" + id})
	if !ok {
		t.Fatalf("no %s on the screen", id)
	}
	return el.Ref
}
