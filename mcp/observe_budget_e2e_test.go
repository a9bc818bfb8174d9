package mcp_test

import (
	"bytes"
	"image/jpeg"
	"image/png"
	"strings"
	"testing"

	"phonefleet/domain"
	"phonefleet/internal/sim"
)

// budgetScreen is what observe answers beside the image, with the
// set-of-marks fields.
type budgetScreen struct {
	FrameID string `json:"frameId"`
	Width   int    `json:"width"`
	Height  int    `json:"height"`
	Image   *struct {
		Width  int `json:"width"`
		Height int `json:"height"`
	} `json:"image"`
	Elements []struct {
		Ref    string `json:"ref"`
		Bounds [4]int `json:"bounds"`
		Mark   int    `json:"mark"`
	} `json:"elements"`
	Marks []domain.Mark `json:"marks"`
}

// TestObserveBudgetAndCleanHandOver drives the observation budget and
// resetOnRelease through the official go-sdk client, each answer validated
// against its outputSchema: a set-of-marks image whose box k is drawn at
// the bounds of the element whose ref marks[k-1] names (and which carries
// mark k); a JPEG at 768 px; and a lease acquired with resetOnRelease that,
// once released, leaves a phone whose screenshot is byte-identical to a
// fresh phone's of the same model and serial.
func TestObserveBudgetAndCleanHandOver(t *testing.T) {
	svc := startService(t, 2)
	var i int
	for _, cl := range clients {
		if !strings.HasPrefix(cl.name, "go-sdk/") {
			continue
		}
		dev := svc.fleet.DeviceIDs[i]
		i++
		t.Run(cl.name, func(t *testing.T) {
			c := newChecker(t, cl.connect(t, svc.url, ""))

			var marked budgetScreen
			r := c.call(t, "observe", map[string]any{"deviceId": dev, "marks": true}, &marked)
			if len(marked.Marks) == 0 || len(r.images) != 1 {
				t.Fatalf("got %d marks, %d images; want marks and one image", len(marked.Marks), len(r.images))
			}
			img, err := png.Decode(bytes.NewReader(r.images[0]))
			if err != nil {
				t.Fatal(err)
			}
			byRef := map[string]int{}
			for _, e := range marked.Elements {
				byRef[e.Ref] = e.Mark
			}
			for k, m := range marked.Marks {
				if m.N != k+1 || byRef[m.Ref] != k+1 {
					t.Errorf("box %d: mark %+v, element %s has mark %d; want %d on both", k+1, m, m.Ref, byRef[m.Ref], k+1)
				}
			}
			// The last box is drawn over every other one: the middle of its
			// right edge has its colour.
			last := marked.Marks[len(marked.Marks)-1]
			x, y := last.Bounds[2]-1, (last.Bounds[1]+last.Bounds[3])/2
			want := sim.MarkColor(len(marked.Marks) - 1)
			if r, g, b, _ := img.At(x, y).RGBA(); uint8(r>>8) != want.R || uint8(g>>8) != want.G || uint8(b>>8) != want.B {
				t.Errorf("box %d (ref %s) at (%d, %d): got rgb(%d,%d,%d); want %v", last.N, last.Ref, x, y, r>>8, g>>8, b>>8, want)
			}

			var small budgetScreen
			r = c.call(t, "observe", map[string]any{"deviceId": dev, "format": "jpeg", "maxWidth": 768, "quality": 60, "elements": "none"}, &small)
			if len(r.images) != 1 {
				t.Fatalf("got %d images; want 1", len(r.images))
			}
			jp, err := jpeg.Decode(bytes.NewReader(r.images[0]))
			if err != nil {
				t.Fatalf("the jpeg answer does not decode: %v", err)
			}
			if jp.Bounds().Dx() != 768 || small.Image == nil || small.Image.Width != 768 || len(small.Elements) != 0 {
				t.Errorf("got a %v JPEG, image %+v, %d elements; want 768 wide and no elements", jp.Bounds(), small.Image, len(small.Elements))
			}

			p := svc.fleet.Phone(t, dev).Phone()
			fresh, err := sim.New(p.Model().Name, p.Serial())
			if err != nil {
				t.Fatal(err)
			}
			freshPNG, _ := fresh.Screenshot()
			var lease struct {
				LeaseID string `json:"leaseId"`
			}
			c.call(t, "acquire_lease", map[string]any{"deviceId": dev, "resetOnRelease": true}, &lease)
			c.call(t, "open_app", map[string]any{"deviceId": dev, "leaseId": lease.LeaseID, "package": sim.PkgNotes}, nil)
			r = c.call(t, "observe", map[string]any{"deviceId": dev, "elements": "none"}, nil)
			if bytes.Equal(r.images[0], freshPNG) {
				t.Fatal("the phone looks fresh while leased; the test proves nothing")
			}
			c.call(t, "release_lease", map[string]any{"deviceId": dev, "leaseId": lease.LeaseID}, nil)
			r = c.call(t, "observe", map[string]any{"deviceId": dev, "elements": "none"}, nil)
			if !bytes.Equal(r.images[0], freshPNG) {
				t.Error("after release with resetOnRelease the screenshot differs from a fresh phone's")
			}
		})
	}
}
