package sim

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"sync"
	"sync/atomic"

	"phonefleet/internal/screenjpeg"
)

// PictureOptions say how Picture draws and encodes the screen.
type PictureOptions struct {
	// MaxWidth, when positive and smaller than the screen, draws the
	// picture at that width, keeping the aspect ratio (as
	// ScreenshotScaled).
	MaxWidth int
	// JPEG encodes the picture as a JPEG of Quality (1–100) instead of a
	// PNG.
	JPEG    bool
	Quality int
	// State also returns the phone's State of the screen pictured.
	State bool
}

// Mark is one numbered box of a set-of-marks picture: Label is drawn in
// the box's corner, Bounds (screen pixels) is what it frames.
type Mark struct {
	Label  string
	Bounds Bounds
}

// Picture is a screen drawn by Picture: the encoded image and its size,
// the element tree and hash of the same screen, and the marks drawn on it.
type Picture struct {
	Data       []byte
	Width      int
	Height     int
	Root       Element
	ScreenHash string
	Marks      []Mark
	// State is the phone's State when PictureOptions.State asked for it.
	State []byte
}

// markColors are the box colours of a set-of-marks picture, by mark
// number (MarkColor); saturated hues rare in the phone's own palette, so
// neighbouring boxes are told apart.
var markColors = []color.RGBA{
	{0xff, 0x00, 0x80, 0xff}, // magenta
	{0x00, 0x90, 0xff, 0xff}, // azure
	{0xff, 0x80, 0x00, 0xff}, // orange
	{0x00, 0xb0, 0x40, 0xff}, // green
	{0x90, 0x30, 0xff, 0xff}, // violet
}

// MarkColor returns the colour of the box drawn for the i-th mark (0-based)
// Picture was given.
func MarkColor(i int) color.RGBA { return markColors[i%len(markColors)] }

// MarkStroke returns the width in picture pixels of a mark's outline in a
// picture w pixels wide.
func MarkStroke(w int) int { return max(2, w/360) }

