package backends

import (
	"strconv"

	"phonefleet/domain"
	"phonefleet/internal/sim"
)

// observePicture is Observe for a JPEG or a set-of-marks picture: the sim
// draws picture, element tree and marks of one screen under one lock, and
// encodes the JPEG from the rendered frame (never from a PNG).
func (s *SimDevice) observePicture(opts domain.ObserveOptions) (domain.Observation, error) {
	m := s.phone.Model()
	popts := sim.PictureOptions{MaxWidth: opts.MaxWidth, JPEG: opts.Format == domain.ImageJPEG, Quality: opts.Quality,
		State: opts.Replay}
	if popts.JPEG && popts.Quality == 0 {
		popts.Quality = domain.DefaultJPEGQuality
	}
	var marks []domain.Mark
	var pick func(sim.Element) []sim.Mark
	if opts.Marks != nil {
		pick = func(root sim.Element) []sim.Mark {
			marks = opts.Marks(uiTree(&root))
			out := make([]sim.Mark, len(marks))
			for i, mk := range marks {
				out[i] = sim.Mark{Label: markLabel(mk), Bounds: sim.Bounds(mk.Bounds)}
			}
			return out
		}
	}
	pic, err := s.phone.Picture(popts, pick)
	if err != nil {
		return domain.Observation{}, mapSimError(err)
	}
	obs := domain.Observation{ScreenHash: pic.ScreenHash, Width: m.Width, Height: m.Height, ScreenOn: s.phone.ScreenOn(),
		Image: pic.Data, ImageType: "image/png", ImageWidth: pic.Width, ImageHeight: pic.Height, Marks: marks}
	if popts.JPEG {
		obs.ImageType = "image/jpeg"
	}
	if opts.Marks != nil || opts.Snapshot {
		// The tree comes with a set-of-marks picture (see
		// domain.ObserveOptions.Marks).
		obs.Snapshot = s.snapshot(&pic.Root)
	}
	obs.Replay = pic.State
	return obs, nil
}

// markLabel is the text drawn on a mark's box: its number.
func markLabel(m domain.Mark) string { return strconv.Itoa(m.N) }

// scaledSize is the size of a picture of model m shrunk to width w, as
// the sim computes it.
func scaledSize(m sim.Model, w int) (int, int) {
	return w, max(1, (m.Height*w+m.Width/2)/m.Width)
}

// NewSimDevice adapts a phone outside any host (benchmarks and tests that
// need no database).
func NewSimDevice(p *sim.Phone) *SimDevice { return newSimDevice(p) }

// uiTree converts the sim's element tree to the domain's, field by field
// (the two have the same fields and the same JSON), all the nodes below
// the root in one allocation. It replaces a JSON round trip that cost a
// set-of-marks picture more than drawing its marks.
func uiTree(root *sim.Element) domain.UIElement {
	n := 0
	var count func(e *sim.Element)
	count = func(e *sim.Element) {
		n += len(e.Children)
		for i := range e.Children {
			count(&e.Children[i])
		}
	}
	count(root)
	slab := make([]domain.UIElement, n)
	var conv func(dst *domain.UIElement, e *sim.Element)
	conv = func(dst *domain.UIElement, e *sim.Element) {
		*dst = domain.UIElement{Ref: e.Ref, Class: e.Class, Package: e.Package, ResourceID: e.ResourceID, Text: e.Text,
			Hint: e.Hint, ContentDesc: e.ContentDesc, Bounds: e.Bounds, Clickable: e.Clickable,
			LongClickable: e.LongClickable, Focusable: e.Focusable, Focused: e.Focused, Enabled: e.Enabled,
			Checkable: e.Checkable, Checked: e.Checked, Scrollable: e.Scrollable, Password: e.Password}
		if len(e.Children) == 0 {
			return
		}
		k := len(e.Children)
		// The children's own slice, capped, so that appending to it never
		// writes over a neighbour's nodes.
		dst.Children, slab = slab[:k:k], slab[k:]
		for i := range e.Children {
			conv(&dst.Children[i], &e.Children[i])
		}
	}
	var out domain.UIElement
	conv(&out, root)
	return out
}
