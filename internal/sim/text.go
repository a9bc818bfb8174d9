package sim

import (
	"fmt"
	"image"
	"image/draw"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"golang.org/x/image/font"
	"golang.org/x/image/font/gofont/gobold"
	"golang.org/x/image/font/gofont/gomedium"
	"golang.org/x/image/font/gofont/gomono"
	"golang.org/x/image/font/gofont/goregular"
	"golang.org/x/image/font/opentype"
	"golang.org/x/image/font/sfnt"
	"golang.org/x/image/math/fixed"
)

// fontID names one of the embedded Go fonts. Only these fonts are used, so
// a screenshot never depends on what is installed on the host.
type fontID uint8

const (
	fontRegular fontID = iota
	fontMedium
	fontBold
	fontMono
	numFonts
)

// faceKey is a font at a pixel size; faces are cached per key.
type faceKey struct {
	font fontID
	size int
}

// glyph is a rasterised rune: an alpha mask positioned relative to the dot
// (the baseline origin) and the advance to the next rune.
type glyph struct {
	mask *image.Alpha // nil when the glyph draws nothing
	adv  fixed.Int26_6
}

type faceEntry struct {
	face    font.Face
	ascent  int
	descent int
}

type glyphKey struct {
	fk faceKey
	r  rune
}

// maxCachedGlyphs bounds the glyph cache; arbitrary typed Unicode must not
// grow it without limit. Clearing it never changes what is drawn.
const maxCachedGlyphs = 20000

// textEngine holds the parsed fonts and caches. One engine serves every
// phone; a mutex guards it because opentype faces are not safe for
// concurrent use.
type textEngine struct {
	mu     sync.Mutex
	fonts  [numFonts]*sfnt.Font
	buf    sfnt.Buffer
	faces  map[faceKey]*faceEntry
	glyphs map[glyphKey]*glyph
}

var (
	engineOnce sync.Once
	engine     *textEngine
)

func textEng() *textEngine {
	engineOnce.Do(func() {
		e := &textEngine{faces: map[faceKey]*faceEntry{}, glyphs: map[glyphKey]*glyph{}}
		for id, ttf := range [numFonts][]byte{goregular.TTF, gomedium.TTF, gobold.TTF, gomono.TTF} {
			f, err := opentype.Parse(ttf)
			if err != nil {
				// The fonts are compiled into the binary; failing to parse
				// them is a build defect, not a runtime condition.
				panic(fmt.Sprintf("sim: parse embedded font %d: %v", id, err))
			}
			e.fonts[id] = f
		}
		engine = e
	})
	return engine
}

// faceLocked returns the face for fk; e.mu must be held.
func (e *textEngine) faceLocked(fk faceKey) *faceEntry {
	if fe, ok := e.faces[fk]; ok {
		return fe
	}
	face, err := opentype.NewFace(e.fonts[fk.font], &opentype.FaceOptions{
		Size: float64(fk.size), DPI: 72, Hinting: font.HintingNone,
	})
	if err != nil {
		panic(fmt.Sprintf("sim: new face %v: %v", fk, err))
	}
	m := face.Metrics()
	fe := &faceEntry{face: face, ascent: m.Ascent.Ceil(), descent: m.Descent.Ceil()}
	e.faces[fk] = fe
	return fe
}

// metrics returns the ascent and descent of a face in pixels.
func (e *textEngine) metrics(fk faceKey) (ascent, descent int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	fe := e.faceLocked(fk)
	return fe.ascent, fe.descent
}

// glyphLocked returns the cached glyph for r in fk; e.mu must be held.
func (e *textEngine) glyphLocked(fk faceKey, r rune) *glyph {
	k := glyphKey{fk, r}
	if g, ok := e.glyphs[k]; ok {
		return g
	}
	if len(e.glyphs) >= maxCachedGlyphs {
		clear(e.glyphs)
	}
	g := e.rasterLocked(fk, r)
	e.glyphs[k] = g
	return g
}

func (e *textEngine) rasterLocked(fk faceKey, r rune) *glyph {
	idx, err := e.fonts[fk.font].GlyphIndex(&e.buf, r)
	if err != nil || idx == 0 {
		if zeroWidth(r) {
			return &glyph{}
		}
		return e.fallbackLocked(fk, r)
	}
	fe := e.faceLocked(fk)
	dr, mask, mp, adv, ok := fe.face.Glyph(fixed.Point26_6{}, r)
	if !ok {
		return e.fallbackLocked(fk, r)
	}
	g := &glyph{adv: adv}
	if !dr.Empty() {
		a := image.NewAlpha(dr)
		draw.Draw(a, dr, mask, mp, draw.Src)
		g.mask = a
	}
	return g
}

// zeroWidth reports runes that shape other runes (joiners, variation
// selectors, combining marks) and draw nothing on their own when the font
// lacks them.
func zeroWidth(r rune) bool {
	return unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf, unicode.Variation_Selector)
}

// wide reports runes that occupy a full em (CJK ideographs, kana, hangul,
// emoji), so their fallback box is square.
func wide(r rune) bool {
	return unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Hangul) ||
		(r >= 0x1F000 && r <= 0x1FAFF) || (r >= 0x2600 && r <= 0x27BF) ||
		(r >= 0x3000 && r <= 0x303F) || (r >= 0xFF00 && r <= 0xFFEF)
}

