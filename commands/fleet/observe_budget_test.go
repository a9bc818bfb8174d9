package fleet_test

import (
	"bytes"
	"encoding/json"
	"image"
	"image/jpeg"
	"image/png"
	"testing"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/internal/sim"
	"phonefleet/testutil/fleettest"
)

// TestObserveBudget: the picture comes in the format and width asked for
// (decoded sizes), the elements in the mode asked for, and one frame is
// stored per screen whatever the budget.
func TestObserveBudget(t *testing.T) {
	env := fleettest.Start(t, fleettest.Options{Devices: 1})
	dev := env.DeviceIDs[0]
	observe := func(t *testing.T, cmd fleet.ObserveDevice) fleet.Observation {
		t.Helper()
		cmd.Auth, cmd.DeviceID = env.Auth, dev
		obs, err := env.Fleet.ObserveDevice().Handle(bg, cmd)
		if err != nil {
			t.Fatal(err)
		}
		return obs
	}
	full := observe(t, fleet.ObserveDevice{Image: true})
	w, h := full.Width, full.Height
	at768 := (h*768 + w/2) / w
	for _, tt := range []struct {
		name         string
		cmd          fleet.ObserveDevice
		contentType  string
		wantW, wantH int
	}{
		{"png full size", fleet.ObserveDevice{Image: true}, "image/png", w, h},
		{"png at 768", fleet.ObserveDevice{Image: true, MaxWidth: 768}, "image/png", 768, at768},
		{"jpeg at 768", fleet.ObserveDevice{Image: true, MaxWidth: 768, Format: "jpeg", Quality: 60}, "image/jpeg", 768, at768},
		{"jpeg full size", fleet.ObserveDevice{Image: true, Format: "jpeg"}, "image/jpeg", w, h},
	} {
		t.Run(tt.name, func(t *testing.T) {
			obs := observe(t, tt.cmd)
			if obs.ContentType != tt.contentType {
				t.Fatalf("got %s; want %s", obs.ContentType, tt.contentType)
			}
			var img image.Image
			var err error
			if tt.contentType == "image/jpeg" {
				img, err = jpeg.Decode(bytes.NewReader(obs.Image))
			} else {
				img, err = png.Decode(bytes.NewReader(obs.Image))
			}
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if got := img.Bounds().Size(); got != image.Pt(tt.wantW, tt.wantH) || obs.ImageWidth != tt.wantW || obs.ImageHeight != tt.wantH {
				t.Errorf("got decoded %v, reported %d×%d; want %d×%d", got, obs.ImageWidth, obs.ImageHeight, tt.wantW, tt.wantH)
			}
			// The screen did not change: every budget names the same frame.
			if obs.Frame.FrameID != full.Frame.FrameID {
				t.Errorf("got frame %s; want the screen's one frame %s", obs.Frame.FrameID, full.Frame.FrameID)
			}
		})
	}

	t.Run("elements", func(t *testing.T) {
		all := observe(t, fleet.ObserveDevice{Elements: "all"})
		inter := observe(t, fleet.ObserveDevice{Elements: "interactive"})
		none := observe(t, fleet.ObserveDevice{Elements: "none"})
		if len(inter.Elements) == 0 || len(all.Elements) <= len(inter.Elements) {
			t.Fatalf("got %d interactive of %d; want some, and fewer than all", len(inter.Elements), len(all.Elements))
		}
		refs := map[string]bool{}
		for _, e := range all.Elements {
			refs[e.Ref] = true
		}
		for _, e := range inter.Elements {
			if !refs[e.Ref] {
				t.Errorf("interactive element %s is not among all", e.Ref)
			}
			if !e.Clickable && !e.Editable && !e.Scrollable {
				t.Errorf("element %s (%s) is listed as interactive but is not", e.Ref, e.Class)
			}
		}
		if len(none.Elements) != 0 || none.Snapshot != nil || none.Image != nil {
			t.Errorf("elements=none answered %d elements, snapshot %d bytes, image %d bytes; want nothing", len(none.Elements), len(none.Snapshot), len(none.Image))
		}
		if all.Image != nil || all.Snapshot != nil {
			t.Errorf("elements alone answered a picture or the tree")
		}
	})

	t.Run("refusals", func(t *testing.T) {
		for _, cmd := range []fleet.ObserveDevice{
			{Image: true, Format: "gif"},
			{Image: true, Format: "jpeg", Quality: 101},
			{Elements: "some"},
			{Marks: true, Elements: "none"},
			{Image: true, MaxWidth: -1},
		} {
			cmd.Auth, cmd.DeviceID = env.Auth, dev
			if _, err := env.Fleet.ObserveDevice().Handle(bg, cmd); codeOf(err) != domain.CodeInvalidArgument {
				t.Errorf("%+v: got %v; want invalid_argument", cmd, err)
			}
		}
	})
}

