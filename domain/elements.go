package domain

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// What an observation may ask for besides the picture's format
// (ImagePNG, ImageJPEG): no picture, the element list's extent, and the
// widest picture.
const (
	ImageNone = "none"

	ElementsAll         = "all"
	ElementsInteractive = "interactive"
	ElementsNone        = "none"

	MaxObserveWidth = 4096
)

// Element is one element of the screen in compact form: its ref (what
// an action's arguments may name), class (short), text, resource id and
// bounds in screen pixels [left, top, right, bottom].
type Element struct {
	Ref        string `json:"ref"`
	Class      string `json:"class,omitempty"`
	Text       string `json:"text,omitempty"`
	ID         string `json:"id,omitempty"`
	Desc       string `json:"desc,omitempty"`
	Package    string `json:"package,omitempty"`
	Bounds     [4]int `json:"bounds"`
	Clickable  bool   `json:"clickable,omitempty"`
	Editable   bool   `json:"editable,omitempty"`
	Scrollable bool   `json:"scrollable,omitempty"`
}

// CompactElements flattens a UI tree into the elements worth naming:
// with interactiveOnly, those a person could tap, type into or scroll;
// otherwise also those showing text. Bare containers are left out.
func CompactElements(root UIElement, interactiveOnly bool) []Element {
	var out []Element
	var walk func(e UIElement)
	walk = func(e UIElement) {
		editable := strings.Contains(e.Class, "EditText")
		interactive := e.Clickable || e.LongClickable || e.Scrollable || editable || e.Checkable
		if interactive || !interactiveOnly && (e.Text != "" || e.ContentDesc != "") {
			cls := e.Class
			if i := strings.LastIndexByte(cls, '.'); i >= 0 {
				cls = cls[i+1:]
			}
			out = append(out, Element{Ref: e.Ref, Class: cls, Text: firstNonEmpty(e.Text, e.Hint), ID: e.ResourceID,
				Desc: e.ContentDesc, Package: e.Package, Bounds: e.Bounds, Clickable: e.Clickable || e.LongClickable,
				Editable: editable, Scrollable: e.Scrollable})
		}
		for _, c := range e.Children {
			walk(c)
		}
	}
	walk(root)
	return out
}

// systemUIPackage owns the status and navigation bars, whose clock and
// battery differ from phone to phone.
const systemUIPackage = "com.android.systemui"

// LayoutSignature is a digest of what a screen shows outside the system
// bars: each element's class, id, text, description, state and bounds, in
// tree order. Two phones of one model showing the same screen have the same
// signature, whatever their clocks and batteries say; a replayed script
// compares it (a frame's screen hash covers every pixel and differs).
func LayoutSignature(root UIElement) string { return layoutDigest(root, false) }

// layoutDigest is LayoutSignature, with each element's focus too when
// focus is set (an effect's evidence: focusing a field is an effect).
func layoutDigest(root UIElement, focus bool) string {
	h := sha256.New()
	var walk func(e UIElement)
	walk = func(e UIElement) {
		if e.Package == systemUIPackage {
			return
		}
		fmt.Fprintf(h, "%s\x1f%s\x1f%s\x1f%s\x1f%t\x1f%t\x1f%d,%d,%d,%d", e.Class, e.ResourceID, e.Text, e.ContentDesc,
			e.Checked, e.Enabled, e.Bounds[0], e.Bounds[1], e.Bounds[2], e.Bounds[3])
		if focus {
			fmt.Fprintf(h, "\x1f%t", e.Focused)
		}
		h.Write([]byte{0x1e})
		for _, c := range e.Children {
			walk(c)
		}
	}
	walk(root)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// EvaluateSuccessCheck reports whether every part of c holds on the
// screen whose UI tree is root (frameID names it in why).
func EvaluateSuccessCheck(c SuccessCheck, root UIElement, frameID string) (ok bool, why string, err error) {
	var text, id, app bool
	var walk func(e UIElement)
	walk = func(e UIElement) {
		if c.Text != "" && (strings.Contains(e.Text, c.Text) || strings.Contains(e.ContentDesc, c.Text)) {
			text = true
		}
		if c.ElementID != "" && (e.ResourceID == c.ElementID || strings.HasSuffix(e.ResourceID, ":id/"+c.ElementID)) {
			id = true
		}
		for _, ch := range e.Children {
			walk(ch)
		}
	}
	walk(root)
	// The app in front is the package of the screen's root element.
	app = c.App != "" && root.Package == c.App
	var missing []string
	if c.Text != "" && !text {
		missing = append(missing, fmt.Sprintf("no element shows text %q", c.Text))
	}
	if c.ElementID != "" && !id {
		missing = append(missing, fmt.Sprintf("no element has id %q", c.ElementID))
	}
	if c.App != "" && !app {
		missing = append(missing, fmt.Sprintf("app %q is not in front (%q is)", c.App, root.Package))
	}
	if len(missing) > 0 {
		return false, "successCheck failed on frame " + frameID + ": " + strings.Join(missing, "; "), nil
	}
	return true, "", nil
}
