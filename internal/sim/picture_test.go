package sim

import (
	"bytes"
	"errors"
	"image"
	"image/jpeg"
	"image/png"
	"strconv"
	"testing"
)

// clickables returns the clickable elements of a tree in drawing order.
func clickables(root Element) []Element {
	var out []Element
	root.Walk(func(e Element) bool {
		if e.Clickable && !e.Bounds.Empty() {
			out = append(out, e)
		}
		return true
	})
	return out
}

// numbered marks elements 1, 2, … in order.
func numbered(els []Element) []Mark {
	out := make([]Mark, len(els))
	for i, e := range els {
		out[i] = Mark{Label: strconv.Itoa(i + 1), Bounds: e.Bounds}
	}
	return out
}

func TestPictureFormatsAndSizes(t *testing.T) {
	p := newPhone(t)
	m := p.Model()
	for _, tt := range []struct {
		name        string
		opts        PictureOptions
		wantW       int
		wantH       int
		decode      func([]byte) (image.Image, error)
		wantContent string
	}{
		{"png full size", PictureOptions{}, m.Width, m.Height, func(b []byte) (image.Image, error) { return png.Decode(bytes.NewReader(b)) }, "png"},
		{"png at 768", PictureOptions{MaxWidth: 768}, 768, (m.Height*768 + m.Width/2) / m.Width, func(b []byte) (image.Image, error) { return png.Decode(bytes.NewReader(b)) }, "png"},
		{"jpeg at 768", PictureOptions{MaxWidth: 768, JPEG: true, Quality: 70}, 768, (m.Height*768 + m.Width/2) / m.Width, func(b []byte) (image.Image, error) { return jpeg.Decode(bytes.NewReader(b)) }, "jpeg"},
		{"jpeg full size", PictureOptions{JPEG: true, Quality: 90}, m.Width, m.Height, func(b []byte) (image.Image, error) { return jpeg.Decode(bytes.NewReader(b)) }, "jpeg"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pic, err := p.Picture(tt.opts, nil)
			if err != nil {
				t.Fatal(err)
			}
			img, err := tt.decode(pic.Data)
			if err != nil {
				t.Fatalf("decode %s: %v", tt.wantContent, err)
			}
			if got := img.Bounds().Size(); got != image.Pt(tt.wantW, tt.wantH) || pic.Width != tt.wantW || pic.Height != tt.wantH {
				t.Errorf("got decoded %v, reported %d×%d; want %d×%d", got, pic.Width, pic.Height, tt.wantW, tt.wantH)
			}
			if pic.ScreenHash != p.ScreenHash() {
				t.Errorf("got hash %s; want the screen's %s", pic.ScreenHash, p.ScreenHash())
			}
		})
	}
	// A plain full-size PNG picture is the screenshot, byte for byte.
	pic, err := p.Picture(PictureOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	shot, err := p.Screenshot()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(pic.Data, shot) {
		t.Errorf("a plain PNG picture differs from Screenshot")
	}
	for _, bad := range []PictureOptions{{MaxWidth: -1}, {JPEG: true, Quality: 0}, {JPEG: true, Quality: 101}} {
		if _, err := p.Picture(bad, nil); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Picture(%+v): got %v; want ErrInvalidArgument", bad, err)
		}
	}
}

// TestPictureMarks: the box numbered k is drawn at the bounds of the k-th
// mark pick chose, from the tree of the screen pictured — at full size and
// scaled — and nothing else changes.
func TestPictureMarks(t *testing.T) {
	p := newPhone(t)
	for _, maxWidth := range []int{0, 540} {
		t.Run("maxWidth="+strconv.Itoa(maxWidth), func(t *testing.T) {
			var chosen []Element
			pic, err := p.Picture(PictureOptions{MaxWidth: maxWidth}, func(root Element) []Mark {
				chosen = clickables(root)
				return numbered(chosen)
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(chosen) < 3 || len(pic.Marks) != len(chosen) {
				t.Fatalf("got %d marks of %d clickables; want one per clickable, at least 3", len(pic.Marks), len(chosen))
			}
			plain, err := p.Picture(PictureOptions{MaxWidth: maxWidth}, nil)
			if err != nil {
				t.Fatal(err)
			}
			marked, err := png.Decode(bytes.NewReader(pic.Data))
			if err != nil {
				t.Fatal(err)
			}
			clean, err := png.Decode(bytes.NewReader(plain.Data))
			if err != nil {
				t.Fatal(err)
			}
			scale := float64(pic.Width) / float64(p.Model().Width)
			sc := func(v int) int { return int(float64(v)*scale + 0.5) }
			checked := 0
			for k, mk := range pic.Marks {
				b := mk.Bounds
				if b != chosen[k].Bounds || mk.Label != strconv.Itoa(k+1) {
					t.Fatalf("mark %d is %+v; want label %d at %v", k+1, mk, k+1, chosen[k].Bounds)
				}
				// The middle of the box's right edge, unless a later box
				// (drawn over it) covers that point.
				x, y := sc(b[2])-1, (sc(b[1])+sc(b[3]))/2
				covered := false
				for _, later := range pic.Marks[k+1:] {
					lb := later.Bounds
					if x >= sc(lb[0]) && x < sc(lb[2]) && y >= sc(lb[1]) && y < sc(lb[3]) {
						covered = true
					}
				}
				if covered {
					continue
				}
				want := MarkColor(k)
				r, g, bl, _ := marked.At(x, y).RGBA()
				if uint8(r>>8) != want.R || uint8(g>>8) != want.G || uint8(bl>>8) != want.B {
					t.Errorf("box %d (ref %s) at (%d, %d): got rgb(%d,%d,%d); want its colour %v", k+1, chosen[k].Ref, x, y, r>>8, g>>8, bl>>8, want)
				}
				checked++
			}
			if checked < len(pic.Marks)/2 {
				t.Errorf("checked only %d of %d boxes", checked, len(pic.Marks))
			}
			// Far from every box the picture is the plain one.
			if marked.Bounds() != clean.Bounds() {
				t.Fatalf("marked picture is %v; plain is %v", marked.Bounds(), clean.Bounds())
			}
			if pic.ScreenHash != plain.ScreenHash {
				t.Errorf("marking changed the screen hash")
			}
		})
	}
}

// TestResetIsAFreshPhone: after inputs that change apps' data, Reset
// leaves a phone whose screenshot and state are byte-identical to a new
// phone's of the same model and serial.
func TestResetIsAFreshPhone(t *testing.T) {
	p := newPhone(t)
	must(t)(p.InstallApp(PkgCalculator))
	must(t)(p.OpenApp(PkgNotes))
	field, ok := p.Snapshot().Find(func(e Element) bool { return e.Focusable })
	if !ok {
		t.Fatal("Notes shows no text field")
	}
	must(t)(p.TapElement(field.Ref))
	must(t)(p.TypeText("secret note"))
	must(t)(p.ScreenOff())
	fresh := newPhone(t)
	before, _ := p.Screenshot()
	want, _ := fresh.Screenshot()
	if bytes.Equal(before, want) {
		t.Fatal("the phone looks fresh before the reset; the test proves nothing")
	}
	if err := p.Reset(); err != nil {
		t.Fatal(err)
	}
	got, err := p.Screenshot()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("screenshot after Reset differs from a fresh phone's")
	}
	gs, _ := p.State()
	ws, _ := fresh.State()
	if !bytes.Equal(gs, ws) {
		t.Errorf("state after Reset:\n%s\nwant a fresh phone's:\n%s", gs, ws)
	}
}
