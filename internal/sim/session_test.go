package sim

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// step is one input of a scripted session.
type step struct {
	name string
	do   func(t testing.TB, p *Phone) Effect
	png  bool // keep a scaled PNG fixture of the screen after this step
}

// session is the scripted session of the golden tests: Settings, Notes and
// the Browser, driven by element lookups the way a client would.
func session() []step {
	return []step{
		{"start", func(t testing.TB, p *Phone) Effect {
			return Effect{Action: "none", Foreground: p.Foreground(), ScreenHash: p.ScreenHash()}
		}, true},
		{"open_settings", func(t testing.TB, p *Phone) Effect {
			return tapOn(t, p, byID(PkgLauncher+":id/icon", "Settings"))
		}, false},
		{"toggle_wifi", func(t testing.TB, p *Phone) Effect {
			return tapOn(t, p, byID(PkgSettings+":id/switch_widget"))
		}, true},
		{"scroll_settings", func(t testing.TB, p *Phone) Effect { return must(t)(p.Swipe(540, 1900, 540, 700, 300)) }, true},
		{"open_notes", func(t testing.TB, p *Phone) Effect { return must(t)(p.OpenApp(PkgNotes)) }, false},
		{"focus_note_field", func(t testing.TB, p *Phone) Effect { return tapOn(t, p, byID(PkgNotes+":id/input")) }, false},
		{"type_note", func(t testing.TB, p *Phone) Effect { return must(t)(p.TypeText("héllo 世界 🙂")) }, true},
		{"save_note", func(t testing.TB, p *Phone) Effect { return tapOn(t, p, byID(PkgNotes+":id/save")) }, true},
		{"back", func(t testing.TB, p *Phone) Effect { return must(t)(p.PressKey("BACK")) }, false},
		{"home", func(t testing.TB, p *Phone) Effect { return must(t)(p.PressKey("HOME")) }, false},
		{"open_browser", func(t testing.TB, p *Phone) Effect {
			return tapOn(t, p, byID(PkgLauncher+":id/icon", "Browser"))
		}, false},
		{"focus_address_bar", func(t testing.TB, p *Phone) Effect { return tapOn(t, p, byID(PkgBrowser+":id/url_bar")) }, false},
		{"type_url", func(t testing.TB, p *Phone) Effect { return must(t)(p.TypeText("example.com/news/today")) }, false},
		{"enter", func(t testing.TB, p *Phone) Effect { return must(t)(p.PressKey("ENTER")) }, true},
	}
}

type goldenStep struct {
	Step   string  `json:"step"`
	Effect Effect  `json:"effect"`
	Screen Element `json:"screen"`
}

func TestGoldenSession(t *testing.T) {
	p := newPhone(t)
	var got []goldenStep
	pngs := map[string][]byte{}
	for _, s := range session() {
		e := s.do(t, p)
		got = append(got, goldenStep{s.name, e, p.Snapshot()})
		if s.png {
			b, err := p.ScreenshotScaled(180)
			if err != nil {
				t.Fatalf("%s: ScreenshotScaled: %v", s.name, err)
			}
			pngs[s.name] = b
		}
	}
	js := goldenJSON(t, got)
	golden := filepath.Join("testdata", "session.golden.json")
	if *update {
		writeGolden(t, golden, js)
		for name, b := range pngs {
			writeGolden(t, filepath.Join("testdata", "session", name+".png"), b)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("read golden (run go test -update to create it): %v", err)
	}
	if !bytes.Equal(js, want) {
		t.Errorf("snapshots differ from %s (run go test -update if the change is intended): %s", golden, firstDiff(string(js), string(want)))
	}
	for _, s := range session() {
		if !s.png {
			continue
		}
		t.Run("png/"+s.name, func(t *testing.T) {
			path := filepath.Join("testdata", "session", s.name+".png")
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("read golden: %v", err)
			}
			gi, wi := decodePNG(t, pngs[s.name]), decodePNG(t, want)
			if gi.Bounds() != wi.Bounds() {
				t.Fatalf("got size %v; want %v", gi.Bounds(), wi.Bounds())
			}
			if !bytes.Equal(gi.Pix, wi.Pix) {
				out := filepath.Join(t.TempDir(), s.name+".png")
				os.WriteFile(out, pngs[s.name], 0o644)
				t.Errorf("pixels differ from %s; got written to %s", path, out)
			}
		})
	}
}

