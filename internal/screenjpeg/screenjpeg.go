// Package screenjpeg encodes pictures of phone screens as baseline JPEG:
// JFIF, 4:2:0 chroma, the quantization and Huffman tables of ITU T.81
// Annex K scaled by quality as libjpeg scales them, so any decoder reads it
// and a given quality looks as it does elsewhere.
//
// It exists for speed (issue 28): a screen is mostly flat colour, and
// image/jpeg transforms every 8×8 block whatever it holds. Here a block
// whose 64 pixels are one colour costs one colour conversion and two
// Huffman codes (its DC difference and end of block), an MCU of one colour
// six of each; other blocks go through the floating-point AAN transform.
// Strips of the picture are encoded in parallel as restart intervals.
// The output is checked against image/jpeg's decoder in the tests.
package screenjpeg

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"image"
	"io"
	"math"
	"math/bits"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
)

// unscaledQuant are Annex K's quantization tables (luminance, chrominance)
// in zig-zag order.
var unscaledQuant = [2][64]byte{
	{
		16, 11, 12, 14, 12, 10, 16, 14, 13, 14, 18, 17, 16, 19, 24, 40,
		26, 24, 22, 22, 24, 49, 35, 37, 29, 40, 58, 51, 61, 60, 57, 51,
		56, 55, 64, 72, 92, 78, 64, 68, 87, 69, 55, 56, 80, 109, 81, 87,
		95, 98, 103, 104, 103, 62, 77, 113, 121, 112, 100, 120, 92, 101, 103, 99,
	},
	{
		17, 18, 18, 24, 21, 24, 47, 26, 26, 47, 99, 66, 56, 66, 99, 99,
		99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99,
		99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99,
		99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99,
	},
}

// unzig maps a zig-zag index to the natural (row-major) index.
var unzig = [64]int{
	0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5,
	12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13, 6, 7, 14, 21, 28,
	35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51,
	58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63,
}

// huffSpec is a Huffman table as a JPEG file states it: how many codes of
// each length 1–16, and the values in code order.
type huffSpec struct {
	counts [16]byte
	values []byte
}

// huffSpecs are Annex K.3's tables: luminance DC, luminance AC,
// chrominance DC, chrominance AC (DHT class and id: 0x00, 0x10, 0x01, 0x11).
var huffSpecs = [4]huffSpec{
	{[16]byte{0, 1, 5, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0}, []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}},
	{[16]byte{0, 2, 1, 3, 3, 2, 4, 3, 5, 5, 4, 4, 0, 0, 1, 125}, []byte{
		0x01, 0x02, 0x03, 0x00, 0x04, 0x11, 0x05, 0x12, 0x21, 0x31, 0x41, 0x06, 0x13, 0x51, 0x61, 0x07,
		0x22, 0x71, 0x14, 0x32, 0x81, 0x91, 0xa1, 0x08, 0x23, 0x42, 0xb1, 0xc1, 0x15, 0x52, 0xd1, 0xf0,
		0x24, 0x33, 0x62, 0x72, 0x82, 0x09, 0x0a, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x25, 0x26, 0x27, 0x28,
		0x29, 0x2a, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49,
		0x4a, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5a, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69,
		0x6a, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7a, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89,
		0x8a, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9a, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7,
		0xa8, 0xa9, 0xaa, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8, 0xb9, 0xba, 0xc2, 0xc3, 0xc4, 0xc5,
		0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8, 0xd9, 0xda, 0xe1, 0xe2,
		0xe3, 0xe4, 0xe5, 0xe6, 0xe7, 0xe8, 0xe9, 0xea, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8,
		0xf9, 0xfa,
	}},
	{[16]byte{0, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0}, []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}},
	{[16]byte{0, 2, 1, 2, 4, 4, 3, 4, 7, 5, 4, 4, 0, 1, 2, 119}, []byte{
		0x00, 0x01, 0x02, 0x03, 0x11, 0x04, 0x05, 0x21, 0x31, 0x06, 0x12, 0x41, 0x51, 0x07, 0x61, 0x71,
		0x13, 0x22, 0x32, 0x81, 0x08, 0x14, 0x42, 0x91, 0xa1, 0xb1, 0xc1, 0x09, 0x23, 0x33, 0x52, 0xf0,
		0x15, 0x62, 0x72, 0xd1, 0x0a, 0x16, 0x24, 0x34, 0xe1, 0x25, 0xf1, 0x17, 0x18, 0x19, 0x1a, 0x26,
		0x27, 0x28, 0x29, 0x2a, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48,
		0x49, 0x4a, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5a, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68,
		0x69, 0x6a, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7a, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87,
		0x88, 0x89, 0x8a, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9a, 0xa2, 0xa3, 0xa4, 0xa5,
		0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8, 0xb9, 0xba, 0xc2, 0xc3,
		0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8, 0xd9, 0xda,
		0xe2, 0xe3, 0xe4, 0xe5, 0xe6, 0xe7, 0xe8, 0xe9, 0xea, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8,
		0xf9, 0xfa,
	}},
}

