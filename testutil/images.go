package testutil

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"image"
	_ "image/jpeg" // DecodeDataURL reads JPEG frames too
	_ "image/png"
	"strings"
)

// Helpers for the console's browser tests that look at pictures: a live
// screen read back from the page, an element's screenshot, a phone's
// screenshot from the API.

// DecodeDataURL decodes a base64 data URL of a PNG or JPEG picture, such
// as a canvas's toDataURL() of what an <img> shows.
func DecodeDataURL(u string) (image.Image, error) {
	head, b64, ok := strings.Cut(u, ",")
	if !ok || !strings.HasPrefix(head, "data:image/") || !strings.HasSuffix(head, ";base64") {
		return nil, fmt.Errorf("not a base64 data URL of a picture: %.40q", u)
	}
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, err
	}
	img, _, err := image.Decode(bytes.NewReader(b))
	return img, err
}

// Colours counts the distinct colours of img, stopping at limit: a phone's
// screen has many, an empty or blank box one or two.
func Colours(img image.Image, limit int) int {
	seen := map[[3]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			seen[[3]uint32{r >> 8, g >> 8, bl >> 8}] = true
			if len(seen) >= limit {
				return len(seen)
			}
		}
	}
	return len(seen)
}

// MeanDiff is the mean absolute difference per colour channel (0–255)
// between two pictures of the same size, 255 for pictures of different
// sizes: a JPEG frame of a screen is within a few units of a PNG of the
// same screen; two different screens are tens apart.
func MeanDiff(a, b image.Image) float64 {
	if a.Bounds().Size() != b.Bounds().Size() {
		return 255
	}
	var sum, n float64
	ab, bb := a.Bounds(), b.Bounds()
	for y := 0; y < ab.Dy(); y++ {
		for x := 0; x < ab.Dx(); x++ {
			r1, g1, b1, _ := a.At(ab.Min.X+x, ab.Min.Y+y).RGBA()
			r2, g2, b2, _ := b.At(bb.Min.X+x, bb.Min.Y+y).RGBA()
			for _, d := range []int{int(r1>>8) - int(r2>>8), int(g1>>8) - int(g2>>8), int(b1>>8) - int(b2>>8)} {
				sum += float64(max(d, -d))
			}
			n += 3
		}
	}
	return sum / n
}
