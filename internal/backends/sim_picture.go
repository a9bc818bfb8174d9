package backends

import (
	"encoding/json"
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
	var pickErr error
	var pick func(sim.Element) []sim.Mark
	// snapshot is the tree as JSON, made once for the marks and the
	// answer.
	var snapshot []byte
	if opts.Marks != nil {
		pick = func(root sim.Element) []sim.Mark {
			var ui domain.UIElement
			if snapshot, pickErr = json.Marshal(root); pickErr != nil {
				return nil
			}
			if pickErr = json.Unmarshal(snapshot, &ui); pickErr != nil {
				return nil
			}
			marks = opts.Marks(ui)
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
	if pickErr != nil {
		return domain.Observation{}, internal(pickErr)
	}
	obs := domain.Observation{ScreenHash: pic.ScreenHash, Width: m.Width, Height: m.Height, ScreenOn: s.phone.ScreenOn(),
		Image: pic.Data, ImageType: "image/png", ImageWidth: pic.Width, ImageHeight: pic.Height, Marks: marks}
	if popts.JPEG {
		obs.ImageType = "image/jpeg"
	}
	if snapshot == nil && opts.Snapshot {
		if snapshot, err = json.Marshal(pic.Root); err != nil {
			return obs, internal(err)
		}
	}
	obs.Snapshot = snapshot
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