// code is a Huffman code: its bits (low size bits) and size.
type code struct {
	bits uint32
	size uint8
}

// codes are huffSpecs compiled: for each table, the code of each value.
var codes = func() (out [4][256]code) {
	for t, s := range huffSpecs {
		c, k := uint32(0), 0
		for n, count := range s.counts {
			for range count {
				out[t][s.values[k]] = code{c, uint8(n + 1)}
				c++
				k++
			}
			c <<= 1
		}
	}
	return out
}()

// aan are the AAN transform's scale factors: cos(kπ/16)·√2, 1 for k = 0.
var aan = func() (f [8]float64) {
	f[0] = 1
	for k := 1; k < 8; k++ {
		f[k] = math.Cos(float64(k)*math.Pi/16) * math.Sqrt2
	}
	return f
}()

// tables are the quantization of one quality: the tables as written
// (zig-zag order) and the multipliers that quantize the AAN transform's
// output (natural order).
type tables struct {
	quant [2][64]byte
	mul   [2][64]float32
}

var qualities sync.Map // int → *tables

func tablesFor(quality int) *tables {
	if t, ok := qualities.Load(quality); ok {
		return t.(*tables)
	}
	scale := 200 - 2*quality
	if quality < 50 {
		scale = 5000 / quality
	}
	t := &tables{}
	for i := range 2 {
		for zig, base := range unscaledQuant[i] {
			q := min(max((int(base)*scale+50)/100, 1), 255)
			t.quant[i][zig] = byte(q)
			n := unzig[zig]
			t.mul[i][n] = float32(1 / (float64(q) * aan[n/8] * aan[n%8] * 8))
		}
	}
	qualities.Store(quality, t)
	return t
}

// Encode writes img as a JPEG of quality 1–100 (values outside are
// clamped). Alpha is ignored: screens are opaque.
func Encode(w io.Writer, img *image.RGBA, quality int) error {
	out, err := Append(nil, img, quality)
	if err != nil {
		return err
	}
	_, err = w.Write(out)
	return err
}

