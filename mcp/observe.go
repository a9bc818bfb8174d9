package mcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"phonefleet/commands"
	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/http/kernel"
)

// maxElements bounds the elements one observation returns; the rest are
// counted in elementsOmitted.
const maxElements = 300

// observeOptions say what an observation (or a frame read) returns.
type observeOptions struct {
	MaxWidth     int    `json:"maxWidth"`
	Screenshot   *bool  `json:"screenshot"`
	Elements     string `json:"elements"`
	OnScreenOnly *bool  `json:"onScreenOnly"`
}

func (o observeOptions) image() bool    { return o.Screenshot == nil || *o.Screenshot }
func (o observeOptions) snapshot() bool { return o.Elements != "none" }
func (o observeOptions) onScreen() bool { return o.OnScreenOnly == nil || *o.OnScreenOnly }

// observeProps are the option properties observe and get_frame share.
var observeProps = []prop{{"screenshot", sShot}, {"maxWidth", sMaxW}, {"elements", sElements}, {"onScreenOnly", sOnScreen}}

// screen is what observe and get_frame answer beside the image.
type screen struct {
	DeviceID   string    `json:"deviceId"`
	FrameID    string    `json:"frameId"`
	ScreenHash string    `json:"screenHash"`
	CapturedAt time.Time `json:"capturedAt"`
	// Width and Height are the screen in device pixels: the coordinate
	// space of every action and of element bounds.
	Width    int   `json:"width"`
	Height   int   `json:"height"`
	ScreenOn *bool `json:"screenOn,omitempty"`
	// Image is the size of the attached screenshot, when it differs from
	// the screen (maxWidth).
	Image *imageSize `json:"image,omitempty"`
	// App is the package of the window in front.
	App             string    `json:"app,omitempty"`
	Elements        []element `json:"elements,omitempty"`
	ElementsOmitted int       `json:"elementsOmitted,omitempty"`
	// Marks maps each numbered box of a set-of-marks picture to its
	// element's ref.
	Marks []domain.Mark `json:"marks,omitempty"`
}

type imageSize struct {
	Width  int `json:"width"`
	Height int `json:"height"`
	// Scale is device pixels per image pixel: multiply a point read off the
	// image by it to get the coordinate to send.
	Scale float64 `json:"scale"`
}

// element is one UI element, compacted for an agent: the short class and
// resource id, the texts, the bounds in device pixels, and only the flags
// that are set.
type element struct {
	Ref   string `json:"ref"`
	Class string `json:"class,omitempty"`
	ID    string `json:"id,omitempty"`
	Text  string `json:"text,omitempty"`
	Hint  string `json:"hint,omitempty"`
	Desc  string `json:"desc,omitempty"`
	// Label is, for an element with no text or description of its own
	// (a clickable row), what its content says: the texts of the
	// descendants no input acts on, joined with " · ".
	Label         string `json:"label,omitempty"`
	Bounds        [4]int `json:"bounds"`
	Clickable     bool   `json:"clickable,omitempty"`
	LongClickable bool   `json:"longClickable,omitempty"`
	Editable      bool   `json:"editable,omitempty"`
	Focusable     bool   `json:"focusable,omitempty"`
	Focused       bool   `json:"focused,omitempty"`
	Checkable     bool   `json:"checkable,omitempty"`
	Checked       bool   `json:"checked,omitempty"`
	Scrollable    bool   `json:"scrollable,omitempty"`
	Disabled      bool   `json:"disabled,omitempty"`
	// Mark is the number of the element's box on a set-of-marks picture.
	Mark int `json:"mark,omitempty"`
}

// interactive reports whether an input acts on e.
func interactive(e domain.UIElement) bool {
	return e.Clickable || e.LongClickable || e.Focusable || e.Checkable || e.Scrollable
}

