package sim

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"hash/adler32"
	"hash/crc32"
	"image"
	"sync"
)

// The standard library's PNG encoder spends most of a full-size frame (it
// measured 55–95 ms for 1080×2400 on the 2-core build machine) choosing
// among five filters for every row. UI frames are flat colour and text, so
// a cheaper rule compresses them almost as well: a row equal to the one
// above is written with the Up filter (all zeros), any other row unfiltered.
// The deflate level is the one png.BestSpeed selects, and the rows are
// compressed in a fixed number of independent segments in parallel. The
// segment count is a constant, not the CPU count, so the bytes are the same
// on every machine.

const pngSegments = 4

var pngSig = []byte("\x89PNG\r\n\x1a\n")

func writeChunk(buf *bytes.Buffer, typ string, data []byte) {
	var hdr [8]byte
	binary.BigEndian.PutUint32(hdr[:4], uint32(len(data)))
	copy(hdr[4:], typ)
	buf.Write(hdr[:])
	buf.Write(data)
	crc := crc32.NewIEEE()
	crc.Write(hdr[4:])
	crc.Write(data)
	var sum [4]byte
	binary.BigEndian.PutUint32(sum[:], crc.Sum32())
	buf.Write(sum[:])
}

// rowBufs recycles the filtered scanlines between frames.
var rowBufs sync.Pool

// filteredRows returns the filtered scanlines of rows [y0, y1) of an opaque
// RGBA image as 8-bit RGB, in a buffer from rowBufs.
func filteredRows(img *image.RGBA, y0, y1 int) []byte {
	w := img.Rect.Dx()
	stride := 1 + 3*w
	n := stride * (y1 - y0)
	var out []byte
	if b, ok := rowBufs.Get().(*[]byte); ok && cap(*b) >= n {
		out = (*b)[:n]
	} else {
		out = make([]byte, n)
	}
	for y := y0; y < y1; y++ {
		line := out[(y-y0)*stride : (y-y0+1)*stride]
		src := img.Pix[(y-img.Rect.Min.Y)*img.Stride:]
		if y > img.Rect.Min.Y {
			prev := img.Pix[(y-1-img.Rect.Min.Y)*img.Stride:]
			if bytes.Equal(src[:4*w], prev[:4*w]) {
				line[0] = 2 // Up: the scanline is all zeros
				clear(line[1:])
				continue
			}
		}
		line[0] = 0 // None
		d := line[1:]
		for x := 0; x < w; x++ {
			d[3*x], d[3*x+1], d[3*x+2] = src[4*x], src[4*x+1], src[4*x+2]
		}
	}
	return out
}

var flatePool = sync.Pool{New: func() any {
	fw, err := flate.NewWriter(nil, flate.BestSpeed)
	if err != nil {
		// BestSpeed is a valid level; NewWriter cannot fail with it.
		panic("sim: flate writer: " + err.Error())
	}
	return fw
}}

// adler32Combine returns the Adler-32 of A‖B from the sums of A and B and
// the length of B (zlib's adler32_combine).
func adler32Combine(a1, a2 uint32, len2 int) uint32 {
	const base = 65521
	rem := uint32(len2 % base)
	sum1 := a1 & 0xffff
	sum2 := (rem * sum1) % base
	sum1 += (a2 & 0xffff) + base - 1
	sum2 += (a1 >> 16) + (a2 >> 16) + base - rem
	if sum1 >= base {
		sum1 -= base
	}
	if sum1 >= base {
		sum1 -= base
	}
	if sum2 >= base<<1 {
		sum2 -= base << 1
	}
	if sum2 >= base {
		sum2 -= base
	}
	return sum1 | sum2<<16
}

// encodeFastPNG encodes an opaque RGBA image as an 8-bit RGB PNG.
func encodeFastPNG(img *image.RGBA) ([]byte, error) {
	w, h := img.Rect.Dx(), img.Rect.Dy()
	type segment struct {
		n     int
		adler uint32
		comp  bytes.Buffer
		err   error
	}
	segs := make([]segment, pngSegments)
	var wg sync.WaitGroup
	for i := range segs {
		y0 := img.Rect.Min.Y + h*i/pngSegments
		y1 := img.Rect.Min.Y + h*(i+1)/pngSegments
		wg.Add(1)
		go func(s *segment, last bool) {
			defer wg.Done()
			raw := filteredRows(img, y0, y1)
			defer rowBufs.Put(&raw)
			s.n, s.adler = len(raw), adler32.Checksum(raw)
			fw := flatePool.Get().(*flate.Writer)
			defer flatePool.Put(fw)
			fw.Reset(&s.comp)
			if _, err := fw.Write(raw); err != nil {
				s.err = err
				return
			}
			// Every segment but the last ends on a byte boundary without
			// the final-block bit, so the segments concatenate into one
			// valid deflate stream.
			if last {
				s.err = fw.Close()
			} else {
				s.err = fw.Flush()
			}
		}(&segs[i], i == pngSegments-1)
	}
	wg.Wait()

	var out bytes.Buffer
	out.Write(pngSig)
	var ihdr [13]byte
	binary.BigEndian.PutUint32(ihdr[0:], uint32(w))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(h))
	ihdr[8], ihdr[9] = 8, 2 // 8-bit truecolour
	writeChunk(&out, "IHDR", ihdr[:])
	size := 6
	for i := range segs {
		size += segs[i].comp.Len()
	}
	idat := make([]byte, 0, size)
	idat = append(idat, 0x78, 0x01) // zlib header: deflate, 32K window, fastest
	sum := uint32(1)
	for i := range segs {
		if segs[i].err != nil {
			return nil, segs[i].err
		}
		idat = append(idat, segs[i].comp.Bytes()...)
		sum = adler32Combine(sum, segs[i].adler, segs[i].n)
	}
	idat = binary.BigEndian.AppendUint32(idat, sum)
	out.Grow(len(idat) + 64)
	writeChunk(&out, "IDAT", idat)
	writeChunk(&out, "IEND", nil)
	return out.Bytes(), nil
}
