package vrx

import (
	"bytes"
	"encoding/json"
	"image/jpeg"
	"image/png"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/gorilla/mux"

	"phonefleet/commands/fleet"
	"phonefleet/commands/runs"
	"phonefleet/domain"
	"phonefleet/http/kernel"
	"phonefleet/projections"
)

// Run is a run as its worker sees it. Every member is always present; a
// value the run does not have (yet) is null.
type Run struct {
	AgentRunID   string               `json:"agentRunId"`
	RunID        string               `json:"runId"`
	State        string               `json:"state"`
	DeviceID     string               `json:"deviceId"`
	Goal         string               `json:"goal"`
	StepSeq      int                  `json:"stepSeq"`
	MaxSteps     int                  `json:"maxSteps"`
	DeadlineAt   time.Time            `json:"deadlineAt"`
	SuccessCheck *domain.SuccessCheck `json:"successCheck"`
	// ParkedReason and ParkDeadlineAt are set while the run waits for a
	// person (awaiting_user).
	ParkedReason   *string    `json:"parkedReason"`
	ParkDeadlineAt *time.Time `json:"parkDeadlineAt"`
	Reason         *string    `json:"reason"`
	Detail         *string    `json:"detail"`
	CreatedAt      time.Time  `json:"createdAt"`
	EndedAt        *time.Time `json:"endedAt"`
}

func newRun(v projections.RunView) Run {
	out := Run{AgentRunID: v.AgentRunID, RunID: v.RunID, State: v.State, DeviceID: v.DeviceID, Goal: v.Goal,
		StepSeq: v.StepSeq, MaxSteps: v.MaxSteps, DeadlineAt: v.DeadlineAt.UTC(), SuccessCheck: v.SuccessCheck,
		Reason: v.Reason, Detail: v.Detail, CreatedAt: v.CreatedAt.UTC(), EndedAt: utc(v.EndedAt)}
	if v.State == domain.RunStateAwaitingUser {
		reason := v.ParkReason
		out.ParkedReason, out.ParkDeadlineAt = &reason, utc(v.ParkDeadlineAt)
	}
	return out
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// runAnswer is the answer of the routes that answer the run.
type runAnswer struct {
	OK  bool `json:"ok"`
	Run Run  `json:"run"`
}

func writeRun(w http.ResponseWriter, v projections.RunView) error {
	return kernel.WriteJSON(w, http.StatusOK, runAnswer{OK: true, Run: newRun(v)})
}

// GET /vrx/{runToken}/v1/run
func (h *Handler) getRun(w http.ResponseWriter, r *http.Request) error {
	v, err := h.app.Runs.RunInfo.Handle(r.Context(), runs.RunInfo{Access: access(r)})
	if err != nil {
		return err
	}
	return writeRun(w, v)
}

// Picture is an image inside a JSON answer.
type Picture struct {
	MimeType string `json:"mimeType"`
	Width    int    `json:"width"`
	Height   int    `json:"height"`
	// Data is the image, base64 in JSON.
	Data []byte `json:"data"`
}

// Observation is the answer of GET /v1/observe: the stored frame (its id is
// what an action's observedFrame names), the screen's size in pixels (the
// coordinate space of actions and element bounds), the elements and, when
// asked, the picture.
type Observation struct {
	OK         bool             `json:"ok"`
	FrameID    string           `json:"frameId"`
	ScreenHash string           `json:"screenHash"`
	CapturedAt time.Time        `json:"capturedAt"`
	DeviceID   string           `json:"deviceId"`
	Width      int              `json:"width"`
	Height     int              `json:"height"`
	ScreenOn   bool             `json:"screenOn"`
	StepSeq    int              `json:"stepSeq"`
	Elements   []domain.Element `json:"elements"`
	Image      *Picture         `json:"image,omitempty"`
}

// Query values the picture routes accept.
var (
	imageKinds    = []string{"png", "jpeg", "none"}
	elementKinds  = []string{"all", "interactive", "none"}
	pictureFormat = []string{"png", "jpeg"}
)

// maxPictureWidth bounds the maxWidth query parameter (the run commands' bound).
const maxPictureWidth = 4096

// pictureQuery reads maxWidth and quality, each absent (0) or in range.
func pictureQuery(r *http.Request) (maxWidth, quality int, err error) {
	q := r.URL.Query()
	if maxWidth, err = intQuery(q.Get("maxWidth"), "maxWidth", 1, maxPictureWidth); err != nil {
		return 0, 0, err
	}
	quality, err = intQuery(q.Get("quality"), "quality", 1, 100)
	return maxWidth, quality, err
}

// enumQuery reads the query parameter name, one of allowed, or def when it
// is absent.
func enumQuery(r *http.Request, name, def string, allowed []string) (string, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	if !slices.Contains(allowed, v) {
		return "", domain.Errorf(domain.CodeInvalidArgument, "%s must be one of %v", name, allowed)
	}
	return v, nil
}

func intQuery(v, name string, lo, hi int) (int, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, domain.Errorf(domain.CodeInvalidArgument, "%s must be an integer from %d to %d", name, lo, hi)
	}
	return n, nil
}

