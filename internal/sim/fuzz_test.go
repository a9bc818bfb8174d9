package sim

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// simErrors are the refusals the sim's inputs and Restore answer.
var simErrors = []error{ErrOutOfBounds, ErrUnknownKey, ErrNoFocusedField, ErrAppNotInstalled, ErrNotInCatalog,
	ErrScreenOff, ErrUnknownModel, ErrInvalidArgument, ErrElementNotFound, ErrInvalidState}

func isSimError(err error) bool {
	for _, e := range simErrors {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// FuzzInputs drives a phone with arbitrary inputs — taps, swipes and
// presses at any point, any text typed, any key name, any app opened or
// installed — as the device surface passes them on: nothing panics; every
// refusal is one of the sim's errors; and whatever the inputs did, the
// phone's saved state restores into a phone that saves the same state.
func FuzzInputs(f *testing.F) {
	f.Add([]byte{0, 10, 0, 20, 4, 0, 0, 0, 0}, "hello", "enter", "com.android.settings")
	f.Add([]byte{5, 1, 0, 1, 0, 3, 0, 5, 6, 7}, "héllo\u0000", "KEYCODE_HOME", "nope")
	f.Add([]byte{6, 2, 0, 2, 0, 9, 9, 9, 9, 9, 9}, "\xff", "66", "com.example.notes")
	f.Fuzz(func(t *testing.T, ops []byte, text, key, pkg string) {
		p, err := New("Pixel7", "SIM-FUZZ-1")
		if err != nil {
			t.Fatal(err)
		}
		r := bytes.NewReader(ops)
		coord := func() int {
			var v int16
			_ = binary.Read(r, binary.LittleEndian, &v)
			return int(v) * 3
		}
		for steps := 0; steps < 32; steps++ {
			op, err := r.ReadByte()
			if err != nil {
				break
			}
			var ierr error
			switch op % 10 {
			case 0:
				_, ierr = p.Tap(coord(), coord())
			case 1:
				_, ierr = p.DoubleTap(coord(), coord())
			case 2:
				_, ierr = p.LongPress(coord(), coord(), coord())
			case 3:
				_, ierr = p.Swipe(coord(), coord(), coord(), coord(), coord())
			case 4:
				_, ierr = p.TypeText(text)
			case 5:
				_, ierr = p.PressKey(key)
			case 6:
				_, ierr = p.OpenApp(pkg)
			case 7:
				_, ierr = p.InstallApp(pkg)
			case 8:
				_, ierr = p.Wake()
			case 9:
				_ = p.Snapshot()
			}
			if ierr != nil && !isSimError(ierr) {
				t.Fatalf("op %d: got %v; want one of the sim's errors", op%10, ierr)
			}
		}
		st, err := p.State()
		if err != nil {
			t.Fatalf("State: %v", err)
		}
		q, err := Restore("Pixel7", st)
		if err != nil {
			t.Fatalf("the state the inputs left does not restore: %v\n%s", err, st)
		}
		st2, err := q.State()
		if err != nil || !bytes.Equal(st, st2) {
			t.Fatalf("restored state differs (%v):\n%s\n%s", err, st, st2)
		}
	})
}

// FuzzRestore reads arbitrary saved states (a gateway's sim state file):
// nothing panics; a refusal is ErrInvalidState (or the model's); and a
// state taken saves back into one that restores the same.
func FuzzRestore(f *testing.F) {
	p, err := New("Pixel7", "SIM-FUZZ-1")
	if err != nil {
		f.Fatal(err)
	}
	_, _ = p.TypeText("x")
	st, _ := p.State()
	f.Add(st)
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"unknown":1}`))
	f.Add(st[:len(st)/2])
	f.Fuzz(func(t *testing.T, state []byte) {
		q, err := Restore("Pixel7", state)
		if err != nil {
			if !isSimError(err) {
				t.Fatalf("got %v; want ErrInvalidState", err)
			}
			return
		}
		_ = q.Snapshot()
		saved, err := q.State()
		if err != nil {
			t.Fatalf("a restored phone does not save: %v", err)
		}
		r, err := Restore("Pixel7", saved)
		if err != nil {
			t.Fatalf("%q restored, saved as %s, refused: %v", state, saved, err)
		}
		again, _ := r.State()
		if !bytes.Equal(saved, again) {
			t.Fatalf("%q restored, saved as\n%s\nthen\n%s", state, saved, again)
		}
	})
}
