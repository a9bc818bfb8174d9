package httpapi

import (
	"bytes"
	"image"
	"image/jpeg"
	"image/png"
	"testing"

	"phonefleet/domain"
	"phonefleet/internal/sim"
	"phonefleet/testutil/fleettest"
)

// TestScreenshotBudget: the screenshot and snapshot routes take the
// observation budget (format, image, quality, maxWidth, elements, marks),
// each answer valid against the contract.
func TestScreenshotBudget(t *testing.T) {
	fs := newFleetServer(t, fleettest.Options{Devices: 1})
	dev := fs.env.DeviceIDs[0]
	base := "/v1/devices/" + dev

	t.Run("raw jpeg at 768", func(t *testing.T) {
		resp, b := fs.do(t, "GET", base+"/screenshot?format=jpeg&maxWidth=768&quality=60", "", 200)
		if ct := resp.Header.Get("Content-Type"); ct != "image/jpeg" {
			t.Fatalf("got %s; want image/jpeg", ct)
		}
		img, err := jpeg.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if got := img.Bounds().Size(); got.X != 768 {
			t.Errorf("got %v; want 768 wide", got)
		}
		if resp.Header.Get("Frame-Id") == "" {
			t.Error("no Frame-Id")
		}
	})

	t.Run("json jpeg with interactive elements", func(t *testing.T) {
		_, b := fs.do(t, "GET", base+"/screenshot?format=json&image=jpeg&maxWidth=540&elements=interactive", "", 200)
		got := decodeInto[screenshotJSON](t, b)
		if got.MimeType != "image/jpeg" || got.ImageWidth != 540 || len(got.Elements) == 0 || got.Marks != nil {
			t.Fatalf("got %s %d wide, %d elements, %d marks; want a 540-wide JPEG with elements and no marks",
				got.MimeType, got.ImageWidth, len(got.Elements), len(got.Marks))
		}
		if _, err := jpeg.Decode(bytes.NewReader(got.Image)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("json set of marks", func(t *testing.T) {
		_, b := fs.do(t, "GET", base+"/screenshot?format=json&marks=true", "", 200)
		got := decodeInto[screenshotJSON](t, b)
		if len(got.Marks) == 0 || len(got.Marks) != len(got.Elements) {
			t.Fatalf("got %d marks for %d elements", len(got.Marks), len(got.Elements))
		}
		img, err := png.Decode(bytes.NewReader(got.Image))
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range got.Marks {
			e := got.Elements[i]
			if m.N != i+1 || e.Mark != i+1 || m.Ref != e.Ref || m.Bounds != e.Bounds {
				t.Fatalf("box %d: mark %+v, element %+v; want the same number, ref and bounds", i+1, m, e)
			}
		}
		// The last box is drawn over every other: its right edge has its colour.
		last := got.Marks[len(got.Marks)-1]
		x, y := last.Bounds[2]-1, (last.Bounds[1]+last.Bounds[3])/2
		want := sim.MarkColor(len(got.Marks) - 1)
		r, g, bl, _ := img.At(x, y).RGBA()
		if uint8(r>>8) != want.R || uint8(g>>8) != want.G || uint8(bl>>8) != want.B {
			t.Errorf("box %d at (%d, %d): got rgb(%d,%d,%d); want %v", last.N, x, y, r>>8, g>>8, bl>>8, want)
		}
	})

	t.Run("snapshot elements only", func(t *testing.T) {
		_, b := fs.do(t, "GET", base+"/snapshot?elements=all", "", 200)
		type answer struct {
			uiSnapshotJSON
			Root *domain.UIElement `json:"root"`
		}
		got := decodeInto[answer](t, b)
		if got.Root != nil || len(got.Elements) == 0 {
			t.Fatalf("got root %+v, %d elements; want only elements", got.Root, len(got.Elements))
		}
		_, b = fs.do(t, "GET", base+"/snapshot", "", 200)
		if got := decodeInto[answer](t, b); got.Root == nil || len(got.Root.Children) == 0 || got.FrameID == "" {
			t.Fatalf("the plain snapshot: %s; want the frame and its whole tree", b)
		}
	})

	for _, q := range []string{
		"/screenshot?format=gif", "/screenshot?format=png&marks=true", "/screenshot?format=png&image=jpeg",
		"/screenshot?format=json&image=gif", "/screenshot?format=jpeg&quality=0", "/screenshot?format=json&elements=some",
		"/screenshot?format=json&marks=yes", "/screenshot?format=json&marks=true&elements=none", "/snapshot?marks=true",
	} {
		t.Run("refused "+q, func(t *testing.T) {
			_, b := fs.do(t, "GET", base+q, "", 400)
			if code := errorCode(t, b); code != string(domain.CodeInvalidArgument) {
				t.Errorf("got %s; want invalid_argument", code)
			}
		})
	}
}

// TestLeaseResetOnReleaseREST: POST /lease with resetOnRelease, then DELETE
// /lease, leaves the phone's PNG byte-identical to a fresh phone's.
func TestLeaseResetOnReleaseREST(t *testing.T) {
	fs := newFleetServer(t, fleettest.Options{Devices: 1})
	dev := fs.env.DeviceIDs[0]
	base := "/v1/devices/" + dev
	p := fs.env.Phone(t, dev).Phone()
	fresh, err := sim.New(p.Model().Name, p.Serial())
	if err != nil {
		t.Fatal(err)
	}
	want, _ := fresh.Screenshot()
	_, b := fs.do(t, "POST", base+"/lease", `{"ttlSeconds": 60, "resetOnRelease": true}`, 201)
	lease := decodeInto[struct {
		LeaseID string `json:"leaseId"`
	}](t, b)
	fs.do(t, "POST", base+"/actions", `{"action":"open_app","arguments":{"package":"com.example.notes"},"idempotencyKey":"k1","leaseId":"`+lease.LeaseID+`"}`, 200)
	_, before := fs.do(t, "GET", base+"/screenshot", "", 200)
	if bytes.Equal(before, want) {
		t.Fatal("the phone looks fresh while leased; the test proves nothing")
	}
	fs.do(t, "DELETE", base+"/lease?leaseId="+lease.LeaseID, "", 204)
	_, after := fs.do(t, "GET", base+"/screenshot", "", 200)
	if !bytes.Equal(after, want) {
		img, _ := png.Decode(bytes.NewReader(after))
		t.Errorf("screenshot after release (%v) differs from a fresh phone's", boundsOf(img))
	}
}

func boundsOf(img image.Image) image.Rectangle {
	if img == nil {
		return image.Rectangle{}
	}
	return img.Bounds()
}
