package screenjpeg_test

import (
	"bytes"
	"image"
	"image/color"
	"image/jpeg"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"phonefleet/internal/screenjpeg"
	"phonefleet/internal/sim"
	"phonefleet/testutil/cputime"
)

// psnr is the peak signal-to-noise ratio of b against a over RGB, in dB.
func psnr(t *testing.T, a *image.RGBA, b image.Image) float64 {
	t.Helper()
	if a.Rect.Size() != b.Bounds().Size() {
		t.Fatalf("decoded size %v; want %v", b.Bounds().Size(), a.Rect.Size())
	}
	var sum float64
	for y := a.Rect.Min.Y; y < a.Rect.Max.Y; y++ {
		for x := a.Rect.Min.X; x < a.Rect.Max.X; x++ {
			c := a.RGBAAt(x, y)
			r, g, bl, _ := b.At(x-a.Rect.Min.X+b.Bounds().Min.X, y-a.Rect.Min.Y+b.Bounds().Min.Y).RGBA()
			for _, d := range []float64{float64(c.R) - float64(r>>8), float64(c.G) - float64(g>>8), float64(c.B) - float64(bl>>8)} {
				sum += d * d
			}
		}
	}
	mse := sum / float64(3*a.Rect.Dx()*a.Rect.Dy())
	if mse == 0 {
		return math.Inf(1)
	}
	return 10 * math.Log10(255*255/mse)
}

// both encodes img with screenjpeg and image/jpeg at quality q, decodes
// each with image/jpeg, and returns their PSNRs and sizes.
func both(t *testing.T, img *image.RGBA, q int) (ours, std float64, oursN, stdN int) {
	t.Helper()
	var a, b bytes.Buffer
	if err := screenjpeg.Encode(&a, img, q); err != nil {
		t.Fatalf("Encode: %v", err)
	}
	if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: q}); err != nil {
		t.Fatal(err)
	}
	da, err := jpeg.Decode(bytes.NewReader(a.Bytes()))
	if err != nil {
		t.Fatalf("image/jpeg cannot decode ours (%dx%d q%d): %v", img.Rect.Dx(), img.Rect.Dy(), q, err)
	}
	db, err := jpeg.Decode(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	return psnr(t, img, da), psnr(t, img, db), a.Len(), b.Len()
}

func screen(t testing.TB, width int) *image.RGBA {
	p, err := sim.New("Pixel7", "JPEG-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.OpenApp(sim.PkgSettings); err != nil {
		t.Fatal(err)
	}
	img, _, err := p.LiveFrame(width)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func noise(w, h int, seed uint64) *image.RGBA {
	r := rand.New(rand.NewPCG(seed, 1))
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = uint8(r.IntN(256))
	}
	return img
}

func gradient(w, h int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.SetRGBA(x, y, color.RGBA{uint8(x * 255 / max(1, w-1)), uint8(y * 255 / max(1, h-1)), uint8((x + y) % 256), 0xff})
		}
	}
	return img
}

func uniform(w, h int, c color.RGBA) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.SetRGBA(x, y, c)
		}
	}
	return img
}

// TestDecodesAsFaithfullyAsImageJPEG: every picture, of any size (edges
// not on a block boundary among them), decodes with image/jpeg to the size
// encoded and within half a decibel of what image/jpeg's own encoder
// keeps at the same quality (or better).
func TestDecodesAsFaithfullyAsImageJPEG(t *testing.T) {
	cases := []struct {
		name string
		img  *image.RGBA
	}{
		{"screen 768", screen(t, 768)},
		{"screen 360", screen(t, 360)},
		{"gradient 33x17", gradient(33, 17)},
		{"gradient 1x1", gradient(1, 1)},
		{"gradient 200x3", gradient(200, 3)},
		{"noise 40x40", noise(40, 40, 7)},
		{"uniform 50x30", uniform(50, 30, color.RGBA{0x12, 0x80, 0xf0, 0xff})},
		{"white 16x16", uniform(16, 16, color.RGBA{0xff, 0xff, 0xff, 0xff})},
		{"black 17x17", uniform(17, 17, color.RGBA{0, 0, 0, 0xff})},
	}
	for _, c := range cases {
		for _, q := range []int{1, 30, 70, 90, 100} {
			ours, std, on, sn := both(t, c.img, q)
			if ours < std-0.5 {
				t.Errorf("%s q%d: PSNR %.2f dB; image/jpeg keeps %.2f dB", c.name, q, ours, std)
			}
			t.Logf("%s q%d: %.2f dB %d bytes (image/jpeg %.2f dB %d bytes)", c.name, q, ours, on, std, sn)
		}
	}
}

