package sim

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash/fnv"
	"image"
	"image/color"
	"strconv"
	"strings"
)

// Bounds is a rectangle in screen pixels: [left, top, right, bottom], right
// and bottom exclusive, as Android's UI dumps write them.
type Bounds [4]int

// Center returns the pixel at the middle of the bounds, the point a client
// taps to hit the element.
func (b Bounds) Center() (x, y int) { return (b[0] + b[2]) / 2, (b[1] + b[3]) / 2 }

// Contains reports whether the pixel (x, y) lies inside the bounds.
func (b Bounds) Contains(x, y int) bool { return x >= b[0] && x < b[2] && y >= b[1] && y < b[3] }

// Empty reports whether the bounds enclose no pixel.
func (b Bounds) Empty() bool { return b[0] >= b[2] || b[1] >= b[3] }

func boundsOf(r image.Rectangle) Bounds { return Bounds{r.Min.X, r.Min.Y, r.Max.X, r.Max.Y} }

// Element is one node of the accessibility-style tree Snapshot returns. Its
// bounds are the part of the element visible on screen (clipped by scrolling
// containers), exactly where the screenshot draws it, so tapping the centre
// of a clickable element's bounds activates that element.
type Element struct {
	// Ref is a stable reference to the element, derived from its path in
	// the tree (resource ids, item keys, sibling positions), so the same
	// element keeps its Ref while content around it changes or scrolls.
	Ref string `json:"ref"`
	// Class is the Android widget class, e.g. "android.widget.Button".
	Class string `json:"class"`
	// Package is the app (or system component) the element belongs to.
	Package string `json:"package,omitempty"`
	// ResourceID is the Android view id, e.g. "com.android.settings:id/title".
	ResourceID string `json:"resourceId,omitempty"`
	// Text is the text the element shows (for an EditText, its content).
	Text string `json:"text,omitempty"`
	// Hint is the placeholder an empty EditText shows.
	Hint string `json:"hint,omitempty"`
	// ContentDesc is the accessibility label of a non-text element.
	ContentDesc string `json:"contentDesc,omitempty"`
	// Bounds is the visible rectangle in screen pixels.
	Bounds Bounds `json:"bounds"`
	// Clickable reports that a tap activates the element.
	Clickable bool `json:"clickable,omitempty"`
	// LongClickable reports that a long press has its own action.
	LongClickable bool `json:"longClickable,omitempty"`
	// Focusable reports that the element can take text focus.
	Focusable bool `json:"focusable,omitempty"`
	// Focused reports that typed text goes to this element.
	Focused bool `json:"focused,omitempty"`
	// Enabled reports that the element reacts to input.
	Enabled bool `json:"enabled"`
	// Checkable reports a two-state element such as a Switch.
	Checkable bool `json:"checkable,omitempty"`
	// Checked is the state of a checkable element.
	Checked bool `json:"checked,omitempty"`
	// Scrollable reports that a vertical swipe on the element scrolls it.
	Scrollable bool `json:"scrollable,omitempty"`
	// Password marks a field whose text is hidden (uiautomator's password
	// attribute).
	Password bool `json:"password,omitempty"`
	// Children are the element's visible children in drawing order.
	Children []Element `json:"children,omitempty"`
}

// Walk calls fn for e and every descendant, depth first in drawing order,
// and stops early when fn returns false.
func (e Element) Walk(fn func(Element) bool) bool {
	if !fn(e) {
		return false
	}
	for _, c := range e.Children {
		if !c.Walk(fn) {
			return false
		}
	}
	return true
}

// Find returns the first element in e's subtree (e included, depth first)
// for which match returns true.
func (e Element) Find(match func(Element) bool) (Element, bool) {
	var found Element
	ok := false
	e.Walk(func(x Element) bool {
		if match(x) {
			found, ok = x, true
			return false
		}
		return true
	})
	return found, ok
}

type iconKind string

