package sim

import (
	"bytes"
	"image"
	"image/png"
	"testing"
)

// TestLiveFrameMatchesScreenshot proves the live frame is the screenshot's
// picture (same pixels as the decoded PNG, full size and scaled) and names
// the screen it shows.
func TestLiveFrameMatchesScreenshot(t *testing.T) {
	p, err := New("Compact", "LIVE-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.OpenApp(PkgSettings); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name     string
		maxWidth int
		shot     func() ([]byte, error)
	}{
		{"full size", 0, p.Screenshot},
		{"wider than the screen", 5000, p.Screenshot},
		{"scaled", 360, func() ([]byte, error) { return p.ScreenshotScaled(360) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			img, hash, err := p.LiveFrame(tt.maxWidth)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := hash, p.ScreenHash(); got != want {
				t.Fatalf("got hash %s; want %s", got, want)
			}
			b, err := tt.shot()
			if err != nil {
				t.Fatal(err)
			}
			dec, err := png.Decode(bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			if got, want := img.Bounds(), dec.Bounds(); got != want {
				t.Fatalf("got bounds %v; want %v", got, want)
			}
			want := image.NewRGBA(dec.Bounds())
			for y := dec.Bounds().Min.Y; y < dec.Bounds().Max.Y; y++ {
				for x := dec.Bounds().Min.X; x < dec.Bounds().Max.X; x++ {
					want.Set(x, y, dec.At(x, y))
				}
			}
			if !bytes.Equal(img.Pix, want.Pix) {
				t.Fatal("got pixels that differ from the screenshot's")
			}
		})
	}
	if _, _, err := p.LiveFrame(-1); err == nil {
		t.Fatal("got no error for a negative maxWidth")
	}
}