// Append appends img as a JPEG of quality 1–100 to dst, as Encode writes
// it, growing dst once.
//
// The picture is cut into at most maxStrips strips of whole MCU rows,
// encoded in parallel: each strip is a restart interval (DRI), which resets
// the DC prediction, so strips depend on nothing before them and join with
// RSTn markers into one scan any decoder reads. The strip height follows
// from the picture's size alone, never from the CPU count, so the bytes are
// the same on every machine.
func Append(dst []byte, img *image.RGBA, quality int) ([]byte, error) {
	quality = min(max(quality, 1), 100)
	b := img.Rect
	if b.Dx() < 1 || b.Dy() < 1 || b.Dx() > 65535 || b.Dy() > 65535 {
		return dst, fmt.Errorf("screenjpeg: cannot encode a %dx%d image", b.Dx(), b.Dy())
	}
	t := tablesFor(quality)
	cols, rows := (b.Dx()+15)/16, (b.Dy()+15)/16
	// A restart interval counts MCUs in 16 bits.
	per := min((rows+maxStrips-1)/maxStrips, 65535/cols)
	strips := make([]*encoder, (rows+per-1)/per)
	var next atomic.Int32
	var wg sync.WaitGroup
	for range min(len(strips), runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(strips); i = int(next.Add(1)) - 1 {
				y0 := b.Min.Y + 16*per*i
				strips[i] = newEncoder(img, t, cols)
				strips[i].scan(y0, min(y0+16*per, b.Max.Y))
			}
		})
	}
	wg.Wait()
	hdr := header(img.Rect, t, len(strips) > 1, per*cols)
	n := len(hdr) + 2
	for _, e := range strips {
		n += len(e.out) + 2
	}
	dst = slices.Grow(dst, n)
	dst = append(dst, hdr...)
	for i, e := range strips {
		if i > 0 {
			dst = append(dst, 0xff, 0xd0+byte((i-1)%8))
		}
		dst = append(dst, e.out...)
		encoders.Put(e)
	}
	return append(dst, 0xff, 0xd9), nil
}

// encoders recycles encoders and their buffers between pictures.
var encoders sync.Pool

// newEncoder returns an encoder of img at t, from the pool when it has
// one, with room for cols MCUs a row.
func newEncoder(img *image.RGBA, t *tables, cols int) *encoder {
	e, _ := encoders.Get().(*encoder)
	if e == nil {
		e = &encoder{}
	}
	row := e.row
	if cap(row) < cols {
		row = make([]mcu, cols)
	}
	*e = encoder{img: img, t: t, out: e.out[:0], row: row[:cols], repBuf: e.repBuf}
	for i := range e.row {
		e.row[i].ok = false
	}
	return e
}

// maxStrips is how many restart intervals a picture is cut into at most:
// enough to keep a few cores busy, few enough that the markers and the
// DC restarts cost next to nothing.
const maxStrips = 4

type encoder struct {
	img *image.RGBA
	t   *tables
	out []byte
	// acc holds bits not yet written, the last n of them pending.
	acc uint64
	n   uint
	// dc are the previous DC values of Y, Cb and Cr.
	dc [3]int32
	// row holds the last MCU of each column (scan).
	row []mcu
	// rep is the code of the last MCU that repeated the one on its left,
	// for the MCUs after it that repeat it too (scan); repBuf keeps its
	// buffer between pictures.
	rep    repeat
	repBuf []byte
}

// repeat is the code of one MCU: whole bytes (unstuffed) and the bits
// after them.
type repeat struct {
	bytes []byte
	tail  uint32
	tailN uint8
}

func marker(out []byte, m byte, length int) []byte {
	return append(out, 0xff, m, byte(length>>8), byte(length))
}

// header is everything before the entropy-coded data of a picture of
// size r: with restarts, a DRI of interval MCUs.
func header(r image.Rectangle, t *tables, restarts bool, interval int) []byte {
	out := make([]byte, 0, 640)
	out = append(out, 0xff, 0xd8)
	// JFIF APP0: version 1.1, no density, no thumbnail.
	out = marker(out, 0xe0, 16)
	out = append(out, 'J', 'F', 'I', 'F', 0, 1, 1, 0, 0, 1, 0, 1, 0, 0)
	out = marker(out, 0xdb, 2+2*65)
	for i := range 2 {
		out = append(out, byte(i))
		out = append(out, t.quant[i][:]...)
	}
	w, h := r.Dx(), r.Dy()
	out = marker(out, 0xc0, 8+3*3)
	out = append(out, 8, byte(h>>8), byte(h), byte(w>>8), byte(w), 3,
		1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1)
	n := 2
	for _, s := range huffSpecs {
		n += 17 + len(s.values)
	}
	out = marker(out, 0xc4, n)
	for i, s := range huffSpecs {
		out = append(out, []byte{0x00, 0x10, 0x01, 0x11}[i])
		out = append(out, s.counts[:]...)
		out = append(out, s.values...)
	}
	if restarts {
		out = marker(out, 0xdd, 4)
		out = append(out, byte(interval>>8), byte(interval))
	}
	out = marker(out, 0xda, 6+2*3)
	return append(out, 3, 1, 0x00, 2, 0x11, 3, 0x11, 0, 63, 0)
}