// Picture renders the screen once and, under the phone's lock, lets pick
// (when not nil) choose the marks from the element tree of that very
// screen; it draws each mark as a box outline at its bounds with its label
// on a filled tab in the box's top-left corner, in MarkColor order, after
// scaling (so boxes and labels stay sharp at any width), then encodes. The
// picture, tree and hash are always of one screen. pick must not call the
// phone. A black frame (and an empty tree) is drawn while the screen is
// off. Errors wrap ErrInvalidArgument for a negative MaxWidth or a quality
// outside 1–100.
func (p *Phone) Picture(opts PictureOptions, pick func(root Element) []Mark) (Picture, error) {
	if opts.MaxWidth < 0 {
		return Picture{}, fmt.Errorf("%w: maxWidth %d must be positive", ErrInvalidArgument, opts.MaxWidth)
	}
	if opts.JPEG && (opts.Quality < 1 || opts.Quality > 100) {
		return Picture{}, fmt.Errorf("%w: quality %d must be between 1 and 100", ErrInvalidArgument, opts.Quality)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	root, hash := p.screen()
	out := Picture{Root: root.element(), ScreenHash: hash}
	if opts.State {
		out.State = bytes.Clone(p.stateJSON())
	}
	if pick != nil {
		out.Marks = pick(out.Root)
	}
	img := p.frameOf(root, opts.MaxWidth)
	defer putFrame(img)
	drawMarks(img, out.Marks, float64(img.Rect.Dx())/float64(p.model.Width))
	var err error
	if opts.JPEG {
		out.Data, err = screenjpeg.Append(nil, img, opts.Quality)
	} else {
		out.Data, err = encodeFastPNG(img)
	}
	if err != nil {
		return Picture{}, fmt.Errorf("sim: encode picture: %w", err)
	}
	out.Width, out.Height = img.Rect.Dx(), img.Rect.Dy()
	return out, nil
}

// drawMarks draws the marks on img, whose pixels are scale times the
// screen's. Marks with empty bounds take their number but draw nothing.
func drawMarks(img *image.RGBA, marks []Mark, scale float64) {
	if len(marks) == 0 {
		return
	}
	cv := newCanvas(img, 1)
	w := img.Rect.Dx()
	stroke := MarkStroke(w)
	size := max(10, w/40)
	fk := faceKey{fontBold, size}
	ascent, descent := textEng().metrics(fk)
	pad := max(2, size/5)
	sc := func(v int) int { return int(float64(v)*scale + 0.5) }
	for i, m := range marks {
		if m.Bounds.Empty() {
			continue
		}
		c := MarkColor(i)
		r := image.Rect(sc(m.Bounds[0]), sc(m.Bounds[1]), sc(m.Bounds[2]), sc(m.Bounds[3]))
		s := min(stroke, max(1, r.Dx()/2), max(1, r.Dy()/2))
		cv.fill(image.Rect(r.Min.X, r.Min.Y, r.Max.X, r.Min.Y+s), c)
		cv.fill(image.Rect(r.Min.X, r.Max.Y-s, r.Max.X, r.Max.Y), c)
		cv.fill(image.Rect(r.Min.X, r.Min.Y, r.Min.X+s, r.Max.Y), c)
		cv.fill(image.Rect(r.Max.X-s, r.Min.Y, r.Max.X, r.Max.Y), c)
		if t := markTab(fk, m.Label, i%len(markColors)); t != nil {
			copyTab(img, t, r.Min)
			continue
		}
		tw := measure(fk, m.Label)
		tab := image.Rect(r.Min.X, r.Min.Y, r.Min.X+tw+2*pad, r.Min.Y+ascent+descent+pad)
		cv.fill(tab, c)
		cv.text(fk, m.Label, tab.Min.X+pad, tab.Min.Y+pad/2+ascent, color.RGBA{0xff, 0xff, 0xff, 0xff})
	}
}

// tabKey names a mark's tab: its label, face and colour.
type tabKey struct {
	fk    faceKey
	label string
	color int
}

// markTabs caches the tabs drawMarks draws (tabKey → *image.RGBA, nil
// for a tab whose label draws outside it); maxMarkTabs bounds it.
var (
	markTabs    sync.Map
	markTabsLen atomic.Int32
)

const maxMarkTabs = 4096

// markTab returns the tab of a mark labelled label in MarkColor(color),
// drawn as drawMarks draws it at the origin, or nil when its label's
// glyphs reach outside it (they would then blend with the picture, and
// the tab is drawn in place) or the cache is full. A tab's pixels depend
// on nothing else, so a picture's tabs are copied, not drawn again.
func markTab(fk faceKey, label string, color int) *image.RGBA {
	k := tabKey{fk, label, color}
	if t, ok := markTabs.Load(k); ok {
		return t.(*image.RGBA)
	}
	if markTabsLen.Load() >= maxMarkTabs {
		return nil
	}
	ascent, descent := textEng().metrics(fk)
	pad := max(2, fk.size/5)
	tab := image.Rect(0, 0, measure(fk, label)+2*pad, ascent+descent+pad)
	// Drawn with a margin of a colour no mark uses, which must stay.
	margin := tab.Dy()
	img := image.NewRGBA(tab.Inset(-margin))
	cv := newCanvas(img, 1)
	c := MarkColor(color)
	cv.fill(tab, c)
	cv.text(fk, label, tab.Min.X+pad, tab.Min.Y+pad/2+ascent, colorWhite)
	var t *image.RGBA
	if outsideIs(img, tab, color0) {
		t = img.SubImage(tab).(*image.RGBA)
	}
	if _, loaded := markTabs.LoadOrStore(k, t); !loaded {
		markTabsLen.Add(1)
	}
	return t
}

var (
	colorWhite = color.RGBA{0xff, 0xff, 0xff, 0xff}
	color0     = color.RGBA{}
)

// outsideIs reports whether every pixel of img outside r is c.
func outsideIs(img *image.RGBA, r image.Rectangle, c color.RGBA) bool {
	for y := img.Rect.Min.Y; y < img.Rect.Max.Y; y++ {
		for x := img.Rect.Min.X; x < img.Rect.Max.X; x++ {
			if !(image.Pt(x, y).In(r)) && img.RGBAAt(x, y) != c {
				return false
			}
		}
	}
	return true
}

// copyTab copies tab into img with its top-left corner at at, clipped to
// img.
func copyTab(img, tab *image.RGBA, at image.Point) {
	dst := tab.Rect.Sub(tab.Rect.Min).Add(at).Intersect(img.Rect)
	if dst.Empty() {
		return
	}
	src := dst.Min.Sub(at).Add(tab.Rect.Min)
	n := 4 * dst.Dx()
	for y := range dst.Dy() {
		d := img.PixOffset(dst.Min.X, dst.Min.Y+y)
		s := tab.PixOffset(src.X, src.Y+y)
		copy(img.Pix[d:d+n], tab.Pix[s:s+n])
	}
}
