package sim

import (
	"image"
	"image/color"
	"image/draw"
	"math"
	"sync"

	"golang.org/x/image/math/fixed"
	"golang.org/x/image/vector"
)

// The renderer is a pure function of the node tree: it reads nothing but the
// nodes, which is what lets ScreenHash (a hash of the same tree) stand in for
// the pixels.

// canvas draws into an RGBA image, never outside clip. Its drawing methods
// take screen coordinates and draw them scale times as large (a picture
// narrower than the screen is painted at its own size, not painted full size
// and shrunk: sharper, and cheaper by the square of the scale); the
// methods named ...Px take picture pixels.
type canvas struct {
	img   *image.RGBA
	clip  image.Rectangle // picture pixels
	scale float64
}

// newCanvas returns a canvas drawing on img at scale picture pixels per
// screen pixel, clipped to img.
func newCanvas(img *image.RGBA, scale float64) *canvas {
	return &canvas{img: img, clip: img.Rect, scale: scale}
}

// px converts a screen coordinate to picture pixels.
func (cv *canvas) px(v int) int {
	if cv.scale == 1 {
		return v
	}
	return int(math.Round(float64(v) * cv.scale))
}

// rect converts a screen rectangle to picture pixels; rectangles sharing an
// edge on the screen share it in the picture, and one thinner than a
// picture pixel (a text cursor, an underline) keeps one.
func (cv *canvas) rect(r image.Rectangle) image.Rectangle {
	if cv.scale == 1 {
		return r
	}
	out := image.Rect(cv.px(r.Min.X), cv.px(r.Min.Y), cv.px(r.Max.X), cv.px(r.Max.Y))
	if r.Dx() > 0 && out.Dx() == 0 {
		out.Max.X++
	}
	if r.Dy() > 0 && out.Dy() == 0 {
		out.Max.Y++
	}
	return out
}

// setClip clips drawing to r (screen coordinates).
func (cv *canvas) setClip(r image.Rectangle) { cv.clip = cv.rect(r).Intersect(cv.img.Rect) }

// blend composites a premultiplied colour scaled by coverage cov (0..255)
// over the pixel at offset i.
func blend(pix []uint8, i int, c color.RGBA, cov uint32) {
	if cov == 255 && c.A == 255 {
		pix[i+0], pix[i+1], pix[i+2], pix[i+3] = c.R, c.G, c.B, c.A
		return
	}
	a := uint32(c.A) * cov / 255
	if a == 0 {
		return
	}
	inv := 255 - a
	pix[i+0] = uint8((uint32(c.R)*cov/255 + uint32(pix[i+0])*inv/255))
	pix[i+1] = uint8((uint32(c.G)*cov/255 + uint32(pix[i+1])*inv/255))
	pix[i+2] = uint8((uint32(c.B)*cov/255 + uint32(pix[i+2])*inv/255))
	pix[i+3] = uint8(a + uint32(pix[i+3])*inv/255)
}

// fill paints r with c.
func (cv *canvas) fill(r image.Rectangle, c color.RGBA) { cv.fillPx(cv.rect(r), c) }

// fillPx paints r (picture pixels) with c.
func (cv *canvas) fillPx(r image.Rectangle, c color.RGBA) {
	r = r.Intersect(cv.clip)
	if r.Empty() || c.A == 0 {
		return
	}
	img := cv.img
	if c.A == 0xff {
		first := img.PixOffset(r.Min.X, r.Min.Y)
		row := img.Pix[first : first+4*r.Dx()]
		for i := 0; i < len(row); i += 4 {
			row[i], row[i+1], row[i+2], row[i+3] = c.R, c.G, c.B, c.A
		}
		for y := r.Min.Y + 1; y < r.Max.Y; y++ {
			off := img.PixOffset(r.Min.X, y)
			copy(img.Pix[off:off+len(row)], row)
		}
		return
	}
	for y := r.Min.Y; y < r.Max.Y; y++ {
		off := img.PixOffset(r.Min.X, y)
		for x := 0; x < r.Dx(); x++ {
			blend(img.Pix, off+4*x, c, 255)
		}
	}
}

