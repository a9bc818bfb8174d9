package sim

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
	"math"
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

// TestScaledPictureMapsToElements: a picture drawn at a smaller width is
// the same screen, mapped the way a client maps it (picture pixel × width ÷
// imageWidth, × height ÷ imageHeight; bounds are screen pixels): the
// picture pixel at an element's centre, mapped back to the screen, taps
// that element, and each element's area looks in the picture as it does
// on the full-size screen. JPEG and PNG, decoded by Go's decoders.
func TestScaledPictureMapsToElements(t *testing.T) {
	decoders := map[bool]func([]byte) (image.Image, error){
		false: func(b []byte) (image.Image, error) { return png.Decode(bytes.NewReader(b)) },
		true:  func(b []byte) (image.Image, error) { return jpeg.Decode(bytes.NewReader(b)) },
	}
	for _, sc := range screens(t) {
		full, err := sc.p.Picture(PictureOptions{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		fullImg, err := png.Decode(bytes.NewReader(full.Data))
		if err != nil {
			t.Fatal(err)
		}
		m := sc.p.Model()
		for _, opts := range []PictureOptions{{MaxWidth: 768, JPEG: true, Quality: 90}, {MaxWidth: 360}} {
			t.Run(fmt.Sprintf("%s/%d/jpeg=%v", sc.name, opts.MaxWidth, opts.JPEG), func(t *testing.T) {
				pic, err := sc.p.Picture(opts, nil)
				if err != nil {
					t.Fatal(err)
				}
				img, err := decoders[opts.JPEG](pic.Data)
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				if got := img.Bounds().Size(); got != image.Pt(pic.Width, pic.Height) {
					t.Fatalf("decoded %v; reported %d×%d", got, pic.Width, pic.Height)
				}
				fx, fy := float64(pic.Width)/float64(m.Width), float64(pic.Height)/float64(m.Height)
				checked := 0
				for _, e := range clickables(pic.Root) {
					b := e.Bounds
					// The picture pixel holding the element's centre, and
					// the screen point at that pixel's centre.
					px := int(float64(b[0]+b[2]) / 2 * fx)
					py := int(float64(b[1]+b[3]) / 2 * fy)
					sx, sy := int((float64(px)+0.5)/fx), int((float64(py)+0.5)/fy)
					eff, err := clone(t, sc.p).Tap(sx, sy)
					if err != nil || eff.Target != e.Ref {
						t.Errorf("%s %s: picture pixel (%d, %d) maps to (%d, %d), which tapped %q, %v; want %q",
							e.Ref, e.ResourceID, px, py, sx, sy, eff.Target, err, e.Ref)
					}
					// The element's inside (a picture pixel in from its
					// edges) averages the same colour as on the screen.
					in := image.Rect(int(math.Ceil(float64(b[0])*fx))+1, int(math.Ceil(float64(b[1])*fy))+1,
						int(float64(b[2])*fx)-1, int(float64(b[3])*fy)-1)
					if in.Dx() < 4 || in.Dy() < 4 {
						continue
					}
					onScreen := image.Rect(int(math.Ceil(float64(in.Min.X)/fx)), int(math.Ceil(float64(in.Min.Y)/fy)),
						int(float64(in.Max.X)/fx), int(float64(in.Max.Y)/fy))
					got, want := meanRGB(img, in), meanRGB(fullImg, onScreen)
					for c := range got {
						if math.Abs(got[c]-want[c]) > 12 {
							t.Errorf("%s %s: picture area %v averages rgb%.0f; the screen's %v averages rgb%.0f",
								e.Ref, e.ResourceID, in, got, onScreen, want)
							break
						}
					}
					checked++
				}
				if checked == 0 {
					t.Errorf("no element was large enough to compare")
				}
			})
		}
	}
}

// meanRGB is the average colour of r in img, 0–255 a channel.
func meanRGB(img image.Image, r image.Rectangle) [3]float64 {
	var sum [3]float64
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			cr, cg, cb, _ := img.At(x, y).RGBA()
			sum[0] += float64(cr >> 8)
			sum[1] += float64(cg >> 8)
			sum[2] += float64(cb >> 8)
		}
	}
	n := float64(r.Dx() * r.Dy())
	return [3]float64{sum[0] / n, sum[1] / n, sum[2] / n}
}
