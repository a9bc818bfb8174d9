package sim

import (
	"bytes"
	"fmt"
	"image"
	"image/png"
	"testing"

	"phonefleet/testutil/cputime"
)

// benchPhone returns a phone showing the Settings list, a busy screen.
func benchPhone(b *testing.B) *Phone {
	b.Helper()
	p, err := New("Pixel7", "BENCH-1")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := p.OpenApp(PkgSettings); err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkScreenshot measures a full-size frame rendered and encoded from
// scratch (the per-phone PNG cache is defeated by clearing it).
func BenchmarkScreenshot(b *testing.B) {
	p := benchPhone(b)
	b.ReportAllocs()
	for b.Loop() {
		p.mu.Lock()
		p.pngHash = ""
		p.mu.Unlock()
		if _, err := p.Screenshot(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkScreenshotCached measures a repeated frame of an unchanged screen.
func BenchmarkScreenshotCached(b *testing.B) {
	p := benchPhone(b)
	for b.Loop() {
		if _, err := p.Screenshot(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkScreenshotScaled measures a 360-pixel-wide frame.
func BenchmarkScreenshotScaled(b *testing.B) {
	p := benchPhone(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.ScreenshotScaled(360); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSnapshot measures building the element tree.
func BenchmarkSnapshot(b *testing.B) {
	p := benchPhone(b)
	for b.Loop() {
		p.Snapshot()
	}
}

// BenchmarkTap measures one input, including the state bookkeeping.
func BenchmarkTap(b *testing.B) {
	p := benchPhone(b)
	for b.Loop() {
		if _, err := p.Tap(540, 600); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRender measures laying out and painting a frame, without encoding.
func BenchmarkRender(b *testing.B) {
	p := benchPhone(b)
	img := getFrame(p.model.Width, p.model.Height)
	for b.Loop() {
		p.mu.Lock()
		renderInto(img, p.build())
		p.mu.Unlock()
	}
}

// BenchmarkEncode measures encoding a full-size frame.
func BenchmarkEncode(b *testing.B) {
	p := benchPhone(b)
	img := getFrame(p.model.Width, p.model.Height)
	renderInto(img, p.build())
	for b.Loop() {
		if _, err := encodeFastPNG(img); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeStdlib measures image/png at BestSpeed on the same frame,
// for comparison with encodeFastPNG.
func BenchmarkEncodeStdlib(b *testing.B) {
	p := benchPhone(b)
	img := getFrame(p.model.Width, p.model.Height)
	renderInto(img, p.build())
	for b.Loop() {
		if _, err := encodePNG(img); err != nil {
			b.Fatal(err)
		}
	}
}

// encodePNG is the standard library encoder at BestSpeed, kept for
// comparison with encodeFastPNG.
func encodePNG(img image.Image) ([]byte, error) {
	var buf bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestSpeed}
	if err := enc.Encode(&buf, img); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// BenchmarkPicturePNG measures the full-size PNG picture of observe.
func BenchmarkPicturePNG(b *testing.B) {
	p := benchPhone(b)
	defer cputime.Report(b)()
	for b.Loop() {
		if _, err := p.Picture(PictureOptions{}, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPictureJPEG768 measures the budgeted picture: 768 px JPEG q70.
func BenchmarkPictureJPEG768(b *testing.B) {
	p := benchPhone(b)
	defer cputime.Report(b)()
	for b.Loop() {
		if _, err := p.Picture(PictureOptions{MaxWidth: 768, JPEG: true, Quality: 70}, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPictureMarks768 measures the same picture with set-of-marks.
func BenchmarkPictureMarks768(b *testing.B) {
	p := benchPhone(b)
	defer cputime.Report(b)()
	for b.Loop() {
		if _, err := p.Picture(PictureOptions{MaxWidth: 768, JPEG: true, Quality: 70}, benchMarks); err != nil {
			b.Fatal(err)
		}
	}
}

// benchMarks frames every clickable element.
func benchMarks(root Element) []Mark {
	var out []Mark
	var walk func(e Element)
	walk = func(e Element) {
		if e.Clickable {
			out = append(out, Mark{Label: fmt.Sprint(len(out) + 1), Bounds: e.Bounds})
		}
		for _, k := range e.Children {
			walk(k)
		}
	}
	walk(root)
	return out
}

// BenchmarkObserveThenAct is one beat of the fleet benchmark's client on
// the sim's side: observe (hash, tree and replay state, as the device
// surface's snapshot asks) then press a key.
func BenchmarkObserveThenAct(b *testing.B) {
	p := newPhone(b)
	b.ReportAllocs()
	for b.Loop() {
		_ = p.Look(true, true)
		if _, err := p.PressKey("volume_up"); err != nil {
			b.Fatal(err)
		}
	}
}
