package httpapi

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/http/kernel"
)

// screenshotJSON is the JSON form of a screenshot: the frame it was stored
// as, and the picture in base64 (PNG or JPEG), with the compact elements
// and, on a set-of-marks picture, which element each numbered box frames.
type screenshotJSON struct {
	screenJSON
	MimeType    string        `json:"mimeType"`
	ImageWidth  int           `json:"imageWidth"`
	ImageHeight int           `json:"imageHeight"`
	Image       []byte        `json:"image"`
	Elements    []elementJSON `json:"elements,omitempty"`
	Marks       []domain.Mark `json:"marks,omitempty"`
}

// elementJSON is one compact element; Mark is its box number on a
// set-of-marks picture.
type elementJSON struct {
	domain.Element
	Mark int `json:"mark,omitempty"`
}

func newElements(obs fleet.Observation) []elementJSON {
	if obs.Elements == nil {
		return nil
	}
	out := make([]elementJSON, len(obs.Elements))
	for i, e := range obs.Elements {
		out[i] = elementJSON{Element: e}
		if obs.Marks != nil {
			out[i].Mark = i + 1
		}
	}
	return out
}

// uiSnapshotJSON is the answer of GET /v1/devices/{deviceId}/snapshot
// without its whole tree (member root, written after these as the backend
// encoded it: kernel.WriteJSONWithRaw), or with ?elements= the compact
// list.
type uiSnapshotJSON struct {
	screenJSON
	Elements []elementJSON `json:"elements,omitempty"`
}

// screenJSON is what both observation answers begin with: the frame the
// screen was stored as, and the screen's size and state.
type screenJSON struct {
	FrameID    string    `json:"frameId"`
	DeviceID   string    `json:"deviceId"`
	ScreenHash string    `json:"screenHash"`
	CapturedAt time.Time `json:"capturedAt"`
	Width      int       `json:"width"`
	Height     int       `json:"height"`
	ScreenOn   bool      `json:"screenOn"`
}

func screenOf(obs fleet.Observation) screenJSON {
	return screenJSON{FrameID: obs.Frame.FrameID, DeviceID: obs.DeviceID, ScreenHash: obs.Frame.ScreenHash,
		CapturedAt: obs.Frame.CapturedAt, Width: obs.Width, Height: obs.Height, ScreenOn: obs.ScreenOn}
}

// budgetParams reads the observation budget of the screenshot and
// snapshot routes: quality (1–100), elements (all, interactive, none) and
// marks (a boolean).
func budgetParams(r *http.Request) (quality int, elements string, marks bool, err error) {
	q := r.URL.Query()
	if v := q.Get("quality"); v != "" {
		if quality, err = strconv.Atoi(v); err != nil || quality < 1 || quality > 100 {
			return 0, "", false, domain.Errorf(domain.CodeInvalidArgument, "quality must be an integer from 1 to 100")
		}
	}
	elements = q.Get("elements")
	if elements != "" && !slices.Contains([]string{"all", "interactive", "none"}, elements) {
		return 0, "", false, domain.Errorf(domain.CodeInvalidArgument, "elements must be all, interactive or none")
	}
	switch v := q.Get("marks"); v {
	case "", "false":
	case "true":
		marks = true
	default:
		return 0, "", false, domain.Errorf(domain.CodeInvalidArgument, "marks must be true or false")
	}
	return quality, elements, marks, nil
}

// pictureParams reads the query parameters of a route that answers a
// picture: format, one of allowed (the first is the default), then
// maxWidth (0 when absent). A bad format is reported before a bad maxWidth.
func pictureParams(r *http.Request, allowed ...string) (format string, maxWidth int, err error) {
	format = r.URL.Query().Get("format")
	if format == "" {
		format = allowed[0]
	} else if !slices.Contains(allowed, format) {
		return "", 0, domain.Errorf(domain.CodeInvalidArgument, "format must be one of %s", strings.Join(allowed, ", "))
	}
	maxWidth, err = intParam(r.URL.Query().Get("maxWidth"), "maxWidth")
	if err == nil && maxWidth < 0 {
		err = domain.Errorf(domain.CodeInvalidArgument, "maxWidth must be positive")
	}
	return format, maxWidth, err
}

// writePNG answers a PNG with the frame it shows in Frame-Id.
func writePNG(w http.ResponseWriter, frameID, screenHash string, png []byte) {
	writePicture(w, "image/png", frameID, screenHash, png)
}