// TestSetOfMarks: box k of a set-of-marks picture is drawn at the bounds
// of the element whose ref Marks[k-1] names, which is the k-th element
// listed, and that is the element of that ref in the UI tree of the same
// frame.
func TestSetOfMarks(t *testing.T) {
	env := fleettest.Start(t, fleettest.Options{Devices: 1})
	dev := env.DeviceIDs[0]
	for _, tt := range []struct {
		name     string
		format   string
		maxWidth int
		elements string
	}{
		{"png interactive", "png", 0, ""},
		{"png all at 540", "png", 540, "all"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			obs, err := env.Fleet.ObserveDevice().Handle(bg, fleet.ObserveDevice{Auth: env.Auth, DeviceID: dev, Marks: true,
				Format: tt.format, MaxWidth: tt.maxWidth, Elements: tt.elements, Snapshot: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(obs.Marks) == 0 || len(obs.Marks) != len(obs.Elements) {
				t.Fatalf("got %d marks for %d elements; want one each", len(obs.Marks), len(obs.Elements))
			}
			var root domain.UIElement
			if err := json.Unmarshal(obs.Snapshot, &root); err != nil {
				t.Fatal(err)
			}
			tree := map[string][4]int{}
			var walk func(e domain.UIElement)
			walk = func(e domain.UIElement) {
				tree[e.Ref] = e.Bounds
				for _, c := range e.Children {
					walk(c)
				}
			}
			walk(root)
			img, err := png.Decode(bytes.NewReader(obs.Image))
			if err != nil {
				t.Fatal(err)
			}
			scale := float64(obs.ImageWidth) / float64(obs.Width)
			sc := func(v int) int { return int(float64(v)*scale + 0.5) }
			checked := 0
			for i, m := range obs.Marks {
				k := i + 1
				if m.N != k || m.Ref != obs.Elements[i].Ref || m.Bounds != obs.Elements[i].Bounds || m.Bounds != tree[m.Ref] {
					t.Fatalf("mark %d = %+v; want number %d, ref %s and its bounds %v", k, m, k, obs.Elements[i].Ref, tree[obs.Elements[i].Ref])
				}
				b := m.Bounds
				x, y := sc(b[2])-1, (sc(b[1])+sc(b[3]))/2
				covered := false
				for _, later := range obs.Marks[k:] {
					lb := later.Bounds
					if x >= sc(lb[0]) && x < sc(lb[2]) && y >= sc(lb[1]) && y < sc(lb[3]) {
						covered = true
					}
				}
				if covered || b[0] >= b[2] || b[1] >= b[3] {
					continue
				}
				want := sim.MarkColor(i)
				r, g, bl, _ := img.At(x, y).RGBA()
				if uint8(r>>8) != want.R || uint8(g>>8) != want.G || uint8(bl>>8) != want.B {
					t.Errorf("box %d (ref %s) at (%d, %d): got rgb(%d,%d,%d); want %v", k, m.Ref, x, y, r>>8, g>>8, bl>>8, want)
				}
				checked++
			}
			if checked == 0 {
				t.Error("no box could be checked")
			}
		})
	}
}