// emit writes the low size (at most 32) bits of v, four bytes at a time.
func (e *encoder) emit(v uint32, size uint8) {
	e.acc = e.acc<<size | uint64(v&(1<<size-1))
	e.n += uint(size)
	if e.n < 32 {
		return
	}
	e.n -= 32
	w := uint32(e.acc >> e.n)
	// A 0xff byte among the four is followed by a stuffed zero.
	if x := ^w; (x-0x01010101)&^x&0x80808080 == 0 {
		e.out = binary.BigEndian.AppendUint32(e.out, w)
		return
	}
	for shift := 24; shift >= 0; shift -= 8 {
		e.put(byte(w >> shift))
	}
}

// put appends one byte of entropy-coded data, and a stuffed zero after
// 0xff.
func (e *encoder) put(c byte) {
	e.out = append(e.out, c)
	if c == 0xff {
		e.out = append(e.out, 0)
	}
}

// finish pads the pending bits to a byte with ones and writes them (the
// end of a restart interval or of the picture).
func (e *encoder) finish() {
	if pad := (8 - e.n%8) % 8; pad > 0 {
		e.acc = e.acc<<pad | (1<<pad - 1)
		e.n += pad
	}
	for e.n >= 8 {
		e.n -= 8
		e.put(byte(e.acc >> e.n))
	}
}

// value writes the Huffman code of (run, the size of v) from table t,
// then v's bits.
func (e *encoder) value(t int, run int32, v int32) {
	a := v
	if a < 0 {
		a, v = -a, v-1
	}
	size := uint8(bits.Len32(uint32(a)))
	c := codes[t][byte(run)<<4|size]
	// One write of code and bits: at most 16 + 11 bits.
	e.emit(c.bits<<size|uint32(v)&(1<<size-1), c.size+size)
}

// block writes a quantized block of component comp: q in zig-zag order,
// nz the mask of its non-zero AC coefficients (bit k for zig-zag index
// k), so runs of zeros are skipped, not walked.
func (e *encoder) block(q *[64]int32, nz uint64, comp int) {
	dc, ac := 0, 1
	if comp > 0 {
		dc, ac = 2, 3
	}
	e.value(dc, 0, q[0]-e.dc[comp])
	e.dc[comp] = q[0]
	prev := 0
	for nz != 0 {
		zig := bits.TrailingZeros64(nz)
		nz &= nz - 1
		run := zig - prev - 1
		for ; run > 15; run -= 16 {
			c := codes[ac][0xf0]
			e.emit(c.bits, c.size)
		}
		e.value(ac, int32(run), q[zig])
		prev = zig
	}
	if prev < 63 {
		c := codes[ac][0x00]
		e.emit(c.bits, c.size)
	}
}

// sameFlatMCU is the code of an MCU of one colour after an MCU whose
// blocks end with the same DC values: for each of its six blocks a DC
// difference of zero and an end of block (32 bits with Annex K's tables).
var sameFlatMCU = func() code {
	var c code
	for _, t := range []int{0, 0, 0, 0, 2, 2} {
		for _, k := range []code{codes[t][0x00], codes[t+1][0x00]} {
			c.bits, c.size = c.bits<<k.size|k.bits, c.size+k.size
		}
	}
	if c.size > 32 {
		panic("screenjpeg: a flat MCU's code is longer than 32 bits")
	}
	return c
}()

