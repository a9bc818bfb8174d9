package sim

import (
	"bytes"
	"encoding/json"
	"hash/adler32"
	"image"
	"image/png"
	"sync"
	"testing"
)

// freshScreenshot renders without the per-phone PNG cache.
func freshScreenshot(t testing.TB, p *Phone) []byte {
	t.Helper()
	p.mu.Lock()
	p.pngHash, p.pngData = "", nil
	p.mu.Unlock()
	b, err := p.Screenshot()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestScreenHashFollowsPixels drives a session full of inputs that change
// the screen and inputs that do not, and requires the hash to change
// exactly when the rendered pixels change.
func TestScreenHashFollowsPixels(t *testing.T) {
	p := newPhone(t)
	ok := must(t)
	inputs := []struct {
		name string
		do   func()
	}{
		{"observe only", func() { p.Snapshot() }},
		{"refused tap", func() { p.Tap(-1, -1) }},
		{"refused typing", func() { p.TypeText("x") }},
		{"tap on empty wallpaper", func() { ok(p.Tap(540, 1400)) }},
		{"open Settings", func() { ok(p.OpenApp(PkgSettings)) }},
		{"open Settings again", func() { ok(p.OpenApp(PkgSettings)) }},
		{"swipe at the top", func() { ok(p.Swipe(540, 600, 540, 1800, 300)) }},
		{"scroll", func() { ok(p.Swipe(540, 1800, 540, 1700, 300)) }},
		{"toggle NFC", func() { tapOn(t, p, byText("NFC")) }},
		{"toggle NFC back", func() { tapOn(t, p, byText("NFC")) }},
		{"home", func() { ok(p.PressKey("HOME")) }},
		{"home again", func() { ok(p.PressKey("HOME")) }},
		{"screen off", func() { ok(p.ScreenOff()) }},
		{"screen off again", func() { ok(p.ScreenOff()) }},
		{"wake", func() { ok(p.Wake()) }},
	}
	prevHash, prevPNG := p.ScreenHash(), freshScreenshot(t, p)
	for _, in := range inputs {
		in.do()
		hash, shot := p.ScreenHash(), freshScreenshot(t, p)
		hashChanged := hash != prevHash
		pixelsChanged := !bytes.Equal(decodePNG(t, shot).Pix, decodePNG(t, prevPNG).Pix)
		if hashChanged != pixelsChanged {
			t.Errorf("%s: hash changed %v; want %v (pixels changed)", in.name, hashChanged, pixelsChanged)
		}
		if p.ScreenHash() != hash {
			t.Errorf("%s: hash not stable without input", in.name)
		}
		prevHash, prevPNG = hash, shot
	}
}

// TestFastPNG checks the encoder against image/png: the frame decodes to
// exactly the rendered pixels.
func TestFastPNG(t *testing.T) {
	for _, m := range Models() {
		t.Run(m.Name, func(t *testing.T) {
			p, err := New(m.Name, "PNG-1")
			if err != nil {
				t.Fatal(err)
			}
			must(t)(p.OpenApp(PkgSettings))
			img := image.NewRGBA(image.Rect(0, 0, m.Width, m.Height))
			p.mu.Lock()
			renderInto(img, p.build())
			p.mu.Unlock()
			shot := freshScreenshot(t, p)
			cfg, err := png.DecodeConfig(bytes.NewReader(shot))
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Width != m.Width || cfg.Height != m.Height {
				t.Errorf("got %d×%d; want %d×%d", cfg.Width, cfg.Height, m.Width, m.Height)
			}
			if got := decodePNG(t, shot); !bytes.Equal(got.Pix, img.Pix) {
				t.Errorf("decoded pixels differ from the rendered frame")
			}
			scaled, err := p.ScreenshotScaled(m.Width / 3)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err = png.DecodeConfig(bytes.NewReader(scaled))
			if err != nil {
				t.Fatal(err)
			}
			if want := (m.Height*(m.Width/3) + m.Width/2) / m.Width; cfg.Width != m.Width/3 || cfg.Height != want {
				t.Errorf("scaled: got %d×%d; want %d×%d", cfg.Width, cfg.Height, m.Width/3, want)
			}
			full, err := p.ScreenshotScaled(m.Width * 2)
			if err != nil || !bytes.Equal(full, shot) {
				t.Errorf("ScreenshotScaled above the width: got %d bytes, %v; want the full frame", len(full), err)
			}
		})
	}
}

func TestAdler32Combine(t *testing.T) {
	data := bytes.Repeat([]byte("phonefleet frames \x00\xff"), 50000)
	for _, cut := range []int{0, 1, 65521, 400000, len(data)} {
		a, b := data[:cut], data[cut:]
		got := adler32Combine(adler32.Checksum(a), adler32.Checksum(b), len(b))
		if want := adler32.Checksum(data); got != want {
			t.Errorf("cut %d: got %08x; want %08x", cut, got, want)
		}
	}
}

// TestStateRoundTrip restores a phone in the middle of everything (a
// dialog, a focused field with text, scrolled lists, installed apps) and
// requires the copy to look and behave the same.
func TestStateRoundTrip(t *testing.T) {
	p := newPhone(t)
	ok := must(t)
	ok(p.InstallApp(PkgCounter))
	ok(p.OpenApp(PkgSettings))
	ok(p.Swipe(540, 1800, 540, 900, 300))
	tapOn(t, p, byText("Dark theme"))
	ok(p.OpenApp(PkgBrowser))
	tapOn(t, p, byID(PkgBrowser+":id/url_bar"))
	ok(p.TypeText("example.com"))
	ok(p.PressKey("ENTER"))
	ok(p.OpenApp(PkgNotes))
	tapOn(t, p, byID(PkgNotes+":id/input"))
	ok(p.TypeText("kept 世界"))
	ok(p.PressKey("ENTER"))
	ok(p.TypeText("draft"))
	x, y := find(t, p, byID(PkgNotes+":id/note_card")).Bounds.Center()
	ok(p.LongPress(x, y, 0))

	q := clone(t, p)
	sp, _ := p.State()
	sq, _ := q.State()
	if !bytes.Equal(sp, sq) {
		t.Errorf("state changed in the round trip")
	}
	if !bytes.Equal(freshScreenshot(t, p), freshScreenshot(t, q)) {
		t.Errorf("restored phone renders differently")
	}
	jp, _ := json.Marshal(p.Snapshot())
	jq, _ := json.Marshal(q.Snapshot())
	if !bytes.Equal(jp, jq) {
		t.Errorf("restored phone's snapshot differs")
	}
	for _, ph := range []*Phone{p, q} {
		ok(ph.PressKey("BACK"))
		ok(ph.TypeText(" more"))
		ok(ph.PressKey("APP_SWITCH"))
	}
	if p.ScreenHash() != q.ScreenHash() {
		t.Errorf("phones diverged after the same inputs")
	}
}

// TestConcurrentUse hammers one phone from several goroutines; run with
// -race to check the locking.
func TestConcurrentUse(t *testing.T) {
	p := newPhone(t)
	must(t)(p.OpenApp(PkgSettings))
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				switch g {
				case 0:
					p.Swipe(540, 1800, 540, 1500, 100)
				case 1:
					p.Snapshot()
					p.ScreenHash()
				case 2:
					p.ScreenshotScaled(120)
				default:
					p.Tap(540, 700)
					p.State()
				}
			}
		}(g)
	}
	wg.Wait()
	if got := p.Clock(); !got.Equal(ClockStart().Add(21 * ClockStep)) {
		t.Errorf("got clock %v; want 21 inputs after the start", got)
	}
}
