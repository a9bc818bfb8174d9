package sim

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// checkShown fails unless what the phone memoises (the screen's layout and
// hash, the state's bytes and fingerprint) is what its current state lays
// out and marshals to afresh.
func checkShown(t *testing.T, p *Phone, step string) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	fresh := p.build()
	root, hash := p.screen()
	if want := hashTree(fresh); hash != want || hashTree(root) != want {
		t.Fatalf("%s: memoised screen hash %s; the state lays out as %s", step, hash, want)
	}
	if got, want := dump(root.element()), dump(fresh.element()); got != want {
		t.Fatalf("%s: memoised tree\n%s\nthe state lays out as\n%s", step, got, want)
	}
	if got, want := p.stateJSON(), p.st.marshal(); !bytes.Equal(got, want) {
		t.Fatalf("%s: memoised state\n%s\nthe state marshals to\n%s", step, got, want)
	}
	if got, want := p.fingerprint(), p.st.fingerprint(); !bytes.Equal(got, want) {
		t.Fatalf("%s: memoised fingerprint differs from the state's", step)
	}
}

// The memo of what the phone shows never outlives the state it was taken
// from: across thousands of random inputs (taps on what is on screen,
// swipes, typing, keys, apps opened, installed and cleared, refused
// inputs rolled back, proxy changes, resets), each read between them —
// observed or not — answers what the state lays out afresh, and an input
// reports a change exactly when the lasting state changed.
func TestShownIsWhatTheStateShows(t *testing.T) {
	for _, m := range Models() {
		t.Run(m.Name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, uint64(len(m.Name))))
			p, err := New(m.Name, "SIM-SHOWN-1")
			if err != nil {
				t.Fatal(err)
			}
			catalog := Catalog()
			keys := []string{"back", "home", "enter", "recents", "volume_up", "del", "power"}
			for i := range 2500 {
				if rng.IntN(3) > 0 { // most steps read first, so the memo is warm
					_ = p.Look(true, true)
				}
				p.mu.Lock()
				before := p.st.fingerprint()
				p.mu.Unlock()
				var eff Effect
				var ierr error
				op := rng.IntN(12)
				switch op {
				case 0, 1, 2: // tap what is on screen
					var refs []string
					p.Snapshot().Walk(func(el Element) bool {
						if el.Clickable {
							refs = append(refs, el.Ref)
						}
						return true
					})
					if len(refs) > 0 {
						eff, ierr = p.TapElement(refs[rng.IntN(len(refs))])
					}
				case 3:
					eff, ierr = p.Tap(rng.IntN(m.Width), rng.IntN(m.Height))
				case 4:
					eff, ierr = p.Swipe(m.Width/2, m.Height*3/4, m.Width/2, m.Height/4, 200)
				case 5:
					eff, ierr = p.TypeText(fmt.Sprintf("t%d", i))
				case 6:
					eff, ierr = p.PressKey(keys[rng.IntN(len(keys))])
				case 7:
					eff, ierr = p.OpenApp(catalog[rng.IntN(len(catalog))].Package)
				case 8:
					eff, ierr = p.InstallApp(catalog[rng.IntN(len(catalog))].Package)
				case 9:
					eff, ierr = p.ClearAppData(catalog[rng.IntN(len(catalog))].Package)
				case 10:
					var n *NetworkProxy
					if rng.IntN(2) == 0 {
						n = &NetworkProxy{Host: "127.0.0.1", Port: 1000 + rng.IntN(100)}
					}
					ierr = p.SetNetworkProxy(n)
				case 11:
					if rng.IntN(20) == 0 {
						ierr = p.Reset()
					} else {
						eff, ierr = p.Wake()
					}
				}
				step := fmt.Sprintf("step %d (op %d)", i, op)
				if ierr != nil && !isSimError(ierr) {
					t.Fatalf("%s: %v", step, ierr)
				}
				checkShown(t, p, step)
				if op != 10 && op != 11 && ierr == nil && eff.Action != "" {
					p.mu.Lock()
					changed := !bytes.Equal(before, p.st.fingerprint())
					p.mu.Unlock()
					if eff.Changed != changed {
						t.Fatalf("%s: %s reported changed=%v; the lasting state changed: %v", step, eff.Action, eff.Changed, changed)
					}
					if eff.ScreenHash != p.ScreenHash() {
						t.Fatalf("%s: the effect's screen hash is not the screen's", step)
					}
				}
				if errors.Is(ierr, ErrScreenOff) {
					_, _ = p.Wake()
					checkShown(t, p, step+" then wake")
				}
			}
		})
	}
}