// flatDC is the quantized DC coefficient of a block of one level-shifted
// value v under the multipliers mul.
func flatDC(v float32, mul *[64]float32) int32 { return round(64 * v * mul[0]) }

// flat writes a block of one colour of component comp, whose quantized
// DC coefficient is q.
func (e *encoder) flat(q int32, comp int) {
	dc, ac := 0, 1
	if comp > 0 {
		dc, ac = 2, 3
	}
	e.value(dc, 0, q-e.dc[comp])
	e.dc[comp] = q
	c := codes[ac][0x00]
	e.emit(c.bits, c.size)
}

// round rounds v to the nearest integer (halves to even) without a
// branch: adding 1.5·2²³ leaves no fraction bits in a float32. |v| stays
// far below 2²² here (a coefficient over its quantizer).
func round(v float32) int32 {
	const magic = 1.5 * (1 << 23)
	return int32((v + magic) - magic)
}

// ycc converts a pixel to level-shifted Y, Cb, Cr (JFIF).
func ycc(r, g, b uint8) (y, cb, cr float32) {
	fr, fg, fb := float32(r), float32(g), float32(b)
	return 0.299*fr + 0.587*fg + 0.114*fb - 128,
		-0.168736*fr - 0.331264*fg + 0.5*fb,
		0.5*fr - 0.418688*fg - 0.081312*fb
}

// mcu is one MCU's blocks quantized (four Y, then Cb and Cr; zig-zag
// order) with the masks of their non-zero AC coefficients.
type mcu struct {
	q  [6][64]int32
	nz [6]uint64
	// ok says q holds the blocks of the whole MCU at this place (not a
	// one-colour MCU, which is written without them, nor one at the
	// picture's edge).
	ok bool
}

// scan writes the entropy-coded data of rows [y0, y1) (a whole number of
// MCU rows, or up to the bottom) as one restart interval: MCUs of 16×16
// pixels, four Y blocks and one Cb and one Cr block each, the edges
// repeated past the image. An MCU of one colour is written from that
// colour; one whose pixels equal the MCU's on its left or above (a rule,
// a box's edge, a card's side) reuses that MCU's blocks; the rest are
// transformed.
func (e *encoder) scan(y0, y1 int) {
	img := e.img
	b := img.Rect
	// row[c] holds the MCU of column c above until this row's replaces
	// it, so row[c-1] is the MCU on the left.
	row := e.row
	for my := y0; my < y1; my += 16 {
		// repeating says the MCU on the left repeated the one on its
		// left, and e.rep holds its code.
		repeating := false
		for c, mx := 0, b.Min.X; mx < b.Max.X; c, mx = c+1, mx+16 {
			cur := &row[c]
			inside := mx+16 <= b.Max.X && my+16 <= b.Max.Y
			if inside && c > 0 && row[c-1].ok && e.same(mx, my, mx-16, my) {
				// The MCU repeats the one on its left, whose blocks
				// ended with the DC values these blocks end with: its
				// code is the same whatever came before that one, so
				// along a run (a rule, a box's edge) it is written once
				// and copied.
				*cur = row[c-1]
				if repeating {
					e.replay()
				} else {
					e.record(cur)
					repeating = true
				}
				continue
			}
			repeating = false
			switch {
			case inside && e.uniform(mx, my, 16):
				off := img.PixOffset(mx, my)
				y, u, v := ycc(img.Pix[off], img.Pix[off+1], img.Pix[off+2])
				qy, qu, qv := flatDC(y, &e.t.mul[0]), flatDC(u, &e.t.mul[1]), flatDC(v, &e.t.mul[1])
				if e.dc == [3]int32{qy, qu, qv} {
					// The colour of the MCU before (as quantized): every
					// DC difference is zero.
					e.emit(sameFlatMCU.bits, sameFlatMCU.size)
				} else {
					for range 4 {
						e.flat(qy, 0)
					}
					e.flat(qu, 1)
					e.flat(qv, 2)
				}
				cur.ok = false
				continue
			case inside && my > y0 && cur.ok && e.same(mx, my, mx, my-16):
			default:
				e.transform(cur, mx, my, inside)
				cur.ok = inside
			}
			for k := range 6 {
				e.block(&cur.q[k], cur.nz[k], max(0, k-3))
			}
		}
	}
	e.finish()
}