// writePicture answers a picture with the frame it shows in Frame-Id.
func writePicture(w http.ResponseWriter, contentType, frameID, screenHash string, data []byte) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(len(data)))
	h.Set("Cache-Control", "no-store")
	h.Set("Frame-Id", frameID)
	h.Set("Screen-Hash", screenHash)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
}

// GET /v1/devices/{deviceId}/screenshot?format=png|jpeg|json&image=png|jpeg
// &maxWidth=&quality=&elements=&marks=
//
// format png or jpeg answers the picture itself; json the frame with the
// picture (image: its encoding) in base64, and the compact elements when
// asked. marks=true draws a numbered box on each element (interactive
// ones unless elements says all); it needs format=json, whose elements
// list says which element each number frames.
func (s *Server) getScreenshot(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	format, maxWidth, err := pictureParams(r, "png", "jpeg", "json")
	if err != nil {
		return err
	}
	quality, elements, marks, err := budgetParams(r)
	if err != nil {
		return err
	}
	image := r.URL.Query().Get("image")
	switch {
	case image != "" && format != "json":
		return domain.Errorf(domain.CodeInvalidArgument, "image picks the encoding inside format=json; use format=%s alone", format)
	case image != "" && image != "png" && image != "jpeg":
		return domain.Errorf(domain.CodeInvalidArgument, "image must be png or jpeg")
	case format != "json" && (marks || elements != ""):
		return domain.Errorf(domain.CodeInvalidArgument, "elements and marks come in the JSON answer: add format=json")
	}
	encoding := format
	if format == "json" {
		encoding = image
	}
	obs, err := s.app.Fleet.ObserveDevice.Handle(r.Context(), fleet.ObserveDevice{Auth: a, DeviceID: mux.Vars(r)["deviceId"],
		Image: true, MaxWidth: maxWidth, Format: encoding, Quality: quality, Elements: elements, Marks: marks,
		LeaseID: r.URL.Query().Get("leaseId")})
	if err != nil {
		return err
	}
	if format != "json" {
		writePicture(w, obs.ContentType, obs.Frame.FrameID, obs.Frame.ScreenHash, obs.Image)
		return nil
	}
	return kernel.WriteJSON(w, http.StatusOK, screenshotJSON{screenJSON: screenOf(obs), MimeType: obs.ContentType,
		ImageWidth: obs.ImageWidth, ImageHeight: obs.ImageHeight, Image: obs.Image, Elements: newElements(obs), Marks: obs.Marks})
}

// GET /v1/devices/{deviceId}/snapshot?elements=all|interactive|none
//
// Without elements, the whole element tree (root); with it, only the
// compact list (none: neither, the frame alone).
func (s *Server) getUISnapshot(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	q := r.URL.Query()
	if q.Get("marks") != "" || q.Get("quality") != "" {
		return domain.Errorf(domain.CodeInvalidArgument, "a UI snapshot has no picture; marks and quality belong to /screenshot")
	}
	_, elements, _, err := budgetParams(r)
	if err != nil {
		return err
	}
	obs, err := s.app.Fleet.ObserveDevice.Handle(r.Context(), fleet.ObserveDevice{Auth: a, DeviceID: mux.Vars(r)["deviceId"],
		Snapshot: elements == "", Elements: elements, LeaseID: q.Get("leaseId")})
	if err != nil {
		return err
	}
	return kernel.WriteJSONWithRaw(w, http.StatusOK, uiSnapshotJSON{screenJSON: screenOf(obs), Elements: newElements(obs)},
		"root", obs.Snapshot)
}

func (s *Server) getFrame(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	format, maxWidth, err := pictureParams(r, "json", "png")
	if err != nil {
		return err
	}
	fr, err := s.app.Fleet.GetFrame.Handle(r.Context(), fleet.GetFrame{Auth: a, FrameID: mux.Vars(r)["frameId"],
		FrameOptions: fleet.FrameOptions{Image: format == "png", Snapshot: format == "json", MaxWidth: maxWidth}})
	if err != nil {
		return err
	}
	if format == "png" {
		writePNG(w, fr.FrameID, fr.ScreenHash, fr.PNG)
		return nil
	}
	return kernel.WriteJSON(w, http.StatusOK, fr)
}