// coverage of a pixel centre at distance d from a circle's centre.
func coverage(radius, d float64) uint32 {
	v := radius - d + 0.5
	switch {
	case v <= 0:
		return 0
	case v >= 1:
		return 255
	}
	return uint32(v*255 + 0.5)
}

// roundRect paints r with corners of the given radius, anti-aliased.
func (cv *canvas) roundRect(r image.Rectangle, radius int, c color.RGBA) {
	cv.roundRectCorners(r, radius, c, 0)
}

// Corners of a rectangle, as bits of a mask.
const (
	cornerTL uint8 = 1 << iota
	cornerTR
	cornerBL
	cornerBR
)

// roundRectCorners is roundRect with the corners named in square left
// square.
func (cv *canvas) roundRectCorners(r image.Rectangle, radius int, c color.RGBA, square uint8) {
	r = cv.rect(r)
	radius = min(cv.px(radius), r.Dx()/2, r.Dy()/2)
	if radius <= 0 {
		cv.fillPx(r, c)
		return
	}
	// The body without the corner bands is a plain fill.
	cv.fillPx(image.Rect(r.Min.X, r.Min.Y+radius, r.Max.X, r.Max.Y-radius), c)
	cv.fillPx(image.Rect(r.Min.X+radius, r.Min.Y, r.Max.X-radius, r.Min.Y+radius), c)
	cv.fillPx(image.Rect(r.Min.X+radius, r.Max.Y-radius, r.Max.X-radius, r.Max.Y), c)
	mask := cornerMask(radius)
	corners := []struct {
		bit  uint8
		area image.Rectangle
		// flipX and flipY say the corner is on the right or the bottom:
		// its mask is the top-left one mirrored.
		flipX, flipY bool
	}{
		{cornerTL, image.Rect(r.Min.X, r.Min.Y, r.Min.X+radius, r.Min.Y+radius), false, false},
		{cornerTR, image.Rect(r.Max.X-radius, r.Min.Y, r.Max.X, r.Min.Y+radius), true, false},
		{cornerBL, image.Rect(r.Min.X, r.Max.Y-radius, r.Min.X+radius, r.Max.Y), false, true},
		{cornerBR, image.Rect(r.Max.X-radius, r.Max.Y-radius, r.Max.X, r.Max.Y), true, true},
	}
	for _, k := range corners {
		if square&k.bit != 0 {
			cv.fillPx(k.area, c)
			continue
		}
		a := k.area.Intersect(cv.clip)
		for y := a.Min.Y; y < a.Max.Y; y++ {
			j := y - k.area.Min.Y
			if k.flipY {
				j = radius - 1 - j
			}
			row := mask[j*radius : (j+1)*radius]
			off := cv.img.PixOffset(a.Min.X, y)
			for x := a.Min.X; x < a.Max.X; x++ {
				i := x - k.area.Min.X
				if k.flipX {
					i = radius - 1 - i
				}
				blend(cv.img.Pix, off+4*(x-a.Min.X), c, uint32(row[i]))
			}
		}
	}
}

// cornerMasks caches cornerMask by radius, for the radii a screen uses
// (up to maxCachedCorner; larger ones are computed each time).
var cornerMasks sync.Map // int → []uint8

const maxCachedCorner = 96

// cornerMask is the coverage (0–255) of each pixel of the top-left corner
// square of a rounded rectangle of the given radius, row by row: the
// pixels whose centres lie outside the arc fade out over one pixel.
func cornerMask(radius int) []uint8 {
	if m, ok := cornerMasks.Load(radius); ok {
		return m.([]uint8)
	}
	rf := float64(radius)
	m := make([]uint8, radius*radius)
	for j := range radius {
		dy := float64(j) + 0.5 - rf
		for i := range radius {
			dx := float64(i) + 0.5 - rf
			m[j*radius+i] = uint8(coverage(rf, math.Sqrt(dx*dx+dy*dy)))
		}
	}
	if radius <= maxCachedCorner {
		cornerMasks.Store(radius, m)
	}
	return m
}