// GET /vrx/{runToken}/v1/observe?image=png|jpeg|none&maxWidth=&quality=&elements=all|interactive|none
//
// The picture is left out unless asked for (image defaults to none): a
// worker that reads elements should not pay for a screenshot.
func (h *Handler) observe(w http.ResponseWriter, r *http.Request) error {
	img, err := enumQuery(r, "image", "none", imageKinds)
	if err != nil {
		return err
	}
	elements, err := enumQuery(r, "elements", "interactive", elementKinds)
	if err != nil {
		return err
	}
	maxWidth, quality, err := pictureQuery(r)
	if err != nil {
		return err
	}
	obs, err := h.app.Runs.RunObserve.Handle(r.Context(), runs.RunObserve{Access: access(r), Image: img,
		MaxWidth: maxWidth, Quality: quality, Elements: elements})
	if err != nil {
		return err
	}
	out := Observation{OK: true, FrameID: obs.Frame.FrameID, ScreenHash: obs.Frame.ScreenHash,
		CapturedAt: obs.Frame.CapturedAt.UTC(), DeviceID: obs.DeviceID, Width: obs.Width, Height: obs.Height,
		ScreenOn: obs.ScreenOn, StepSeq: obs.StepSeq, Elements: obs.Elements}
	if out.Elements == nil {
		out.Elements = []domain.Element{}
	}
	if img != "none" && len(obs.Image) > 0 {
		out.Image = &Picture{MimeType: obs.ContentType, Width: obs.ImageWidth, Height: obs.ImageHeight, Data: obs.Image}
	}
	return kernel.WriteJSON(w, http.StatusOK, out)
}

// GET /vrx/{runToken}/v1/screenshot?format=png|jpeg&maxWidth=&quality=
//
// The image bytes themselves, with the frame they show in Frame-Id (usable
// as an action's observedFrame) and its Screen-Hash.
func (h *Handler) screenshot(w http.ResponseWriter, r *http.Request) error {
	format, err := enumQuery(r, "format", "png", pictureFormat)
	if err != nil {
		return err
	}
	maxWidth, quality, err := pictureQuery(r)
	if err != nil {
		return err
	}
	obs, err := h.app.Runs.RunObserve.Handle(r.Context(), runs.RunObserve{Access: access(r), Image: format,
		MaxWidth: maxWidth, Quality: quality, Elements: "none"})
	if err != nil {
		return err
	}
	ct := obs.ContentType
	if ct == "" {
		ct = "image/" + format
	}
	hd := w.Header()
	hd.Set("Content-Type", ct)
	hd.Set("Content-Length", strconv.Itoa(len(obs.Image)))
	hd.Set("Cache-Control", "no-store")
	hd.Set("Frame-Id", obs.Frame.FrameID)
	hd.Set("Screen-Hash", obs.Frame.ScreenHash)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(obs.Image)
	return nil
}

// FrameAnswer is the answer of GET /v1/frames/{frameId}: the frame, its UI
// element tree and, when asked, its picture.
type FrameAnswer struct {
	OK bool `json:"ok"`
	fleet.Frame
	Image *Picture `json:"image,omitempty"`
}

// GET /vrx/{runToken}/v1/frames/{frameId}?image=png|jpeg|none&maxWidth=&quality=
func (h *Handler) getFrame(w http.ResponseWriter, r *http.Request) error {
	img, err := enumQuery(r, "image", "none", imageKinds)
	if err != nil {
		return err
	}
	maxWidth, quality, err := pictureQuery(r)
	if err != nil {
		return err
	}
	fr, err := h.app.Runs.RunGetFrame.Handle(r.Context(), runs.RunGetFrame{Access: access(r), FrameID: mux.Vars(r)["frameId"],
		FrameOptions: fleet.FrameOptions{Image: img != "none", Snapshot: true, MaxWidth: maxWidth}})
	if err != nil {
		return err
	}
	out := FrameAnswer{OK: true, Frame: fr}
	out.CapturedAt, out.ExpiresAt = fr.CapturedAt.UTC(), fr.ExpiresAt.UTC()
	if img != "none" && len(fr.PNG) > 0 {
		if out.Image, err = picture(fr.PNG, img, quality); err != nil {
			return err
		}
	}
	return kernel.WriteJSON(w, http.StatusOK, out)
}