// record writes the blocks of m, keeping their code in e.rep.
func (e *encoder) record(m *mcu) {
	out, acc, n := e.out, e.acc, e.n
	e.out, e.acc, e.n = e.repBuf[:0], 0, 0
	for k := range 6 {
		e.block(&m.q[k], m.nz[k], max(0, k-3))
	}
	// Undo the stuffing: a zero after 0xff is never data.
	code := e.out[:0]
	for i := 0; i < len(e.out); i++ {
		code = append(code, e.out[i])
		if e.out[i] == 0xff {
			i++
		}
	}
	e.repBuf = e.out
	e.rep = repeat{bytes: code, tail: uint32(e.acc) & (1<<e.n - 1), tailN: uint8(e.n)}
	e.out, e.acc, e.n = out, acc, n
	e.replay()
}

// replay writes the code in e.rep again.
func (e *encoder) replay() {
	r := &e.rep
	b := r.bytes
	for ; len(b) >= 4; b = b[4:] {
		e.emit(binary.BigEndian.Uint32(b), 32)
	}
	for _, c := range b {
		e.emit(uint32(c), 8)
	}
	if r.tailN > 0 {
		e.emit(r.tail, r.tailN)
	}
}

// transform converts, transforms and quantizes the MCU at (mx, my) into
// m; inside says it lies wholly inside the picture.
func (e *encoder) transform(m *mcu, mx, my int, inside bool) {
	img := e.img
	b := img.Rect
	var ys [4][64]float32
	var cb, cr [64]float32
	// The offsets of the MCU's columns and rows, past the edges repeating
	// the last.
	var cols, rows [16]int
	for i := range 16 {
		cols[i] = 4 * (min(mx+i, b.Max.X-1) - b.Min.X)
		rows[i] = (min(my+i, b.Max.Y-1) - b.Min.Y) * img.Stride
	}
	for j := range 16 {
		row := img.Pix[rows[j]:]
		yk, cj := 2*(j/8), 8*(j/2)
		for i := range 16 {
			px := row[cols[i] : cols[i]+3 : cols[i]+3]
			y, u, v := ycc(px[0], px[1], px[2])
			ys[yk+i/8][8*(j%8)+i%8] = y
			cb[cj+i/2] += u
			cr[cj+i/2] += v
		}
	}
	for k := range 4 {
		if inside && e.uniform(mx+8*(k%2), my+8*(k/2), 8) {
			clear(m.q[k][:])
			m.q[k][0], m.nz[k] = flatDC(ys[k][0], &e.t.mul[0]), 0
			continue
		}
		fdctLines(&ys[k])
		m.nz[k] = quantize(&m.q[k], &ys[k], &e.t.mul[0])
	}
	for i := range cb {
		cb[i] *= 0.25
		cr[i] *= 0.25
	}
	fdctLines(&cb)
	m.nz[4] = quantize(&m.q[4], &cb, &e.t.mul[1])
	fdctLines(&cr)
	m.nz[5] = quantize(&m.q[5], &cr, &e.t.mul[1])
}

// same reports whether the MCUs at (x0, y0) and (x1, y1), both inside
// the picture, have the same pixels.
func (e *encoder) same(x0, y0, x1, y1 int) bool {
	img := e.img
	for j := range 16 {
		a, b := img.PixOffset(x0, y0+j), img.PixOffset(x1, y1+j)
		if !bytes.Equal(img.Pix[a:a+64], img.Pix[b:b+64]) {
			return false
		}
	}
	return true
}