// ring paints the outline of a circle (inner radius > 0) or a disc (inner
// radius 0) centred on (cx, cy).
func (cv *canvas) ring(cx, cy, outer, inner float64, c color.RGBA) {
	cx, cy, outer, inner = cx*cv.scale, cy*cv.scale, outer*cv.scale, inner*cv.scale
	a := image.Rect(int(cx-outer-1), int(cy-outer-1), int(cx+outer+2), int(cy+outer+2)).Intersect(cv.clip)
	for y := a.Min.Y; y < a.Max.Y; y++ {
		dy := float64(y) + 0.5 - cy
		off := cv.img.PixOffset(a.Min.X, y)
		for x := a.Min.X; x < a.Max.X; x++ {
			dx := float64(x) + 0.5 - cx
			d := math.Sqrt(dx*dx + dy*dy)
			cov := coverage(outer, d)
			if inner > 0 {
				cov -= min(cov, coverage(inner, d))
			}
			if cov > 0 {
				blend(cv.img.Pix, off+4*(x-a.Min.X), c, cov)
			}
		}
	}
}

// shape is a closed polygon path in float pixel coordinates.
type shape [][2]float32

// poly fills the polygons (several sub-paths; opposite windings cut holes)
// with c, anti-aliased by the x/image/vector rasterizer.
func (cv *canvas) poly(c color.RGBA, paths ...shape) {
	if cv.scale != 1 {
		k := float32(cv.scale)
		scaled := make([]shape, len(paths))
		for i, p := range paths {
			scaled[i] = make(shape, len(p))
			for j, pt := range p {
				scaled[i][j] = [2]float32{pt[0] * k, pt[1] * k}
			}
		}
		paths = scaled
	}
	minX, minY := float32(math.MaxFloat32), float32(math.MaxFloat32)
	maxX, maxY := float32(-math.MaxFloat32), float32(-math.MaxFloat32)
	for _, p := range paths {
		for _, pt := range p {
			minX, maxX = min(minX, pt[0]), max(maxX, pt[0])
			minY, maxY = min(minY, pt[1]), max(maxY, pt[1])
		}
	}
	box := image.Rect(int(minX), int(minY), int(maxX)+1, int(maxY)+1)
	if box.Intersect(cv.clip).Empty() {
		return
	}
	z := vector.NewRasterizer(box.Dx(), box.Dy())
	ox, oy := float32(box.Min.X), float32(box.Min.Y)
	for _, p := range paths {
		z.MoveTo(p[0][0]-ox, p[0][1]-oy)
		for _, pt := range p[1:] {
			z.LineTo(pt[0]-ox, pt[1]-oy)
		}
		z.ClosePath()
	}
	mask := image.NewAlpha(image.Rect(0, 0, box.Dx(), box.Dy()))
	z.Draw(mask, mask.Bounds(), image.Opaque, image.Point{})
	dr := box.Intersect(cv.clip)
	draw.DrawMask(cv.img, dr, image.NewUniform(c), image.Point{}, mask, dr.Min.Sub(box.Min), draw.Over)
}

// text draws s with its baseline origin at (x, baseline), in the face's
// size scaled.
func (cv *canvas) text(fk faceKey, s string, x, baseline int, c color.RGBA) {
	if cv.scale != 1 {
		fk.size = max(1, cv.px(fk.size))
		x, baseline = cv.px(x), cv.px(baseline)
	}
	cv.textPx(fk, s, x, baseline, c)
}

// textPx draws s with its baseline origin at (x, baseline) in picture
// pixels.
func (cv *canvas) textPx(fk faceKey, s string, x, baseline int, c color.RGBA) {
	e := textEng()
	e.mu.Lock()
	defer e.mu.Unlock()
	src := image.NewUniform(c)
	dot := fixed.I(x)
	for _, r := range s {
		g := e.glyphLocked(fk, r)
		if g.mask != nil {
			at := image.Pt(dot.Round(), baseline)
			dr := g.mask.Rect.Add(at).Intersect(cv.clip)
			if !dr.Empty() {
				draw.DrawMask(cv.img, dr, src, image.Point{}, g.mask, dr.Min.Sub(at), draw.Over)
			}
		}
		dot += g.adv
	}
}

