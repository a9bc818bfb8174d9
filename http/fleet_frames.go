package httpapi

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/gorilla/mux"

	"phonefleet/commands"
	"phonefleet/domain"
	"phonefleet/http/kernel"
)

// screenshotJSON is the JSON form of a screenshot: the frame it was stored
// as, and the PNG in base64.
type screenshotJSON struct {
	FrameID    string    `json:"frameId"`
	DeviceID   string    `json:"deviceId"`
	ScreenHash string    `json:"screenHash"`
	CapturedAt time.Time `json:"capturedAt"`
	Width      int       `json:"width"`
	Height     int       `json:"height"`
	ScreenOn   bool      `json:"screenOn"`
	MimeType   string    `json:"mimeType"`
	Image      []byte    `json:"image"`
}

// uiSnapshotJSON is the answer of GET /v1/devices/{deviceId}/snapshot.
type uiSnapshotJSON struct {
	FrameID    string          `json:"frameId"`
	DeviceID   string          `json:"deviceId"`
	ScreenHash string          `json:"screenHash"`
	CapturedAt time.Time       `json:"capturedAt"`
	Width      int             `json:"width"`
	Height     int             `json:"height"`
	ScreenOn   bool            `json:"screenOn"`
	Root       json.RawMessage `json:"root"`
}

// pictureParams reads the query parameters of a route that answers a
// picture: format, one of allowed (the first is the default), then
// maxWidth (0 when absent). A bad format is reported before a bad maxWidth.
func pictureParams(r *http.Request, allowed ...string) (format string, maxWidth int, err error) {
	format = r.URL.Query().Get("format")
	if format == "" {
		format = allowed[0]
	} else if !slices.Contains(allowed, format) {
		return "", 0, domain.Errorf(domain.CodeInvalidArgument, "format must be %s or %s", allowed[0], allowed[1])
	}
	maxWidth, err = intParam(r.URL.Query().Get("maxWidth"), "maxWidth")
	if err == nil && maxWidth < 0 {
		err = domain.Errorf(domain.CodeInvalidArgument, "maxWidth must be positive")
	}
	return format, maxWidth, err
}

// writePNG answers a PNG with the frame it shows in Frame-Id.
func writePNG(w http.ResponseWriter, frameID, screenHash string, png []byte) {
	h := w.Header()
	h.Set("Content-Type", "image/png")
	h.Set("Content-Length", strconv.Itoa(len(png)))
	h.Set("Cache-Control", "no-store")
	h.Set("Frame-Id", frameID)
	h.Set("Screen-Hash", screenHash)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(png)
}

func (s *Server) getScreenshot(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	format, maxWidth, err := pictureParams(r, "png", "json")
	if err != nil {
		return err
	}
	obs, err := s.app.Commands.ObserveDevice.Handle(r.Context(), commands.ObserveDevice{Auth: a, DeviceID: mux.Vars(r)["deviceId"],
		Image: true, MaxWidth: maxWidth, LeaseID: r.URL.Query().Get("leaseId")})
	if err != nil {
		return err
	}
	if format == "png" {
		writePNG(w, obs.Frame.FrameID, obs.Frame.ScreenHash, obs.PNG)
		return nil
	}
	return kernel.WriteJSON(w, http.StatusOK, screenshotJSON{FrameID: obs.Frame.FrameID, DeviceID: obs.DeviceID,
		ScreenHash: obs.Frame.ScreenHash, CapturedAt: obs.Frame.CapturedAt, Width: obs.Width, Height: obs.Height,
		ScreenOn: obs.ScreenOn, MimeType: "image/png", Image: obs.PNG})
}

func (s *Server) getUISnapshot(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	obs, err := s.app.Commands.ObserveDevice.Handle(r.Context(), commands.ObserveDevice{Auth: a, DeviceID: mux.Vars(r)["deviceId"],
		Snapshot: true, LeaseID: r.URL.Query().Get("leaseId")})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, uiSnapshotJSON{FrameID: obs.Frame.FrameID, DeviceID: obs.DeviceID,
		ScreenHash: obs.Frame.ScreenHash, CapturedAt: obs.Frame.CapturedAt, Width: obs.Width, Height: obs.Height,
		ScreenOn: obs.ScreenOn, Root: obs.Snapshot})
}

func (s *Server) getFrame(w http.ResponseWriter, r *http.Request) error {
	a := authOf(r)
	format, maxWidth, err := pictureParams(r, "json", "png")
	if err != nil {
		return err
	}
	fr, err := s.app.Queries.GetFrame.Handle(r.Context(), commands.GetFrame{Auth: a, FrameID: mux.Vars(r)["frameId"],
		FrameOptions: commands.FrameOptions{Image: format == "png", Snapshot: format == "json", MaxWidth: maxWidth}})
	if err != nil {
		return err
	}
	if format == "png" {
		writePNG(w, fr.FrameID, fr.ScreenHash, fr.PNG)
		return nil
	}
	return kernel.WriteJSON(w, http.StatusOK, fr)
}