const (
	iconBack     iconKind = "back"
	iconHome     iconKind = "home"
	iconRecents  iconKind = "recents"
	iconWifi     iconKind = "wifi"
	iconAirplane iconKind = "airplane"
	iconBattery  iconKind = "battery"
	iconAppIcon  iconKind = "appicon"
	iconBadge    iconKind = "badge"
	iconSwitch   iconKind = "switch"
	iconVolume   iconKind = "volume"
)

type hAlign uint8

const (
	alignLeft hAlign = iota
	alignCenter
	alignRight
)

type vAlign uint8

const (
	vCenter vAlign = iota
	vTop
	vBottom
)

// textBox is the text a node draws: lines already wrapped at layout time, so
// the bounds computed during layout are the bounds drawn.
type textBox struct {
	lines     []string
	face      faceKey
	col       color.RGBA
	align     hAlign
	valign    vAlign
	padX      int
	padY      int
	lineH     int
	underline bool
	cursor    bool
	cursorCol color.RGBA
	selCol    color.RGBA // selection highlight behind the text when A > 0
}

// node is one element of the screen during layout: the accessibility
// element plus how to draw it and what input does to it. The tree is
// rebuilt from the phone's state for every input and every observation, so
// the snapshot, the pixels and the hit testing always agree.
type node struct {
	el     Element
	key    string // stable identity among siblings, for Ref
	parent *node
	rect   image.Rectangle // layout rectangle, before clipping
	kids   []*node

	fill, fill2, fill3, stroke, iconCol color.RGBA
	strokeW, radius                     int
	square                              uint8 // corners left square despite radius
	icon                                iconKind
	level, iconSize, iconTop            int
	badge                               string
	txt                                 *textBox

	clips       bool // children are clipped to rect (scrolling containers)
	passThrough bool // touches go to what lies beneath (toasts, overlays)
	absorb      bool // touches stop here even without a handler (dialogs)

	onTap    func() (string, error)
	onLong   func() (string, error)
	onScroll func(dy int) string // dy > 0 scrolls the content up (towards its end)
}

func (n *node) add(kids ...*node) *node {
	for _, k := range kids {
		if k != nil {
			n.kids = append(n.kids, k)
		}
	}
	return n
}

// refSpace bounds refs to at most five base-36 digits: short enough for a
// client to quote cheaply, wide enough that two elements of one screen
// rarely share a hash (a clash gets a deterministic suffix).
const refSpace = 36 * 36 * 36 * 36 * 36

// finalize computes visible bounds, drops invisible nodes, links parents,
// derives the interaction flags from the handlers and assigns refs.
func finalize(root *node, screen image.Rectangle) {
	seen := map[string]int{}
	var walk func(n, parent *node, clip image.Rectangle, path string)
	walk = func(n, parent *node, clip image.Rectangle, path string) {
		n.parent = parent
		n.el.Bounds = boundsOf(n.rect.Intersect(clip))
		n.el.Clickable = n.onTap != nil
		n.el.LongClickable = n.onLong != nil
		n.el.Scrollable = n.onScroll != nil
		sum := fnv.New32a()
		sum.Write([]byte(path))
		ref := "e" + strconv.FormatUint(uint64(sum.Sum32()%refSpace), 36)
		if c := seen[ref]; c > 0 {
			seen[ref] = c + 1
			ref += "_" + strconv.Itoa(c+1)
		} else {
			seen[ref] = 1
		}
		n.el.Ref = ref
		inner := clip
		if n.clips {
			inner = clip.Intersect(n.rect)
		}
		counts := map[string]int{}
		kept := n.kids[:0]
		for _, k := range n.kids {
			if k.rect.Intersect(inner).Empty() {
				continue
			}
			seg := k.key
			if seg == "" {
				base := k.el.ResourceID
				if base == "" {
					base = k.el.Class[strings.LastIndex(k.el.Class, ".")+1:]
				}
				seg = base + "#" + strconv.Itoa(counts[base])
				counts[base]++
			}
			kept = append(kept, k)
			walk(k, n, inner, path+"/"+seg)
		}
		n.kids = kept
	}
	walk(root, nil, screen, "root")
}