// paint draws n and its subtree within clip.
func paint(cv *canvas, n *node, clip image.Rectangle) {
	cv.setClip(clip)
	if n.stroke.A > 0 && n.strokeW > 0 {
		cv.roundRect(n.rect, n.radius, n.stroke)
		cv.roundRect(n.rect.Inset(n.strokeW), max(0, n.radius-n.strokeW), n.fill)
	} else if n.fill.A > 0 {
		cv.roundRectCorners(n.rect, n.radius, n.fill, n.square)
	}
	if n.icon != "" {
		paintIcon(cv, n)
	}
	if n.txt != nil {
		paintText(cv, n)
	}
	inner := clip
	if n.clips {
		inner = clip.Intersect(n.rect)
	}
	for _, k := range n.kids {
		paint(cv, k, inner)
	}
	cv.setClip(clip)
}

// textLayout positions the lines of a text box inside its node: the
// x of each line's start and the first baseline.
func textLayout(n *node) (xs []int, baseline0, ascent, descent int) {
	t := n.txt
	ascent, descent = textEng().metrics(t.face)
	lineH := t.lineH
	if lineH == 0 {
		lineH = ascent + descent
	}
	blockH := lineH * len(t.lines)
	var top int
	switch t.valign {
	case vTop:
		top = n.rect.Min.Y + t.padY
	case vBottom:
		top = n.rect.Max.Y - t.padY - blockH
	default:
		top = n.rect.Min.Y + (n.rect.Dy()-blockH)/2
	}
	baseline0 = top + (lineH-ascent-descent)/2 + ascent
	for _, l := range t.lines {
		x := n.rect.Min.X + t.padX
		switch t.align {
		case alignCenter:
			x = n.rect.Min.X + (n.rect.Dx()-measure(t.face, l))/2
		case alignRight:
			x = n.rect.Max.X - t.padX - measure(t.face, l)
		}
		xs = append(xs, x)
	}
	return xs, baseline0, ascent, descent
}

func paintText(cv *canvas, n *node) {
	t := n.txt
	xs, base, asc, desc := textLayout(n)
	lineH := t.lineH
	if lineH == 0 {
		lineH = asc + desc
	}
	for i, l := range t.lines {
		y := base + i*lineH
		w := measure(t.face, l)
		if t.selCol.A > 0 && l != "" {
			cv.fill(image.Rect(xs[i]-2, y-asc, xs[i]+w+2, y+desc), t.selCol)
		}
		cv.text(t.face, l, xs[i], y, t.col)
		if t.underline {
			th := max(1, t.face.size/16)
			cv.fill(image.Rect(xs[i], y+desc/2, xs[i]+w, y+desc/2+th), t.col)
		}
		if t.cursor && i == len(t.lines)-1 {
			cw := max(2, t.face.size/14)
			cv.fill(image.Rect(xs[i]+w+1, y-asc, xs[i]+w+1+cw, y+desc), t.cursorCol)
		}
	}
}