// TestScreenStaysSharp: a screen at the quality observe uses keeps text
// legible (PSNR well above what blurred text gives).
func TestScreenStaysSharp(t *testing.T) {
	img := screen(t, 768)
	ours, _, n, _ := both(t, img, 70)
	if ours < 30 {
		t.Errorf("screen at q70: %.2f dB, want ≥ 30", ours)
	}
	if n > len(img.Pix)/8 {
		t.Errorf("screen at q70: %d bytes for %d pixels", n, len(img.Pix)/4)
	}
}

// TestOffsetImage: a sub-image (its Rect not at the origin) encodes its
// own pixels.
func TestOffsetImage(t *testing.T) {
	full := gradient(64, 64)
	sub := full.SubImage(image.Rect(8, 5, 45, 40)).(*image.RGBA)
	ours, std, _, _ := both(t, sub, 90)
	if ours < std-0.5 {
		t.Errorf("sub-image: PSNR %.2f; image/jpeg %.2f", ours, std)
	}
}

// TestRefusesEmpty: an empty image is refused, not written as a broken
// file.
func TestRefusesEmpty(t *testing.T) {
	var b bytes.Buffer
	if err := screenjpeg.Encode(&b, image.NewRGBA(image.Rect(0, 0, 0, 10)), 70); err == nil {
		t.Fatal("an empty image was encoded")
	}
	if b.Len() != 0 {
		t.Fatalf("%d bytes written for a refused image", b.Len())
	}
}

// TestStripsAreRestartIntervals: a picture taller than one strip is
// written as restart intervals (a DRI and RST0, RST1, … between strips),
// the same bytes whatever the number of CPUs, and decodes as a picture
// encoded in one piece would; a picture of one MCU row is one piece.
func TestStripsAreRestartIntervals(t *testing.T) {
	for _, c := range []struct {
		name   string
		img    *image.RGBA
		strips int
	}{
		{"screen 768", screen(t, 768), 4},
		{"noise 100x70", noise(100, 70, 3), 3}, // 5 MCU rows: strips of 2
		{"gradient 4000x100", gradient(4000, 100), 4},
		{"gradient 33x17", gradient(33, 17), 2},
		{"gradient 200x3", gradient(200, 3), 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			var a bytes.Buffer
			if err := screenjpeg.Encode(&a, c.img, 70); err != nil {
				t.Fatal(err)
			}
			prev := runtime.GOMAXPROCS(1)
			var one bytes.Buffer
			err := screenjpeg.Encode(&one, c.img, 70)
			runtime.GOMAXPROCS(prev)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(a.Bytes(), one.Bytes()) {
				t.Errorf("bytes differ with GOMAXPROCS=1 (%d) and %d (%d)", one.Len(), prev, a.Len())
			}
			data := a.Bytes()
			if got := bytes.Contains(data, []byte{0xff, 0xdd, 0, 4}); got != (c.strips > 1) {
				t.Errorf("DRI written: %v; want %v", got, c.strips > 1)
			}
			for k := range 8 {
				want := k < c.strips-1
				if got := bytes.Contains(data, []byte{0xff, 0xd0 + byte(k)}); got != want {
					t.Errorf("RST%d present: %v; want %v", k, got, want)
				}
			}
			ours, std, _, _ := both(t, c.img, 70)
			if ours < std-0.5 {
				t.Errorf("PSNR %.2f dB; image/jpeg keeps %.2f dB", ours, std)
			}
		})
	}
}

func BenchmarkScreen768(b *testing.B) {
	img := screen(b, 768)
	var buf bytes.Buffer
	defer cputime.Report(b)()
	for b.Loop() {
		buf.Reset()
		if err := screenjpeg.Encode(&buf, img, 70); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkScreen768ImageJPEG(b *testing.B) {
	img := screen(b, 768)
	var buf bytes.Buffer
	for b.Loop() {
		buf.Reset()
		if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 70}); err != nil {
			b.Fatal(err)
		}
	}
}
