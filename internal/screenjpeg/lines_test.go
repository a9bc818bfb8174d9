package screenjpeg

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestFdctLinesIsFdct: on blocks of horizontal lines (every row one
// value) and of vertical lines (every row the same), of level-shifted
// pixel values and of averaged chroma values, fdctLines gives fdct's
// coefficients to the bit; on other blocks it is fdct.
func TestFdctLinesIsFdct(t *testing.T) {
	r := rand.New(rand.NewPCG(28, 5))
	level := func() float32 {
		if r.IntN(2) == 0 {
			return float32(r.IntN(256)) - 128
		}
		return (float32(r.IntN(1021)) - 510) * 0.25 // a chroma average
	}
	for i := range 3000 {
		var d [64]float32
		switch i % 3 {
		case 0: // horizontal lines
			for j := 0; j < 64; j += 8 {
				v := level()
				if r.IntN(3) > 0 && j > 0 {
					v = d[j-8]
				}
				for k := range 8 {
					d[j+k] = v
				}
			}
		case 1: // vertical lines
			for k := range 8 {
				d[k] = level()
			}
			for j := 8; j < 64; j++ {
				d[j] = d[j%8]
			}
		default:
			for j := range d {
				d[j] = level()
			}
		}
		want, got := d, d
		fdct(&want)
		fdctLines(&got)
		for k := range got {
			if math.Float32bits(got[k]) != math.Float32bits(want[k]) {
				t.Fatalf("block %d %v:\ngot  %v\nwant %v", i, d, got, want)
			}
		}
	}
}