// paintIcon draws the vector icons that are not text or plain boxes. Every
// input it reads is a node field, so the screen hash covers it.
func paintIcon(cv *canvas, n *node) {
	r := n.rect
	c := n.iconCol
	cx, cy := float64(r.Min.X+r.Max.X)/2, float64(r.Min.Y+r.Max.Y)/2
	s := float64(min(r.Dx(), r.Dy()))
	switch n.icon {
	case iconBack:
		h := s * 0.36
		outer := shape{{float32(cx - h*0.55), float32(cy)}, {float32(cx + h*0.5), float32(cy - h*0.62)}, {float32(cx + h*0.5), float32(cy + h*0.62)}}
		k := h * 0.16
		inner := shape{{float32(cx - h*0.55 + 2.2*k), float32(cy)}, {float32(cx + h*0.5 - k), float32(cy + h*0.62 - 1.7*k)}, {float32(cx + h*0.5 - k), float32(cy - h*0.62 + 1.7*k)}}
		cv.poly(c, outer, inner)
	case iconHome:
		cv.ring(cx, cy, s*0.2, s*0.2-s*0.055, c)
	case iconRecents:
		h := s * 0.17
		t := s * 0.05
		box := image.Rect(int(cx-h), int(cy-h), int(cx+h), int(cy+h))
		outer := roundedShape(box, s*0.05)
		inner := reverse(roundedShape(box.Inset(int(t)), s*0.02))
		cv.poly(c, outer, inner)
	case iconWifi:
		// A quarter-circle fan pointing down, the usual Wi-Fi glyph.
		rad := s * 0.42
		oy := cy + rad*0.55
		fan := shape{{float32(cx), float32(oy)}}
		for a := 225.0; a <= 315.0; a += 5 {
			rr := a * math.Pi / 180
			fan = append(fan, [2]float32{float32(cx + rad*math.Cos(rr)), float32(oy + rad*math.Sin(rr))})
		}
		cv.poly(c, fan)
	case iconAirplane:
		u := s * 0.4
		p := func(x, y float64) [2]float32 { return [2]float32{float32(cx + x*u), float32(cy + y*u)} }
		cv.poly(c, shape{p(0, -1), p(0.12, -0.85), p(0.12, -0.3), p(1, 0.2), p(1, 0.35), p(0.12, 0.1), p(0.12, 0.6), p(0.4, 0.85), p(0.4, 0.97), p(0, 0.85),
			p(-0.4, 0.97), p(-0.4, 0.85), p(-0.12, 0.6), p(-0.12, 0.1), p(-1, 0.35), p(-1, 0.2), p(-0.12, -0.3), p(-0.12, -0.85)})
	case iconBattery:
		w, h := s*0.38, s*0.7
		body := image.Rect(int(cx-w/2), int(cy-h/2+s*0.06), int(cx+w/2), int(cy+h/2))
		capR := image.Rect(int(cx-w/5), body.Min.Y-int(s*0.07), int(cx+w/5), body.Min.Y)
		cv.fill(capR, c)
		t := max(2, int(s*0.06))
		cv.roundRect(body, t, c)
		in := body.Inset(t)
		cv.roundRect(in, 0, n.fill2)
		level := n.level
		lvl := in.Inset(max(1, t/2))
		top := lvl.Max.Y - lvl.Dy()*level/100
		cv.fill(image.Rect(lvl.Min.X, top, lvl.Max.X, lvl.Max.Y), c)
	case iconAppIcon:
		// Rounded square with the label's first letter, above the label.
		size := n.iconSize
		box := image.Rect(r.Min.X+(r.Dx()-size)/2, r.Min.Y+n.iconTop, r.Min.X+(r.Dx()+size)/2, r.Min.Y+n.iconTop+size)
		cv.roundRect(box, size*26/100, c)
		letter := firstLetter(n.badge)
		fk := faceKey{fontBold, size / 2}
		asc, desc := textEng().metrics(fk)
		w := measure(fk, letter)
		cv.text(fk, letter, box.Min.X+(size-w)/2, box.Min.Y+(size+asc-desc)/2, n.fill2)
	case iconBadge:
		// Circle with a letter: list icons in Settings.
		rad := s / 2
		cv.ring(cx, cy, rad, 0, c)
		letter := firstLetter(n.badge)
		fk := faceKey{fontBold, int(s * 0.5)}
		asc, desc := textEng().metrics(fk)
		w := measure(fk, letter)
		cv.text(fk, letter, int(cx)-w/2, int(cy)+(asc-desc)/2, n.fill2)
	case iconSwitch:
		track := r.Inset(r.Dy() / 8)
		on := n.el.Checked
		if on {
			cv.roundRect(track, track.Dy()/2, c)
		} else {
			cv.roundRect(track, track.Dy()/2, n.fill2)
			cv.roundRect(track.Inset(max(2, r.Dy()/24)), track.Dy()/2, n.fill3)
		}
		rad := float64(track.Dy())/2 - float64(r.Dy())/10
		tx := float64(track.Min.X) + float64(track.Dy())/2
		thumb := n.fill2
		if on {
			tx = float64(track.Max.X) - float64(track.Dy())/2
			thumb = n.fill3
			rad = float64(track.Dy())/2 - float64(r.Dy())/14
		}
		cv.ring(tx, cy, rad, 0, thumb)
	case iconVolume:
		bar := r.Inset(r.Dx() / 3)
		bar.Min.Y = r.Min.Y + r.Dx()/2
		bar.Max.Y = r.Max.Y - r.Dx()/2
		cv.roundRect(bar, bar.Dx()/2, n.fill2)
		top := bar.Max.Y - bar.Dy()*n.level/100
		cv.roundRect(image.Rect(bar.Min.X, top, bar.Max.X, bar.Max.Y), bar.Dx()/2, c)
	}
}

