package sim

import (
	"fmt"
	"image"
)

// LiveFrame renders the screen as an image no wider than maxWidth (zero, or
// a width at or above the screen's, means full size), keeping the aspect
// ratio, and returns it with the ScreenHash it shows. It is for live
// streaming: the caller encodes the image as it likes (JPEG, say) without a
// PNG round trip, and the image is its own to keep. A negative maxWidth is
// an error wrapping ErrInvalidArgument.
//
// The phone's lock is held while the screen is laid out and painted, as for
// Screenshot, so an input never lands half-way through a frame; a narrower
// picture is painted at its own size.
func (p *Phone) LiveFrame(maxWidth int) (*image.RGBA, string, error) {
	if maxWidth < 0 {
		return nil, "", fmt.Errorf("%w: maxWidth %d must not be negative", ErrInvalidArgument, maxWidth)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	root, hash := p.screen()
	if maxWidth == 0 || maxWidth >= p.model.Width {
		img := image.NewRGBA(p.screenRect())
		renderInto(img, root)
		return img, hash, nil
	}
	img := image.NewRGBA(image.Rectangle{Max: scaledSize(p.model.Width, p.model.Height, maxWidth)})
	renderScaled(img, root, p.model.Width, p.model.Height)
	return img, hash, nil
}
