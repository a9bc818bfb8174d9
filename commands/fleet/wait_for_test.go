package fleet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"phonefleet/commands/cqrs"
	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/testutil/fleettest"
)

// fakeWait is a WaitFor handler on a real fleet whose time is a counter:
// each pause advances it by the pause and then runs the test's step for
// that pause (an action on the phone, say), so a wait runs without
// wall-clock time and the test knows exactly what each look saw.
type fakeWait struct {
	h      fleet.WaitForHandler
	now    time.Time
	pauses int
	looks  int
	// onPause runs after pause n (1, 2, …) has advanced the clock.
	onPause func(n int)
}

func newFakeWait(env *fleettest.Env) *fakeWait {
	w := &fakeWait{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	w.h = env.Fleet.WaitFor()
	observe := w.h.Observe
	w.h.Observe = cqrs.Fake[fleet.ObserveDevice, fleet.Observation](
		func(ctx context.Context, c fleet.ObserveDevice) (fleet.Observation, error) {
			w.looks++
			return observe.Handle(ctx, c)
		})
	w.h.Now = func() time.Time { return w.now }
	w.h.Sleep = func(_ context.Context, d time.Duration) error {
		w.now = w.now.Add(d)
		w.pauses++
		if w.onPause != nil {
			w.onPause(w.pauses)
		}
		return nil
	}
	return w
}

func (w *fakeWait) wait(auth domain.Auth, dev string, c fleet.WaitCondition) (fleet.WaitResult, error) {
	return w.h.Handle(bg, fleet.WaitFor{Auth: auth, DeviceID: dev, WaitCondition: c})
}

// refOfHint finds, on the device's screen now, the element whose hint
// starts with hint.
func refOfHint(t *testing.T, env *fleettest.Env, dev, hint string) string {
	t.Helper()
	obs, err := env.Fleet.ObserveDevice().Handle(bg, fleet.ObserveDevice{Auth: env.Auth, DeviceID: dev, Snapshot: true})
	if err != nil {
		t.Fatal(err)
	}
	var root domain.UIElement
	if err := json.Unmarshal(obs.Snapshot, &root); err != nil {
		t.Fatal(err)
	}
	var walk func(e domain.UIElement) string
	walk = func(e domain.UIElement) string {
		if strings.HasPrefix(e.Hint, hint) {
			return e.Ref
		}
		for _, c := range e.Children {
			if r := walk(c); r != "" {
				return r
			}
		}
		return ""
	}
	ref := walk(root)
	if ref == "" {
		t.Fatalf("no element hints %q", hint)
	}
	return ref
}

// TestWaitForConditions runs each kind of wait on a sim phone, acting on
// the phone during a chosen pause, and checks what the wait answers: met
// or not, how many looks, the time it took on the wait's own clock, the
// element found.
func TestWaitForConditions(t *testing.T) {
	env := fleettest.Start(t, fleettest.Options{Devices: 1})
	dev := env.DeviceIDs[0]
	l, err := env.Fleet.AcquireLease().Handle(bg, fleet.AcquireLease{Auth: env.Auth, DeviceID: dev, TTLSeconds: 3600})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	do := func(action, args string) {
		t.Helper()
		n++
		if _, err := act(env, dev, l.LeaseID, fmt.Sprintf("wait-test-%d", n), action, args); err != nil {
			t.Fatalf("%s %s: %v", action, args, err)
		}
	}
	home := func() { do("key", `{"key":"HOME"}`) }
	poll := int64(fleet.WaitPoll / time.Millisecond)

	t.Run("appears after an action during the first pause", func(t *testing.T) {
		do("open_app", `{"package":"com.example.notes"}`)
		do("tap", `{"ref":"`+refOfHint(t, env, dev, "Write a note")+`"}`)
		w := newFakeWait(env)
		w.onPause = func(n int) {
			if n == 1 {
				do("type_text", `{"text":"shows up"}`)
			}
		}
		got, err := w.wait(env.Auth, dev, fleet.WaitCondition{Text: "shows up"})
		if err != nil {
			t.Fatal(err)
		}
		if !got.Met || got.Until != fleet.WaitAppears || got.Observations != 2 || got.ElapsedMs != poll ||
			got.Element == nil || got.Element.Text != "shows up" || got.Element.Ref == "" {
			t.Fatalf("got %+v; want met on the second look, %d ms in, with the element", got, poll)
		}
		if !domain.HasPrefix(got.FrameID, domain.PrefixFrame) || got.DeviceID != dev || got.ScreenHash == "" {
			t.Errorf("got frame %q on %q; want the frame the element was seen on", got.FrameID, got.DeviceID)
		}
	})

	t.Run("times out when it never appears", func(t *testing.T) {
		w := newFakeWait(env)
		got, err := w.wait(env.Auth, dev, fleet.WaitCondition{Text: "never shown", TimeoutMs: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if want := int(1000/poll) + 1; got.Met || got.Observations != want || got.ElapsedMs != 1000 || got.Element != nil {
			t.Errorf("got %+v; want met false after %d looks and 1000 ms", got, want)
		}
	})

	t.Run("disappears", func(t *testing.T) {
		home()
		w := newFakeWait(env)
		w.onPause = func(n int) {
			if n == 2 {
				do("open_app", `{"package":"com.example.notes"}`)
			}
		}
		got, err := w.wait(env.Auth, dev, fleet.WaitCondition{Until: fleet.WaitDisappears, Text: "Settings"})
		if err != nil {
			t.Fatal(err)
		}
		if !got.Met || got.Observations != 3 || got.ElapsedMs != 2*poll || got.Element != nil {
			t.Errorf("got %+v; want met on the third look, with no element", got)
		}
	})

	t.Run("stable restarts its count when the screen changes", func(t *testing.T) {
		home()
		w := newFakeWait(env)
		w.onPause = func(n int) {
			if n == 1 {
				do("open_app", `{"package":"com.example.notes"}`)
			}
		}
		got, err := w.wait(env.Auth, dev, fleet.WaitCondition{Until: fleet.WaitStable, StableMs: 400})
		if err != nil {
			t.Fatal(err)
		}
		// Looks at 0 (home), 200 (notes: changed), 400, 600: still since 200
		// for 400 ms.
		if !got.Met || got.Observations != 4 || got.ElapsedMs != 3*poll {
			t.Errorf("got %+v; want met on the fourth look, %d ms in", got, 3*poll)
		}
	})

	t.Run("by resource id, short or whole", func(t *testing.T) {
		obs, err := env.Fleet.ObserveDevice().Handle(bg, fleet.ObserveDevice{Auth: env.Auth, DeviceID: dev, Snapshot: true})
		if err != nil {
			t.Fatal(err)
		}
		var root domain.UIElement
		_ = json.Unmarshal(obs.Snapshot, &root)
		var whole string
		var find func(e domain.UIElement)
		find = func(e domain.UIElement) {
			if whole == "" && strings.Contains(e.ResourceID, ":id/") {
				whole = e.ResourceID
			}
			for _, c := range e.Children {
				find(c)
			}
		}
		find(root)
		if whole == "" {
			t.Skip("the screen has no element with a resource id")
		}
		_, short, _ := strings.Cut(whole, ":id/")
		for _, id := range []string{whole, short} {
			got, err := newFakeWait(env).wait(env.Auth, dev, fleet.WaitCondition{ResourceID: id})
			if err != nil {
				t.Fatal(err)
			}
			if !got.Met || got.Observations != 1 || got.Element == nil || got.Element.ResourceID != whole {
				t.Errorf("%s: got %+v; want met at once on %s", id, got, whole)
			}
		}
	})
}

// TestWaitForRefusals: a credential without devices:read, a condition that
// names nothing or cannot hold, and another organisation's device are
// refused before (or, for the device, at) the first look; another
// organisation's device answers exactly as a device that does not exist.
func TestWaitForRefusals(t *testing.T) {
	env := fleettest.Start(t, fleettest.Options{Devices: 1})
	dev := env.DeviceIDs[0]
	key := domain.Auth{OrgID: env.OrgID, Kind: domain.PrincipalAPIKey, APIKeyID: "key_1", Scopes: []domain.Scope{domain.ScopeDevicesAct}}
	tests := []struct {
		name  string
		auth  domain.Auth
		cond  fleet.WaitCondition
		code  domain.Code
		looks int
	}{
		{"no devices:read", key, fleet.WaitCondition{Text: "x"}, domain.CodePermissionDenied, 0},
		{"nothing named", env.Auth, fleet.WaitCondition{}, domain.CodeInvalidArgument, 0},
		{"unknown until", env.Auth, fleet.WaitCondition{Until: "vanishes", Text: "x"}, domain.CodeInvalidArgument, 0},
		{"stable with a text", env.Auth, fleet.WaitCondition{Until: fleet.WaitStable, Text: "x"}, domain.CodeInvalidArgument, 0},
		{"stableMs on appears", env.Auth, fleet.WaitCondition{Text: "x", StableMs: 500}, domain.CodeInvalidArgument, 0},
		{"stable longer than the timeout", env.Auth, fleet.WaitCondition{Until: fleet.WaitStable, StableMs: 2000, TimeoutMs: 1000},
			domain.CodeInvalidArgument, 0},
		{"timeout past the bound", env.Auth, fleet.WaitCondition{Text: "x", TimeoutMs: fleet.MaxWaitTimeoutMs + 1},
			domain.CodeInvalidArgument, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newFakeWait(env)
			_, err := w.wait(tt.auth, dev, tt.cond)
			if got := codeOf(err); got != tt.code || w.looks != tt.looks {
				t.Errorf("got %v after %d looks; want %s after %d", err, w.looks, tt.code, tt.looks)
			}
		})
	}

	t.Run("another organisation's device answers as a missing one", func(t *testing.T) {
		other := domain.LocalOperator("org_" + strings.Repeat("0", 32))
		missing := domain.NewID(domain.PrefixDevice)
		_, foreignErr := newFakeWait(env).wait(other, dev, fleet.WaitCondition{Text: "x"})
		_, missingErr := newFakeWait(env).wait(other, missing, fleet.WaitCondition{Text: "x"})
		if foreignErr == nil || codeOf(foreignErr) != codeOf(missingErr) ||
			strings.ReplaceAll(foreignErr.Error(), dev, "ID") != strings.ReplaceAll(missingErr.Error(), missing, "ID") {
			t.Errorf("got %v for another organisation's device and %v for a missing one; want the same answer", foreignErr, missingErr)
		}
	})
}
