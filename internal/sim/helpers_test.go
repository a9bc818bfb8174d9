package sim

import (
	"strings"
	"testing"
)

// newPhone returns a fresh Pixel7 for a test.
func newPhone(t testing.TB) *Phone {
	t.Helper()
	p, err := New("Pixel7", "SIM-TEST-1")
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p
}

// must returns a function that fails the test when an input is refused:
// must(t)(p.Tap(x, y)).
func must(t testing.TB) func(Effect, error) Effect {
	return func(e Effect, err error) Effect {
		t.Helper()
		if err != nil {
			t.Fatalf("input refused: %v", err)
		}
		return e
	}
}

// clone copies a phone through State and Restore.
func clone(t testing.TB, p *Phone) *Phone {
	t.Helper()
	st, err := p.State()
	if err != nil {
		t.Fatalf("State: %v", err)
	}
	q, err := Restore(p.Model().Name, st)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	return q
}

// byID matches an element by resource id, with an optional text.
func byID(id string, text ...string) func(Element) bool {
	return func(e Element) bool {
		if e.ResourceID != id {
			return false
		}
		return len(text) == 0 || e.Text == text[0] || e.ContentDesc == text[0]
	}
}

// byText matches an element by its text or content description.
func byText(s string) func(Element) bool {
	return func(e Element) bool { return e.Text == s || e.ContentDesc == s }
}

// find returns the first on-screen element that matches.
func find(t testing.TB, p *Phone, match func(Element) bool) Element {
	t.Helper()
	e, ok := p.Snapshot().Find(match)
	if !ok {
		t.Fatalf("no matching element on screen %s", dump(p.Snapshot()))
	}
	return e
}

// tapOn taps the centre of the first element that matches.
func tapOn(t testing.TB, p *Phone, match func(Element) bool) Effect {
	t.Helper()
	x, y := find(t, p, match).Bounds.Center()
	return must(t)(p.Tap(x, y))
}

// dump lists an element tree compactly for failure messages.
func dump(e Element) string {
	var b strings.Builder
	var walk func(e Element, depth int)
	walk = func(e Element, depth int) {
		b.WriteString("\n" + strings.Repeat("  ", depth) + e.Class + " " + e.ResourceID + " " + e.Text + " " + e.ContentDesc)
		for _, c := range e.Children {
			walk(c, depth+1)
		}
	}
	walk(e, 0)
	return b.String()
}