// fallbackLocked draws a rune the Go fonts do not cover as a box holding
// its code point in hexadecimal, the way Unifont's "last resort" glyphs do:
// a person can still tell which characters were typed.
func (e *textEngine) fallbackLocked(fk faceKey, r rune) *glyph {
	s := fk.size
	w := s * 3 / 4
	if wide(r) {
		w = s
	}
	top, bottom := -s*80/100, s*6/100
	box := image.Rect(s/20, top, w-s/20, bottom)
	a := image.NewAlpha(box)
	t := max(1, s/22)
	// Outline.
	for y := box.Min.Y; y < box.Max.Y; y++ {
		for x := box.Min.X; x < box.Max.X; x++ {
			if x < box.Min.X+t || x >= box.Max.X-t || y < box.Min.Y+t || y >= box.Max.Y-t {
				a.Pix[a.PixOffset(x, y)] = 0xff
			}
		}
	}
	hex := fmt.Sprintf("%X", r)
	if len(hex)%2 == 1 {
		hex = "0" + hex
	}
	rows := []string{hex[:len(hex)/2], hex[len(hex)/2:]}
	mk := faceKey{fontMono, max(6, s*34/100)}
	mfe := e.faceLocked(mk)
	rowH := (box.Dy() - 2*t) / 2
	for i, row := range rows {
		var width fixed.Int26_6
		for _, c := range row {
			width += e.glyphLocked(mk, c).adv
		}
		x := fixed.I((box.Min.X+box.Max.X)/2) - width/2
		base := box.Min.Y + t + i*rowH + (rowH+mfe.ascent-mfe.descent)/2
		for _, c := range row {
			g := e.glyphLocked(mk, c)
			if g.mask != nil {
				dot := image.Pt(x.Round(), base)
				dr := g.mask.Rect.Add(dot).Intersect(box)
				draw.DrawMask(a, dr, image.Opaque, image.Point{}, g.mask, dr.Min.Sub(dot), draw.Over)
			}
			x += g.adv
		}
	}
	return &glyph{mask: a, adv: fixed.I(w)}
}

// measure returns the width of s in pixels when drawn in fk.
func measure(fk faceKey, s string) int {
	e := textEng()
	e.mu.Lock()
	defer e.mu.Unlock()
	var w fixed.Int26_6
	for _, r := range s {
		w += e.glyphLocked(fk, r).adv
	}
	return w.Round()
}

// fitPrefix returns the longest prefix of s (in bytes) whose width is at
// most maxW.
func fitPrefix(fk faceKey, s string, maxW int) int {
	e := textEng()
	e.mu.Lock()
	defer e.mu.Unlock()
	limit := fixed.I(maxW)
	var w fixed.Int26_6
	for i, r := range s {
		w += e.glyphLocked(fk, r).adv
		if w > limit {
			return i
		}
	}
	return len(s)
}

const ellipsis = "…"

// ellipsize shortens s with a trailing ellipsis so that it fits maxW.
func ellipsize(fk faceKey, s string, maxW int) string {
	if measure(fk, s) <= maxW {
		return s
	}
	n := fitPrefix(fk, s, maxW-measure(fk, ellipsis))
	return strings.TrimRight(s[:n], " ") + ellipsis
}

// ellipsizeStart keeps the end of s, the part being typed, and replaces what
// does not fit with a leading ellipsis.
func ellipsizeStart(fk faceKey, s string, maxW int) string {
	if measure(fk, s) <= maxW {
		return s
	}
	room := fixed.I(maxW - measure(fk, ellipsis))
	e := textEng()
	e.mu.Lock()
	defer e.mu.Unlock()
	var w fixed.Int26_6
	i := len(s)
	for i > 0 {
		r, size := utf8.DecodeLastRuneInString(s[:i])
		w += e.glyphLocked(fk, r).adv
		if w > room {
			break
		}
		i -= size
	}
	return ellipsis + s[i:]
}

// wrap breaks s into lines no wider than maxW, at spaces where it can and
// between runes where a word alone is too wide (as CJK text needs). At most
// maxLines lines are returned (0 means no limit); a cut-off last line ends
// with an ellipsis.
func wrap(fk faceKey, s string, maxW, maxLines int) []string {
	var lines []string
	for _, para := range strings.Split(s, "\n") {
		lines = append(lines, wrapPara(fk, para, maxW)...)
	}
	if maxLines > 0 && len(lines) > maxLines {
		last := lines[maxLines-1] + " " + lines[maxLines]
		lines = lines[:maxLines]
		lines[maxLines-1] = ellipsize(fk, last+ellipsis, maxW)
		if !strings.HasSuffix(lines[maxLines-1], ellipsis) {
			lines[maxLines-1] += ellipsis
		}
	}
	return lines
}

func wrapPara(fk faceKey, para string, maxW int) []string {
	if para == "" {
		return []string{""}
	}
	var lines []string
	line := ""
	for _, word := range strings.SplitAfter(para, " ") {
		if word == "" {
			continue
		}
		if measure(fk, strings.TrimRight(line+word, " ")) <= maxW {
			line += word
			continue
		}
		if line != "" {
			lines = append(lines, strings.TrimRight(line, " "))
			line = ""
		}
		for measure(fk, strings.TrimRight(word, " ")) > maxW {
			n := fitPrefix(fk, word, maxW)
			if n == 0 {
				_, n = utf8.DecodeRuneInString(word)
			}
			lines = append(lines, word[:n])
			word = word[n:]
		}
		line = word
	}
	if strings.TrimRight(line, " ") != "" || len(lines) == 0 {
		lines = append(lines, strings.TrimRight(line, " "))
	}
	return lines
}