// uniform reports whether the size×size square at (x, y), inside the
// image, is one colour (alpha counted: screens are opaque).
func (e *encoder) uniform(x, y, size int) bool {
	img := e.img
	off := img.PixOffset(x, y)
	first := img.Pix[off : off+4*size]
	// A row is one colour when shifting it by a pixel leaves it equal.
	if !bytes.Equal(first[4:], first[:len(first)-4]) {
		return false
	}
	for j := 1; j < size; j++ {
		o := off + j*img.Stride
		if !bytes.Equal(img.Pix[o:o+4*size], first) {
			return false
		}
	}
	return true
}

// quantize quantizes a transformed block d (natural order) into q in
// zig-zag order and returns the mask of q's non-zero AC coefficients.
func quantize(q *[64]int32, d *[64]float32, mul *[64]float32) (nz uint64) {
	for zig, n := range unzig {
		v := round(d[n] * mul[n])
		q[zig] = v
		nz |= uint64(uint32(v|-v)>>31) << zig
	}
	return nz &^ 1
}

// fdct is the floating-point AAN forward DCT in place: each output is the
// true coefficient times 8·aan[u]·aan[v], which the quantization
// multipliers divide out.
func fdct(d *[64]float32) {
	for i := 0; i < 64; i += 8 {
		fdct8(d, i, 1)
	}
	for i := range 8 {
		fdct8(d, i, 8)
	}
}

// fdctLines is fdct, with the same result to the bit, for a block of
// horizontal or vertical lines (a rule, a box's edge over a flat
// background: every row one value, or every row the same), which takes
// one pass of eight values instead of sixteen: a row of one value c comes
// out of the row pass as 8c and zeros, exactly (sums of equal values and
// differences of zero), and a column of zeros stays zeros; so for rows
// of one value only the first column's pass is left, and for equal rows
// only the first row's pass, each column then one value, 8 times it.
func fdctLines(d *[64]float32) {
	switch {
	case uniformRows(d):
		for j := 0; j < 64; j += 8 {
			d[j] *= 8
			clear(d[j+1 : j+8])
		}
		fdct8(d, 0, 8)
	case equalRows(d):
		fdct8(d, 0, 1)
		for i := range 8 {
			d[i] *= 8
		}
		clear(d[8:])
	default:
		fdct(d)
	}
}

// uniformRows reports whether each row of d is one value.
func uniformRows(d *[64]float32) bool {
	for j := 0; j < 64; j += 8 {
		c := d[j]
		for _, v := range d[j+1 : j+8] {
			if v != c {
				return false
			}
		}
	}
	return true
}

// equalRows reports whether every row of d equals the first.
func equalRows(d *[64]float32) bool {
	for j := 8; j < 64; j += 8 {
		if [8]float32(d[j:j+8]) != [8]float32(d[:8]) {
			return false
		}
	}
	return true
}

// fdct8 transforms the eight values of d at start, start+step, ….
func fdct8(d *[64]float32, start, step int) {
	p := func(k int) *float32 { return &d[start+k*step] }
	t0, t7 := *p(0)+*p(7), *p(0)-*p(7)
	t1, t6 := *p(1)+*p(6), *p(1)-*p(6)
	t2, t5 := *p(2)+*p(5), *p(2)-*p(5)
	t3, t4 := *p(3)+*p(4), *p(3)-*p(4)
	// Even part.
	t10, t13 := t0+t3, t0-t3
	t11, t12 := t1+t2, t1-t2
	*p(0), *p(4) = t10+t11, t10-t11
	z1 := (t12 + t13) * 0.707106781
	*p(2), *p(6) = t13+z1, t13-z1
	// Odd part.
	t10, t11, t12 = t4+t5, t5+t6, t6+t7
	z5 := (t10 - t12) * 0.382683433
	z2 := 0.541196100*t10 + z5
	z4 := 1.306562965*t12 + z5
	z3 := t11 * 0.707106781
	z11, z13 := t7+z3, t7-z3
	*p(5), *p(3) = z13+z2, z13-z2
	*p(1), *p(7) = z11+z4, z11-z4
}