// picture returns a stored frame's PNG as the format asked for: as it is,
// or re-encoded as JPEG (a stored frame is kept as PNG only).
func picture(pngData []byte, format string, quality int) (*Picture, error) {
	if format == "png" {
		cfg, err := png.DecodeConfig(bytes.NewReader(pngData))
		if err != nil {
			return nil, err
		}
		return &Picture{MimeType: "image/png", Width: cfg.Width, Height: cfg.Height, Data: pngData}, nil
	}
	img, err := png.Decode(bytes.NewReader(pngData))
	if err != nil {
		return nil, err
	}
	if quality == 0 {
		quality = 70
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: quality}); err != nil {
		return nil, err
	}
	b := img.Bounds()
	return &Picture{MimeType: "image/jpeg", Width: b.Dx(), Height: b.Dy(), Data: buf.Bytes()}, nil
}

// actionRequest is the body of POST /v1/actions: the body of POST
// /v1/devices/{deviceId}/actions without leaseId (the run holds the lease)
// and agentRunId (the run's), plus an optional fencingToken (the run's
// lease's, refused as FENCING_TOKEN_STALE once another lease holds the
// device) and an optional deviceId (which must be the run's device).
type actionRequest struct {
	Action         string          `json:"action"`
	Arguments      json.RawMessage `json:"arguments"`
	IdempotencyKey string          `json:"idempotencyKey"`
	ObservedFrame  string          `json:"observedFrame"`
	FencingToken   int64           `json:"fencingToken"`
	DeviceID       string          `json:"deviceId"`
}

// ActionAnswer is the answer of POST /v1/actions: the action's receipt
// (attributed to the run's agentRunId and its starter) and whether it is
// the recorded outcome of an earlier request with the same key.
type ActionAnswer struct {
	OK       bool           `json:"ok"`
	Replayed bool           `json:"replayed"`
	Receipt  domain.Receipt `json:"receipt"`
}

// POST /vrx/{runToken}/v1/actions
func (h *Handler) act(w http.ResponseWriter, r *http.Request) error {
	var body actionRequest
	if err := kernel.DecodeJSON(r, &body); err != nil {
		return err
	}
	out, err := h.app.Runs.RunAct.Handle(r.Context(), runs.RunAct{Access: access(r), Action: body.Action,
		Arguments: body.Arguments, IdempotencyKey: body.IdempotencyKey, ObservedFrame: body.ObservedFrame,
		FencingToken: body.FencingToken, DeviceID: body.DeviceID})
	if err != nil {
		return err
	}
	if out.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	return kernel.WriteJSON(w, http.StatusOK, ActionAnswer{OK: true, Replayed: out.Replayed, Receipt: out.Receipt})
}

// needsUserRequest is the body of POST /v1/needs-user.
type needsUserRequest struct {
	Reason          string `json:"reason"`
	DeadlineSeconds int    `json:"deadlineSeconds"`
}

// POST /vrx/{runToken}/v1/needs-user
func (h *Handler) needsUser(w http.ResponseWriter, r *http.Request) error {
	var body needsUserRequest
	if err := kernel.DecodeJSON(r, &body); err != nil {
		return err
	}
	v, err := h.app.Runs.RunNeedsUser.Handle(r.Context(), runs.RunNeedsUser{Access: access(r), Reason: body.Reason,
		DeadlineSeconds: body.DeadlineSeconds})
	if err != nil {
		return err
	}
	return writeRun(w, v)
}

// finishRequest is the body of POST /v1/finish.
type finishRequest struct {
	State  string `json:"state"`
	Reason string `json:"reason"`
	Detail string `json:"detail"`
}

// POST /vrx/{runToken}/v1/finish
func (h *Handler) finish(w http.ResponseWriter, r *http.Request) error {
	var body finishRequest
	if err := kernel.DecodeJSON(r, &body); err != nil {
		return err
	}
	v, err := h.app.Runs.RunFinish.Handle(r.Context(), runs.RunFinish{Access: access(r), State: body.State,
		Reason: body.Reason, Detail: body.Detail})
	if err != nil {
		return err
	}
	return writeRun(w, v)
}
