package sim

import (
	"encoding/xml"
	"errors"
	"strconv"
	"strings"
	"testing"
)

func TestUIAutomatorXML(t *testing.T) {
	p := newPhone(t)
	must(t)(p.OpenApp(PkgNotes))
	tapOn(t, p, byID("com.example.notes:id/input"))
	must(t)(p.TypeText(`<a & "b"> 你好`))
	out := string(UIAutomatorXML(p.Snapshot()))
	if !strings.HasPrefix(out, `<?xml version='1.0' encoding='UTF-8' standalone='yes' ?><hierarchy rotation="0"><node index="0" text="" resource-id="" class="android.widget.FrameLayout"`) {
		t.Fatalf("head = %.160s", out)
	}
	type node struct {
		Index  int    `xml:"index,attr"`
		Text   string `xml:"text,attr"`
		ID     string `xml:"resource-id,attr"`
		Hint   string `xml:"hint,attr"`
		Bounds string `xml:"bounds,attr"`
		Nodes  []node `xml:"node"`
	}
	var h struct {
		Root node `xml:"node"`
	}
	if err := xml.Unmarshal([]byte(out), &h); err != nil {
		t.Fatalf("does not parse: %v", err)
	}
	var field *node
	var walk func(n *node)
	walk = func(n *node) {
		if n.ID == "com.example.notes:id/input" {
			field = n
		}
		for i := range n.Nodes {
			walk(&n.Nodes[i])
		}
	}
	walk(&h.Root)
	el := find(t, p, byID("com.example.notes:id/input"))
	if field == nil || field.Text != `<a & "b"> 你好` || field.Bounds != "[40,308][766,458]" ||
		field.Bounds != "["+strconv.Itoa(el.Bounds[0])+","+strconv.Itoa(el.Bounds[1])+"]["+strconv.Itoa(el.Bounds[2])+","+strconv.Itoa(el.Bounds[3])+"]" {
		t.Fatalf("field = %+v; want the typed text unescaped and the snapshot's bounds %v", field, el.Bounds)
	}
}

func TestCatalogAPK(t *testing.T) {
	for _, a := range Catalog() {
		apk, err := CatalogAPK(a.Package)
		if err != nil {
			t.Fatal(err)
		}
		if pkg, err := ParseCatalogAPK(apk); err != nil || pkg != a.Package {
			t.Fatalf("ParseCatalogAPK(CatalogAPK(%s)) = %q, %v", a.Package, pkg, err)
		}
	}
	if _, err := CatalogAPK(PkgNotes); !errors.Is(err, ErrNotInCatalog) {
		t.Fatalf("CatalogAPK of a system app: %v; want ErrNotInCatalog", err)
	}
	if _, err := ParseCatalogAPK([]byte("PK\x03\x04 a real zip")); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("ParseCatalogAPK of a zip: %v; want ErrInvalidArgument", err)
	}
	if _, err := ParseCatalogAPK([]byte(catalogAPKMagic + "package=com.nope\n")); !errors.Is(err, ErrNotInCatalog) {
		t.Fatalf("ParseCatalogAPK of an unknown package: %v; want ErrNotInCatalog", err)
	}
}

func TestKeyCode(t *testing.T) {
	for name, want := range map[string]int{"HOME": 3, "KEYCODE_BACK": 4, "backspace": 67, "66": 66, "WAKEUP": 224} {
		if got, err := KeyCode(name); err != nil || got != want {
			t.Fatalf("KeyCode(%q) = %d, %v; want %d", name, got, err, want)
		}
	}
	if _, err := KeyCode("TAB"); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("KeyCode(TAB): %v; want ErrUnknownKey", err)
	}
}

func TestClearAppData(t *testing.T) {
	p := newPhone(t)
	must(t)(p.OpenApp(PkgNotes))
	tapOn(t, p, byID("com.example.notes:id/input"))
	must(t)(p.TypeText("keep me"))
	must(t)(p.PressKey("ENTER"))
	e := must(t)(p.ClearAppData(PkgNotes))
	if !e.Changed || p.Foreground() != PkgLauncher {
		t.Fatalf("ClearAppData: changed %v, foreground %s; want a change and the home screen", e.Changed, p.Foreground())
	}
	must(t)(p.OpenApp(PkgNotes))
	if _, ok := p.Snapshot().Find(byText("keep me")); ok {
		t.Fatalf("the note survived ClearAppData")
	}
	if _, err := p.ClearAppData(PkgCalculator); !errors.Is(err, ErrAppNotInstalled) {
		t.Fatalf("ClearAppData of an app not installed: %v; want ErrAppNotInstalled", err)
	}
	must(t)(p.ScreenOff())
	must(t)(p.ClearAppData(PkgBrowser)) // works with the screen off, as pm clear does
}