// compactElements flattens a UI snapshot (a domain.UIElement tree as JSON)
// depth first, in drawing order, keeping per mode: "all" every element
// with text, a hint, a description or an action (pure layout containers
// dropped); "interactive" only those an input acts on. With onScreen, an
// element whose bounds are empty or outside the w×h screen is dropped too.
// It returns the root's package, at most max elements and how many more
// there were, and those elements as JSON.
func compactElements(snapshot json.RawMessage, mode string, onScreen bool, w, h, max int) (compacted, error) {
	if len(snapshot) == 0 || mode == "none" {
		return compacted{json: []byte("null")}, nil
	}
	var root domain.UIElement
	if err := json.Unmarshal(snapshot, &root); err != nil {
		return compacted{}, err
	}
	out := []element{}
	omitted := 0
	var walk func(e domain.UIElement)
	walk = func(e domain.UIElement) {
		keep := interactive(e) || mode != "interactive" && (e.Text != "" || e.Hint != "" || e.ContentDesc != "")
		if keep && onScreen && !visible(e.Bounds, w, h) {
			keep = false
		}
		if keep {
			if len(out) < max {
				out = append(out, compact(e))
			} else {
				omitted++
			}
		}
		for _, c := range e.Children {
			walk(c)
		}
	}
	walk(root)
	b, err := json.Marshal(out)
	if err != nil {
		return compacted{}, err
	}
	return compacted{app: root.Package, elements: out, omitted: omitted, json: b}, nil
}

// compacted is what compactElements answers.
type compacted struct {
	app      string
	elements []element
	omitted  int
	// json is elements as json.Marshal writes them, so an answer that
	// carries the list unchanged (no marks) writes it without encoding it
	// again (screenJSON).
	json []byte
}

// elementCache remembers the last few compactions: an agent observes the
// same screen again and again (before each action, after a stale_frame),
// and the UI snapshot of an unchanged screen is the same bytes, so its
// element list is answered without decoding the tree again. An entry is
// used only when the snapshot bytes and every option are equal, so the
// answer is exactly what compactElements would return. The cached slices
// are shared and must only be read.
type elementCache struct {
	mu      sync.Mutex
	entries [elementCacheSize]*compaction
	next    int
}

// elementCacheSize is how many compactions are remembered (a few devices
// observed in turn); at most that many snapshots are held.
const elementCacheSize = 8

// maxCachedSnapshot bounds the snapshots remembered, in bytes; a larger
// one is compacted every time.
const maxCachedSnapshot = 1 << 20

// compaction is one remembered compactElements call and its answer.
type compaction struct {
	snapshot  []byte
	mode      string
	onScreen  bool
	w, h, max int
	compacted
}

// compact is compactElements, answered from the cache when it can be.
func (c *elementCache) compact(snapshot json.RawMessage, mode string, onScreen bool, w, h, max int) (compacted, error) {
	if len(snapshot) == 0 || mode == "none" || len(snapshot) > maxCachedSnapshot {
		return compactElements(snapshot, mode, onScreen, w, h, max)
	}
	c.mu.Lock()
	for _, e := range c.entries {
		if e != nil && e.mode == mode && e.onScreen == onScreen && e.w == w && e.h == h && e.max == max && bytes.Equal(e.snapshot, snapshot) {
			c.mu.Unlock()
			return e.compacted, nil
		}
	}
	c.mu.Unlock()
	out, err := compactElements(snapshot, mode, onScreen, w, h, max)
	if err != nil {
		return out, err
	}
	e := &compaction{snapshot: bytes.Clone(snapshot), mode: mode, onScreen: onScreen, w: w, h: h, max: max, compacted: out}
	c.mu.Lock()
	c.entries[c.next] = e
	c.next = (c.next + 1) % elementCacheSize
	c.mu.Unlock()
	return out, nil
}

// visible reports whether bounds enclose a pixel of the w×h screen (w or h
// 0: the screen size is unknown, and any non-empty bounds count).
func visible(b [4]int, w, h int) bool {
	if b[0] >= b[2] || b[1] >= b[3] {
		return false
	}
	if w <= 0 || h <= 0 {
		return true
	}
	return b[2] > 0 && b[3] > 0 && b[0] < w && b[1] < h
}

func compact(e domain.UIElement) element {
	c := element{Ref: e.Ref, Class: e.Class, ID: e.ResourceID, Text: e.Text, Hint: e.Hint, Desc: e.ContentDesc, Bounds: e.Bounds,
		Clickable: e.Clickable, LongClickable: e.LongClickable, Editable: e.Focusable && isEditText(e.Class), Focused: e.Focused,
		Checkable: e.Checkable, Checked: e.Checked, Scrollable: e.Scrollable, Disabled: !e.Enabled}
	if i := strings.LastIndexByte(c.Class, '.'); i >= 0 {
		c.Class = c.Class[i+1:]
	}
	if _, id, ok := strings.Cut(c.ID, ":id/"); ok {
		c.ID = id
	}
	if c.Desc == c.Text {
		c.Desc = ""
	}
	if e.Text == "" && e.ContentDesc == "" && interactive(e) {
		c.Label = label(e)
	}
	c.Focusable = e.Focusable && !c.Editable
	return c
}

