package backends

import (
	"bytes"
	"context"
	"image"
	"image/jpeg"
	"image/png"

	"golang.org/x/image/draw"

	"phonefleet/domain"
)

// encodePicture shrinks img to maxWidth (when positive and smaller,
// keeping the aspect ratio as the sim does) and encodes it as a PNG, or a
// JPEG of quality (0: domain.DefaultJPEGQuality).
func encodePicture(img image.Image, maxWidth int, jpg bool, quality int) (data []byte, w, h int, err error) {
	w, h = img.Bounds().Dx(), img.Bounds().Dy()
	if maxWidth > 0 && maxWidth < w {
		nw, nh := maxWidth, max(1, (h*maxWidth+w/2)/w)
		dst := image.NewRGBA(image.Rect(0, 0, nw, nh))
		draw.ApproxBiLinear.Scale(dst, dst.Bounds(), img, img.Bounds(), draw.Src, nil)
		img, w, h = dst, nw, nh
	}
	var buf bytes.Buffer
	if jpg {
		if quality <= 0 {
			quality = domain.DefaultJPEGQuality
		}
		err = jpeg.Encode(&buf, img, &jpeg.Options{Quality: quality})
	} else {
		err = (&png.Encoder{CompressionLevel: png.BestSpeed}).Encode(&buf, img)
	}
	return buf.Bytes(), w, h, err
}

// adbRenderer draws an adb frame's scaled or JPEG pictures later from the
// full-size screencap PNG kept as its replay bytes (an observation that
// asked for a smaller or JPEG picture keeps no PNG of its own).
type adbRenderer struct{}

// RenderFrame implements domain.FrameRenderer. A UI snapshot cannot be
// redrawn (none is kept).
func (adbRenderer) RenderFrame(_ context.Context, replay []byte, opts domain.ObserveOptions) (domain.Observation, error) {
	img, err := png.Decode(bytes.NewReader(replay))
	if err != nil {
		return domain.Observation{}, internal(err)
	}
	w, h := img.Bounds().Dx(), img.Bounds().Dy()
	obs := domain.Observation{Width: w, Height: h, ScreenOn: true}
	if !opts.Image {
		return obs, nil
	}
	if opts.Marks != nil {
		return obs, domain.Errorf(domain.CodeCapabilityUnsupported, "adb devices do not draw set-of-marks pictures").
			With("capability", "marks")
	}
	jpg := opts.Format == domain.ImageJPEG
	if !jpg && (opts.MaxWidth <= 0 || opts.MaxWidth >= w) {
		obs.PNG, obs.Image, obs.ImageType, obs.ImageWidth, obs.ImageHeight = replay, replay, "image/png", w, h
		return obs, nil
	}
	data, iw, ih, err := encodePicture(img, opts.MaxWidth, jpg, opts.Quality)
	if err != nil {
		return obs, internal(err)
	}
	obs.Image, obs.ImageWidth, obs.ImageHeight, obs.ImageType = data, iw, ih, "image/png"
	if jpg {
		obs.ImageType = "image/jpeg"
	} else {
		obs.PNG = data
	}
	return obs, nil
}

var _ domain.FrameRenderer = adbRenderer{}
