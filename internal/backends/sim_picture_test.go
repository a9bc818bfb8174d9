package backends

import (
	"bytes"
	"encoding/json"
	"image"
	"image/png"
	"reflect"
	"testing"

	"phonefleet/domain"
	"phonefleet/internal/sim"
)

// TestSimMarksMatchTheTree: on every screen of the scripted session, a
// set-of-marks observation hands the mark picker the very tree it returns
// as its snapshot (the snapshot a plain observation of the screen gives,
// byte for byte), each mark numbers an element of that tree at that
// element's bounds, and the picture shows box k in mark k's colour at
// those bounds with its label's tab in the box's top-left corner.
func TestSimMarksMatchTheTree(t *testing.T) {
	s := newPhone(t)
	play(t, s, func(st step, _ domain.ActionResult) {
		for _, opts := range []domain.ObserveOptions{
			{Image: true},
			{Image: true, MaxWidth: 768, Format: domain.ImageJPEG},
		} {
			var picked domain.UIElement
			opts.Marks = func(root domain.UIElement) []domain.Mark {
				picked = root
				return interactiveMarks(root)
			}
			obs, err := s.Observe(bg, opts)
			if err != nil {
				t.Fatalf("%s: %v", st.name, err)
			}
			plain, err := s.Observe(bg, domain.ObserveOptions{Snapshot: true})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(obs.Snapshot, plain.Snapshot) || obs.ScreenHash != plain.ScreenHash {
				t.Fatalf("%s: the set-of-marks snapshot differs from the screen's:\ngot  %s\nwant %s", st.name, obs.Snapshot, plain.Snapshot)
			}
			var tree domain.UIElement
			if err := json.Unmarshal(obs.Snapshot, &tree); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(picked, tree) {
				t.Fatalf("%s: the picker was given a tree other than the snapshot", st.name)
			}
			want := interactiveMarks(tree)
			if len(obs.Marks) == 0 || !reflect.DeepEqual(obs.Marks, want) {
				t.Fatalf("%s: got marks %+v; want %+v", st.name, obs.Marks, want)
			}
			bounds := map[string][4]int{}
			var walk func(e domain.UIElement)
			walk = func(e domain.UIElement) {
				bounds[e.Ref] = e.Bounds
				for _, c := range e.Children {
					walk(c)
				}
			}
			walk(tree)
			for i, m := range obs.Marks {
				if b, ok := bounds[m.Ref]; m.N != i+1 || !ok || b != m.Bounds {
					t.Errorf("%s: mark %d = %+v; want number %d at the bounds of %s in the tree, %v", st.name, i+1, m, i+1, m.Ref, b)
				}
			}
			if opts.Format == domain.ImageJPEG {
				continue
			}
			img, err := png.Decode(bytes.NewReader(obs.Image))
			if err != nil {
				t.Fatal(err)
			}
			checkBoxes(t, st.name, img, obs.Marks)
		}
	})
}

// checkBoxes checks, on a full-size set-of-marks picture, that each box
// not drawn over by a later one has its colour in the middle of its right
// edge and on its tab's top-left pixel, and white label pixels on its tab
// right of the box's left edge (a full-size picture: 3-pixel strokes, a
// tab 37 pixels high).
func checkBoxes(t *testing.T, name string, img image.Image, marks []domain.Mark) {
	t.Helper()
	covered := func(k, x, y int) bool {
		for _, later := range marks[k+1:] {
			lb := later.Bounds
			if x >= lb[0] && x < lb[2] && y >= lb[1] && y < lb[3] {
				return true
			}
		}
		return false
	}
	is := func(x, y int, c [3]uint8) bool {
		r, g, b, _ := img.At(x, y).RGBA()
		return [3]uint8{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8)} == c
	}
	stroke := sim.MarkStroke(img.Bounds().Dx())
	checked := 0
	for k, m := range marks {
		b := m.Bounds
		if b[2]-b[0] < 6*stroke || b[3]-b[1] < 6*stroke {
			continue
		}
		mc := sim.MarkColor(k)
		col := [3]uint8{mc.R, mc.G, mc.B}
		if x, y := b[2]-1, (b[1]+b[3])/2; !covered(k, x, y) && !is(x, y, col) {
			t.Errorf("%s: box %d (%s): right edge at (%d, %d) is not its colour %v", name, k+1, m.Ref, x, y, mc)
		}
		// A part of the tab the label's first digit crosses, whatever it
		// is (the tab is 9 strokes high and 8 wide at least).
		tab := image.Rect(b[0], b[1], b[0]+6*stroke, b[1]+9*stroke)
		if hidden(marks[k+1:], tab) {
			continue
		}
		if !is(b[0], b[1], col) {
			t.Errorf("%s: box %d (%s): its corner (%d, %d) is not its colour %v", name, k+1, m.Ref, b[0], b[1], mc)
		}
		white := 0
		for y := tab.Min.Y; y < tab.Max.Y; y++ {
			for x := tab.Min.X + stroke; x < tab.Max.X; x++ {
				if is(x, y, [3]uint8{0xff, 0xff, 0xff}) {
					white++
				}
			}
		}
		if white == 0 {
			t.Errorf("%s: box %d (%s): no label drawn on its tab", name, k+1, m.Ref)
		}
		checked++
	}
	if checked == 0 {
		t.Errorf("%s: no box could be checked", name)
	}
}

// hidden reports whether any of marks overlaps r.
func hidden(marks []domain.Mark, r image.Rectangle) bool {
	for _, m := range marks {
		if image.Rect(m.Bounds[0], m.Bounds[1], m.Bounds[2], m.Bounds[3]).Overlaps(r) {
			return true
		}
	}
	return false
}