// maxLabel bounds a derived label, in bytes.
const maxLabel = 120

// label joins the texts (or descriptions) of e's descendants that no input
// acts on, depth first, as a screen reader announces a clickable row.
func label(e domain.UIElement) string {
	var parts []string
	n := 0
	var walk func(c domain.UIElement)
	walk = func(c domain.UIElement) {
		if n >= maxLabel {
			return
		}
		if !interactive(c) {
			t := c.Text
			if t == "" {
				t = c.ContentDesc
			}
			if t != "" {
				parts = append(parts, t)
				n += len(t) + 3
			}
		}
		for _, k := range c.Children {
			if !interactive(k) {
				walk(k)
			}
		}
	}
	for _, k := range e.Children {
		if !interactive(k) {
			walk(k)
		}
	}
	out := strings.Join(parts, " · ")
	if len(out) > maxLabel {
		cut := maxLabel
		for cut > 0 && !utf8.RuneStart(out[cut]) {
			cut--
		}
		out = out[:cut] + "…"
	}
	return out
}

func isEditText(class string) bool {
	return strings.HasSuffix(class, "EditText") || strings.HasSuffix(class, "AutoCompleteTextView")
}

// pngSize reads a PNG's width and height from its header.
func pngSize(b []byte) (int, int, bool) {
	if len(b) < 24 || string(b[1:4]) != "PNG" || string(b[12:16]) != "IHDR" {
		return 0, 0, false
	}
	return int(binary.BigEndian.Uint32(b[16:20])), int(binary.BigEndian.Uint32(b[20:24])), true
}

// picture is an image an answer attaches.
type picture struct {
	data          []byte
	mimeType      string
	width, height int
}

// pngPicture is a PNG as a picture, its size read from its header.
func pngPicture(png []byte) picture {
	w, h, _ := pngSize(png)
	return picture{data: png, mimeType: "image/png", width: w, height: h}
}

// render builds the observe / get_frame answer.
func (s *Server) render(ctx context.Context, sc screen, pic picture, snapshot json.RawMessage, o observeOptions) (*mcpgo.CallToolResult, error) {
	if pic.data != nil && pic.width != sc.Width && pic.width > 0 {
		sc.Image = &imageSize{Width: pic.width, Height: pic.height, Scale: float64(int(float64(sc.Width)/float64(pic.width)*1000)) / 1000}
	}
	if o.snapshot() {
		mode := o.Elements
		if mode == "" {
			mode = "all"
		}
		c, err := s.elements.compact(snapshot, mode, o.onScreen(), sc.Width, sc.Height, maxElements)
		if err != nil {
			return nil, domain.Errorf(domain.CodeInternal, "the UI snapshot could not be read").Wrap(err)
		}
		sc.App, sc.Elements, sc.ElementsOmitted = c.app, c.elements, c.omitted
		if len(sc.Marks) == 0 {
			b, err := screenJSON(sc, c.json)
			if err != nil {
				return nil, err
			}
			return imageResultOf(ctx, pic.data, pic.mimeType, b)
		}
		// The cached list is shared: number a copy.
		sc.Elements = append([]element(nil), sc.Elements...)
		number := make(map[string]int, len(sc.Marks))
		for _, m := range sc.Marks {
			number[m.Ref] = m.N
		}
		for i := range sc.Elements {
			sc.Elements[i].Mark = number[sc.Elements[i].Ref]
		}
	}
	b, err := json.Marshal(sc)
	if err != nil {
		return nil, err
	}
	return imageResultOf(ctx, pic.data, pic.mimeType, b)
}

// screenJSON is json.Marshal(sc) for a screen without marks whose
// elements encode as elementsJSON: the list (the screen's last member but
// one) is written as it was encoded when it was compacted, not encoded
// again (kernel.AppendMember), so a screen observed again costs the
// marshalling of its few other members only (TestScreenJSONIsMarshal).
func screenJSON(sc screen, elementsJSON []byte) ([]byte, error) {
	els, omitted := sc.Elements, sc.ElementsOmitted
	sc.Elements, sc.ElementsOmitted = nil, 0
	b, err := json.Marshal(sc)
	if err == nil && len(els) > 0 {
		b, err = kernel.AppendMember(b, "elements", elementsJSON)
	}
	if err == nil && omitted != 0 {
		b, err = kernel.AppendMember(b, "elementsOmitted", strconv.AppendInt(nil, int64(omitted), 10))
	}
	return b, err
}