// element converts the finished tree to the exported Element tree, all
// the elements below n in one allocation (each picture builds one).
func (n *node) element() Element {
	below := 0
	var count func(n *node)
	count = func(n *node) {
		below += len(n.kids)
		for _, k := range n.kids {
			count(k)
		}
	}
	count(n)
	slab := make([]Element, below)
	var fill func(dst *Element, n *node)
	fill = func(dst *Element, n *node) {
		*dst = n.el
		dst.Children = nil
		if k := len(n.kids); k > 0 {
			// Capped, so that appending to one element's children never
			// writes over another's.
			dst.Children, slab = slab[:k:k], slab[k:]
			for i, kid := range n.kids {
				fill(&dst.Children[i], kid)
			}
		}
	}
	var e Element
	fill(&e, n)
	return e
}

// find returns the node with the given ref.
func (n *node) find(ref string) *node {
	if n.el.Ref == ref {
		return n
	}
	for _, k := range n.kids {
		if f := k.find(ref); f != nil {
			return f
		}
	}
	return nil
}

// deepest returns the innermost node under (x, y), honouring drawing order
// (later siblings are on top) and skipping pass-through overlays.
func (n *node) deepest(x, y int) *node {
	if !n.el.Bounds.Contains(x, y) {
		return nil
	}
	for i := len(n.kids) - 1; i >= 0; i-- {
		k := n.kids[i]
		if k.passThrough {
			continue
		}
		if d := k.deepest(x, y); d != nil {
			return d
		}
	}
	return n
}

// target finds the node that receives a gesture at (x, y): the innermost
// node that wants it, stopping at nodes that absorb touches.
func (n *node) target(x, y int, wants func(*node) bool) *node {
	for t := n.deepest(x, y); t != nil; t = t.parent {
		if wants(t) {
			return t
		}
		if t.absorb {
			return nil
		}
	}
	return nil
}

// hashTree digests everything the renderer reads, so two trees with the
// same hash draw the same pixels.
func hashTree(root *node) string {
	h := sha256.New()
	var b []byte
	str := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	num := func(v int) { b = binary.AppendVarint(b, int64(v)) }
	col := func(c color.RGBA) { b = append(b, c.R, c.G, c.B, c.A) }
	flag := func(v bool) {
		if v {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
	}
	var walk func(n *node)
	walk = func(n *node) {
		e := n.el
		str(e.Ref)
		str(e.Class)
		str(e.Package)
		str(e.ResourceID)
		str(e.Text)
		str(e.Hint)
		str(e.ContentDesc)
		for _, v := range e.Bounds {
			num(v)
		}
		for _, v := range []bool{e.Clickable, e.LongClickable, e.Focusable, e.Focused, e.Enabled, e.Checkable, e.Checked, e.Scrollable, n.clips, n.passThrough, n.absorb} {
			flag(v)
		}
		for _, v := range []int{n.rect.Min.X, n.rect.Min.Y, n.rect.Max.X, n.rect.Max.Y, n.strokeW, n.radius, n.level, n.iconSize, n.iconTop} {
			num(v)
		}
		for _, c := range []color.RGBA{n.fill, n.fill2, n.fill3, n.stroke, n.iconCol} {
			col(c)
		}
		str(string(n.icon))
		str(n.badge)
		num(int(n.square))
		if t := n.txt; t != nil {
			b = append(b, 1)
			num(len(t.lines))
			for _, l := range t.lines {
				str(l)
			}
			for _, v := range []int{int(t.face.font), t.face.size, int(t.align), int(t.valign), t.padX, t.padY, t.lineH} {
				num(v)
			}
			col(t.col)
			col(t.cursorCol)
			col(t.selCol)
			flag(t.underline)
			flag(t.cursor)
		} else {
			b = append(b, 0)
		}
		num(len(n.kids))
		h.Write(b)
		b = b[:0]
		for _, k := range n.kids {
			walk(k)
		}
	}
	walk(root)
	return hex.EncodeToString(h.Sum(nil)[:16])
}
