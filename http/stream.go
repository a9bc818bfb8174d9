package httpapi

import (
	"fmt"
	"net/http"

	"github.com/gorilla/mux"

	"phonefleet/commands/fleet"
	"phonefleet/http/kernel"
	"phonefleet/http/wire"
)

// registerStreamRoutes mounts the live-screen routes (/v1/devices/{deviceId}/stream and /live-session).
func (s *Server) registerStreamRoutes(r *mux.Router) {
	r.Handle("/devices/{deviceId}/stream", kernel.HandlerFunc(s.streamScreen)).Methods(http.MethodGet)
	r.Handle("/devices/{deviceId}/live-session", kernel.HandlerFunc(s.joinLiveSession)).Methods(http.MethodPost)
	r.Handle("/devices/{deviceId}/live-session", kernel.HandlerFunc(s.getLiveSession)).Methods(http.MethodGet)
	r.Handle("/devices/{deviceId}/live-session", kernel.HandlerFunc(s.endLiveSession)).Methods(http.MethodDelete)
}

// streamBoundary separates the parts of a screen stream.
const streamBoundary = "frame"

// streamScreen answers the device's screen as MJPEG
// (multipart/x-mixed-replace of JPEG parts) until the client goes away.
// Everything that can be refused is refused before the first byte, as a
// JSON error; once the stream has started, an end (the client left, the
// device can no longer be read) just ends the response.
func (s *Server) streamScreen(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	cmd := fleet.OpenStream{Auth: authOf(r), DeviceID: mux.Vars(r)["deviceId"]}
	var err error
	if cmd.FPS, err = intParam(q.Get("fps"), "fps"); err != nil {
		return err
	}
	if cmd.MaxWidth, err = intParam(q.Get("maxWidth"), "maxWidth"); err != nil {
		return err
	}
	if cmd.Quality, err = intParam(q.Get("quality"), "quality"); err != nil {
		return err
	}
	st, err := s.app.Fleet.OpenStream.Handle(r.Context(), cmd)
	if err != nil {
		return err
	}
	defer st.Close()
	h := w.Header()
	h.Set("Content-Type", "multipart/x-mixed-replace; boundary="+streamBoundary)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	var head []byte
	for {
		f, err := st.Next(r.Context())
		if err != nil {
			return nil
		}
		head = fmt.Appendf(head[:0], "--%s\r\nContent-Type: image/jpeg\r\nContent-Length: %d\r\nFrame-Seq: %d\r\n\r\n",
			streamBoundary, len(f.JPEG), f.Seq)
		if _, err := w.Write(head); err != nil {
			return nil
		}
		if _, err := w.Write(f.JPEG); err != nil {
			return nil
		}
		if _, err := w.Write([]byte("\r\n")); err != nil {
			return nil
		}
		if err := rc.Flush(); err != nil {
			return nil
		}
	}
}

// liveSessionRequest is the body of POST .../live-session.
type liveSessionRequest struct {
	Role       string `json:"role"`
	TTLSeconds int    `json:"ttlSeconds"`
}

func (s *Server) joinLiveSession(w http.ResponseWriter, r *http.Request) error {
	var body liveSessionRequest
	if _, err := kernel.DecodeOptionalJSON(r, &body); err != nil {
		return err
	}
	j, err := s.app.Fleet.JoinLiveSession.Handle(r.Context(), fleet.JoinLiveSession{Auth: authOf(r),
		DeviceID: mux.Vars(r)["deviceId"], Role: body.Role, TTLSeconds: body.TTLSeconds})
	if err != nil {
		return err
	}
	status := http.StatusOK
	if j.Created {
		status = http.StatusCreated
	}
	return kernel.WriteJSON(w, status, wire.NewLiveSession(j.Session))
}

func (s *Server) getLiveSession(w http.ResponseWriter, r *http.Request) error {
	v, err := s.app.Fleet.GetLiveSession.Handle(r.Context(), fleet.GetLiveSession{Auth: authOf(r), DeviceID: mux.Vars(r)["deviceId"]})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewLiveSession(v))
}

func (s *Server) endLiveSession(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.app.Fleet.EndLiveSession.Handle(r.Context(), fleet.EndLiveSession{Auth: authOf(r), DeviceID: mux.Vars(r)["deviceId"]}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