// goldenJSON writes the steps as JSON with one element per line, nested by
// indentation: valid JSON that stays small and reviewable in a diff.
func goldenJSON(t *testing.T, steps []goldenStep) []byte {
	t.Helper()
	var b bytes.Buffer
	compact := func(v any) []byte {
		var out bytes.Buffer
		enc := json.NewEncoder(&out)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			t.Fatal(err)
		}
		return bytes.TrimRight(out.Bytes(), "\n")
	}
	var tree func(e Element, depth int)
	tree = func(e Element, depth int) {
		kids := e.Children
		e.Children = nil
		js := compact(e)
		b.WriteString(strings.Repeat("  ", depth))
		if len(kids) == 0 {
			b.Write(js)
			return
		}
		b.Write(js[:len(js)-1])
		b.WriteString(",\"children\":[\n")
		for i, k := range kids {
			tree(k, depth+1)
			if i < len(kids)-1 {
				b.WriteString(",")
			}
			b.WriteString("\n")
		}
		b.WriteString(strings.Repeat("  ", depth) + "]}")
	}
	b.WriteString("[\n")
	for i, s := range steps {
		fmt.Fprintf(&b, "{\"step\":%s,\n \"effect\":%s,\n \"screen\":\n", compact(s.Step), compact(s.Effect))
		tree(s.Screen, 1)
		b.WriteString("}")
		if i < len(steps)-1 {
			b.WriteString(",")
		}
		b.WriteString("\n")
	}
	b.WriteString("]\n")
	var check []goldenStep
	if err := json.Unmarshal(b.Bytes(), &check); err != nil {
		t.Fatalf("golden JSON does not parse: %v", err)
	}
	return b.Bytes()
}

func writeGolden(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func decodePNG(t testing.TB, b []byte) *image.RGBA {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("decode PNG: %v", err)
	}
	if rgba, ok := img.(*image.RGBA); ok {
		return rgba
	}
	rgba := image.NewRGBA(img.Bounds())
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
			rgba.Set(x, y, img.At(x, y))
		}
	}
	return rgba
}

func firstDiff(got, want string) string {
	gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(gl) || i < len(wl); i++ {
		var g, w string
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if g != w {
			return fmt.Sprintf("line %d: got %q; want %q", i+1, g, w)
		}
	}
	return "no line differs"
}

// TestDeterminism runs the session on two phones and requires equal bytes
// at every step: screenshots, snapshots, hashes and saved state. A third
// phone restored from the first one's state halfway must continue
// identically.
func TestDeterminism(t *testing.T) {
	a, b := newPhone(t), newPhone(t)
	var c *Phone
	steps := session()
	for i, s := range steps {
		ea, eb := s.do(t, a), s.do(t, b)
		if c != nil {
			ec := s.do(t, c)
			if ec != ea {
				t.Errorf("%s: restored phone effect %+v; want %+v", s.name, ec, ea)
			}
		}
		if ea != eb {
			t.Errorf("%s: effects differ: %+v vs %+v", s.name, ea, eb)
		}
		if got := a.ScreenHash(); ea.ScreenHash != got {
			t.Errorf("%s: effect reports screen hash %s; ScreenHash says %s", s.name, ea.ScreenHash, got)
		}
		pa, err := a.Screenshot()
		if err != nil {
			t.Fatal(err)
		}
		pb, err := b.Screenshot()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(pa, pb) {
			t.Errorf("%s: screenshots differ (%d vs %d bytes)", s.name, len(pa), len(pb))
		}
		ja, _ := json.Marshal(a.Snapshot())
		jb, _ := json.Marshal(b.Snapshot())
		if !bytes.Equal(ja, jb) {
			t.Errorf("%s: snapshots differ", s.name)
		}
		sa, _ := a.State()
		sb, _ := b.State()
		if !bytes.Equal(sa, sb) {
			t.Errorf("%s: states differ", s.name)
		}
		if c != nil {
			pc, err := c.Screenshot()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(pa, pc) {
				t.Errorf("%s: restored phone's screenshot differs", s.name)
			}
		}
		if i == len(steps)/2 {
			c = clone(t, a)
		}
	}
}