type observeArgs struct {
	DeviceID string `json:"deviceId"`
	LeaseID  string `json:"leaseId"`
	// The observation budget beyond observeOptions: the picture's
	// encoding and quality, and set-of-marks.
	Format  string `json:"format"`
	Quality int    `json:"quality"`
	Marks   bool   `json:"marks"`
	observeOptions
}

func (s *Server) observeTool() *tool {
	props := append([]prop{{"deviceId", sDeviceID}, {"leaseId", `{"type":"string","pattern":"^lse_[0-9a-f]{32}$","description":"Optional: your lease, checked to be in force. Observing needs no lease."}`}}, observeProps...)
	props = append(props, prop{"format", sFormat}, prop{"quality", sQuality}, prop{"marks", sMarks})
	t := newTool("observe", "Observe the screen",
		"Screenshot, UI elements (ref, bounds) and frameId; maxWidth, jpeg, elements, screenshot=false cost less.",
		object([]string{"deviceId"}, props...),
		hints{readOnly: true}, domain.ScopeDevicesRead)
	t.run = run(s, func(ctx context.Context, app *commands.Application, a domain.Auth, args observeArgs) (*mcpgo.CallToolResult, error) {
		cmd := fleet.ObserveDevice{Auth: a, DeviceID: args.DeviceID, Image: args.image(), MaxWidth: args.MaxWidth,
			Format: args.Format, Quality: args.Quality, Snapshot: args.snapshot(), LeaseID: args.LeaseID}
		if args.Marks {
			if !args.image() {
				return nil, domain.Errorf(domain.CodeInvalidArgument, "marks are drawn on the screenshot; leave screenshot on")
			}
			cmd.Marks, cmd.Elements, cmd.Snapshot = true, args.Elements, true
			if cmd.Elements == "" {
				cmd.Elements = "interactive"
			}
		}
		obs, err := app.Fleet.ObserveDevice.Handle(ctx, cmd)
		if err != nil {
			return nil, err
		}
		on := obs.ScreenOn
		sc := screen{DeviceID: obs.DeviceID, FrameID: obs.Frame.FrameID, ScreenHash: obs.Frame.ScreenHash, CapturedAt: obs.Frame.CapturedAt,
			Width: obs.Width, Height: obs.Height, ScreenOn: &on, Marks: obs.Marks}
		opts := args.observeOptions
		if args.Marks && opts.Elements == "" {
			opts.Elements = "interactive"
		}
		var pic picture
		if obs.Image != nil {
			pic = picture{data: obs.Image, mimeType: obs.ContentType, width: obs.ImageWidth, height: obs.ImageHeight}
		}
		return s.render(ctx, sc, pic, obs.Snapshot, opts)
	})
	return t
}

type frameArgs struct {
	FrameID string `json:"frameId"`
	observeOptions
}

func (s *Server) getFrameTool() *tool {
	props := append([]prop{{"frameId", sFrameID}}, observeProps...)
	t := newTool("get_frame", "Get a stored frame",
		"A stored frame (an earlier observe, a receipt's before or after).",
		object([]string{"frameId"}, props...),
		hints{readOnly: true}, domain.ScopeDevicesRead)
	t.run = run(s, func(ctx context.Context, app *commands.Application, a domain.Auth, args frameArgs) (*mcpgo.CallToolResult, error) {
		fr, err := app.Fleet.GetFrame.Handle(ctx, fleet.GetFrame{Auth: a, FrameID: args.FrameID, FrameOptions: fleet.FrameOptions{Image: args.image(), Snapshot: args.snapshot(), MaxWidth: args.MaxWidth}})
		if err != nil {
			return nil, err
		}
		sc := screen{DeviceID: fr.DeviceID, FrameID: fr.FrameID, ScreenHash: fr.ScreenHash, CapturedAt: fr.CapturedAt,
			Width: fr.Width, Height: fr.Height}
		var pic picture
		if args.image() && fr.PNG != nil {
			pic = pngPicture(fr.PNG)
		}
		return s.render(ctx, sc, pic, fr.Snapshot, args.observeOptions)
	})
	return t
}