func firstLetter(s string) string {
	for _, r := range s {
		return string(r)
	}
	return ""
}

func roundedShape(b image.Rectangle, rad float64) shape {
	var s shape
	arc := func(cx, cy, from float64) {
		for a := from; a <= from+90; a += 15 {
			rr := a * math.Pi / 180
			s = append(s, [2]float32{float32(cx + rad*math.Cos(rr)), float32(cy + rad*math.Sin(rr))})
		}
	}
	x0, y0, x1, y1 := float64(b.Min.X), float64(b.Min.Y), float64(b.Max.X), float64(b.Max.Y)
	arc(x1-rad, y0+rad, 270)
	arc(x1-rad, y1-rad, 0)
	arc(x0+rad, y1-rad, 90)
	arc(x0+rad, y0+rad, 180)
	return s
}

func reverse(s shape) shape {
	out := make(shape, len(s))
	for i, p := range s {
		out[len(s)-1-i] = p
	}
	return out
}

// framePool recycles full-size frame buffers across phones: a phone does
// not keep a frame between screenshots, so a fleet's memory does not grow
// with its size.
var framePool sync.Map // image.Point (size) → *sync.Pool

func getFrame(w, h int) *image.RGBA {
	pl, _ := framePool.LoadOrStore(image.Pt(w, h), &sync.Pool{New: func() any {
		return image.NewRGBA(image.Rect(0, 0, w, h))
	}})
	return pl.(*sync.Pool).Get().(*image.RGBA)
}

func putFrame(img *image.RGBA) {
	if pl, ok := framePool.Load(img.Rect.Size()); ok {
		pl.(*sync.Pool).Put(img)
	}
}

// renderInto paints the tree over the whole frame, at full size.
func renderInto(img *image.RGBA, root *node) {
	paint(newCanvas(img, 1), root, img.Rect)
}

// scaledSize is the size of a picture w pixels wide of a screen sw×sh
// (the aspect ratio kept, rounded).
func scaledSize(sw, sh, w int) image.Point {
	return image.Pt(w, max(1, (sh*w+sw/2)/sw))
}

// frameOf paints root into a pooled frame (putFrame it when done): full
// size, or maxWidth wide when that is positive and narrower than the
// screen.
func (p *Phone) frameOf(root *node, maxWidth int) *image.RGBA {
	w, h := p.model.Width, p.model.Height
	if maxWidth <= 0 || maxWidth >= w {
		img := getFrame(w, h)
		renderInto(img, root)
		return img
	}
	sz := scaledSize(w, h, maxWidth)
	img := getFrame(sz.X, sz.Y)
	renderScaled(img, root, w, h)
	return img
}

// renderScaled paints the tree of a screen sw×sh into img, a picture of
// it narrower than the screen (scaledSize), at img's scale.
func renderScaled(img *image.RGBA, root *node, sw, sh int) {
	cv := newCanvas(img, float64(img.Rect.Dx())/float64(sw))
	// The screen paints every pixel of its own rectangle, whose edge may
	// round a pixel short of the picture's: clear what lies beyond it.
	clearOutside(img, cv.rect(image.Rect(0, 0, sw, sh)))
	paint(cv, root, image.Rect(0, 0, sw, sh))
}

// clearOutside clears the pixels of img outside r (which starts at img's
// origin).
func clearOutside(img *image.RGBA, r image.Rectangle) {
	r = r.Intersect(img.Rect)
	for y := img.Rect.Min.Y; y < img.Rect.Max.Y; y++ {
		row := img.Pix[img.PixOffset(img.Rect.Min.X, y):][:4*img.Rect.Dx()]
		if y >= r.Max.Y {
			clear(row)
		} else {
			clear(row[4*(r.Max.X-img.Rect.Min.X):])
		}
	}
}
