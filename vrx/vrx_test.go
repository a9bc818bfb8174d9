package vrx_test

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"phonefleet/commands"
	"phonefleet/commands/cqrs"
	"phonefleet/commands/fleet"
	"phonefleet/commands/runs"
	"phonefleet/domain"
	httpapi "phonefleet/http"
	"phonefleet/http/apitest"
	"phonefleet/projections"
	"phonefleet/vrx"
)

// These tests drive the surface through the real server assembly (the
// chain, the router, the mount at /vrx/) over an application object whose
// run entry points are stand-ins: they prove the translation — query and
// body in, envelope and contract out. The end-to-end test in internal/app
// drives the real run commands.

const goodToken = "vrx_0192a9b4c5d6e7f8a9b0c1d2e3f4a5b6_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"

// standIn records what the surface asked of the application.
type standIn struct {
	observe []runs.RunObserve
	act     []runs.RunAct
	frame   []runs.RunGetFrame
	parked  []runs.RunNeedsUser
	finish  []runs.RunFinish
	// actErr, when set, is the answer of RunAct.
	actErr error
}

// refused answers like the run commands answer a token they refuse; each
// route's refusal names something different, so a byte-identical answer
// proves the surface renders it from nothing but the code.
func refused(what string) error { return domain.ErrDeviceNotFound("dev_" + what) }

func testPNG(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for x := 0; x < w; x++ {
		img.Set(x, x%h, color.RGBA{R: 200, A: 255})
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func (s *standIn) application(t *testing.T) *commands.Application {
	pic := testPNG(t, 40, 90)
	at := time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)
	view := projections.RunView{RunID: "run_1", AgentRunID: "arun_1", DeviceID: "dev_1", Goal: "open settings",
		Executor: domain.ExecutorExternal, State: domain.RunStateRunning, MaxSteps: 50, StepSeq: 2,
		DeadlineAt: at.Add(time.Hour), CreatedAt: at, UpdatedAt: at}
	app := &commands.Application{}
	app.Runs.RunInfo = cqrs.Fake[runs.RunInfo, projections.RunView](func(_ context.Context, c runs.RunInfo) (projections.RunView, error) {
		if c.Access.Token != goodToken {
			return projections.RunView{}, domain.ErrRunNotFound("run_x")
		}
		return view, nil
	})
	app.Runs.RunObserve = cqrs.Fake[runs.RunObserve, runs.RunObservation](func(_ context.Context, c runs.RunObserve) (runs.RunObservation, error) {
		if c.Access.Token != goodToken {
			return runs.RunObservation{}, refused("observe")
		}
		s.observe = append(s.observe, c)
		obs := runs.RunObservation{Frame: domain.FrameRef{FrameID: "frm_1", ScreenHash: "h1", CapturedAt: at},
			DeviceID: "dev_1", Width: 1080, Height: 2400, ScreenOn: true, StepSeq: 2,
			Elements: []domain.Element{{Ref: "e1", Class: "Button", Text: "OK", Bounds: [4]int{0, 0, 100, 50}, Clickable: true}}}
		if c.Elements == "none" {
			obs.Elements = nil
		}
		switch c.Image {
		case "png":
			obs.ContentType, obs.Image, obs.ImageWidth, obs.ImageHeight = "image/png", pic, 40, 90
		case "jpeg":
			obs.ContentType, obs.Image, obs.ImageWidth, obs.ImageHeight = "image/jpeg", []byte{0xff, 0xd8, 0xff, 0xd9}, 40, 90
		}
		return obs, nil
	})
	app.Runs.RunAct = cqrs.Fake[runs.RunAct, fleet.ActOutcome](func(_ context.Context, c runs.RunAct) (fleet.ActOutcome, error) {
		if c.Access.Token != goodToken {
			return fleet.ActOutcome{}, refused("act")
		}
		s.act = append(s.act, c)
		if s.actErr != nil {
			return fleet.ActOutcome{}, s.actErr
		}
		return fleet.ActOutcome{Replayed: c.IdempotencyKey == "again", Receipt: domain.Receipt{IdempotencyKey: c.IdempotencyKey,
			ActionID: "act_1", DeviceID: "dev_1", AgentRunID: "arun_1", State: "committed",
			Actor: domain.ReceiptActor{APIKeyID: "key_1"}, Action: domain.ActionType(c.Action), Arguments: c.Arguments,
			ObservedFrame: c.ObservedFrame, Timestamp: at}}, nil
	})
	app.Runs.RunGetFrame = cqrs.Fake[runs.RunGetFrame, fleet.Frame](func(_ context.Context, c runs.RunGetFrame) (fleet.Frame, error) {
		if c.Access.Token != goodToken {
			return fleet.Frame{}, refused("frame")
		}
		s.frame = append(s.frame, c)
		if c.FrameID != "frm_1" {
			return fleet.Frame{}, domain.Errorf(domain.CodeFrameNotFound, "no frame %s is readable", c.FrameID)
		}
		fr := fleet.Frame{FrameID: "frm_1", DeviceID: "dev_1", ScreenHash: "h1", Width: 1080, Height: 2400,
			CapturedAt: at, ExpiresAt: at.Add(24 * time.Hour),
			Snapshot: json.RawMessage(`{"ref":"r0","class":"FrameLayout","bounds":[0,0,1080,2400],"enabled":true}`)}
		if c.Image {
			fr.PNG = pic
		}
		return fr, nil
	})
	app.Runs.RunNeedsUser = cqrs.Fake[runs.RunNeedsUser, projections.RunView](func(_ context.Context, c runs.RunNeedsUser) (projections.RunView, error) {
		if c.Access.Token != goodToken {
			return projections.RunView{}, refused("park")
		}
		s.parked = append(s.parked, c)
		v := view
		deadline := at.Add(15 * time.Minute)
		v.State, v.ParkReason, v.ParkDeadlineAt = domain.RunStateAwaitingUser, c.Reason, &deadline
		return v, nil
	})
	app.Runs.RunFinish = cqrs.Fake[runs.RunFinish, projections.RunView](func(_ context.Context, c runs.RunFinish) (projections.RunView, error) {
		if c.Access.Token != goodToken {
			return projections.RunView{}, refused("finish")
		}
		s.finish = append(s.finish, c)
		v := view
		ended, reason := at.Add(time.Minute), c.Reason
		v.State, v.EndedAt, v.Reason = c.State, &ended, &reason
		return v, nil
	})
	return app
}

// server returns the whole HTTP edge with the surface mounted, as the
// wiring builds it.
func server(t *testing.T, app *commands.Application) http.Handler {
	t.Helper()
	return httpapi.New(httpapi.Deps{Logger: slog.New(slog.DiscardHandler), VRX: vrx.New(app)}).Handler()
}

func request(method, path, body string) *http.Request {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r := httptest.NewRequest(method, path, rd)
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	return r
}

// TestSurfaceAnswersMatchTheContract sends every route its successes and
// its refusals and checks each answer against the served document.
func TestSurfaceAnswersMatchTheContract(t *testing.T) {
	s := &standIn{}
	h := server(t, s.application(t))
	v := apitest.FromHandler(t, h)
	base := "/vrx/" + goodToken + "/v1"
	tests := []struct {
		name   string
		req    func() *http.Request
		status int
		code   string // error.code, when the answer is an error
		ctype  string // Content-Type when not application/json
	}{
		{name: "run", req: func() *http.Request { return request("GET", base+"/run", "") }, status: 200},
		{name: "observe without a picture", req: func() *http.Request { return request("GET", base+"/observe", "") }, status: 200},
		{name: "observe with a JPEG", req: func() *http.Request {
			return request("GET", base+"/observe?image=jpeg&maxWidth=200&quality=50&elements=all", "")
		}, status: 200},
		{name: "observe with a PNG and no elements", req: func() *http.Request { return request("GET", base+"/observe?image=png&elements=none", "") }, status: 200},
		{name: "observe with a bad image", req: func() *http.Request { return request("GET", base+"/observe?image=gif", "") }, status: 400, code: "INVALID_ACTION"},
		{name: "observe with a bad maxWidth", req: func() *http.Request { return request("GET", base+"/observe?maxWidth=0", "") }, status: 400, code: "INVALID_ACTION"},
		{name: "screenshot", req: func() *http.Request { return request("GET", base+"/screenshot", "") }, status: 200, ctype: "image/png"},
		{name: "screenshot as JPEG", req: func() *http.Request { return request("GET", base+"/screenshot?format=jpeg&maxWidth=300", "") }, status: 200, ctype: "image/jpeg"},
		{name: "screenshot in a bad format", req: func() *http.Request { return request("GET", base+"/screenshot?format=json", "") }, status: 400, code: "INVALID_ACTION"},
		{name: "frame", req: func() *http.Request { return request("GET", base+"/frames/frm_1", "") }, status: 200},
		{name: "frame with its PNG", req: func() *http.Request { return request("GET", base+"/frames/frm_1?image=png", "") }, status: 200},
		{name: "frame as JPEG", req: func() *http.Request { return request("GET", base+"/frames/frm_1?image=jpeg&quality=80", "") }, status: 200},
		{name: "unknown frame", req: func() *http.Request { return request("GET", base+"/frames/frm_2", "") }, status: 404, code: "FRAME_UNAVAILABLE"},
		{name: "action", req: func() *http.Request {
			return request("POST", base+"/actions", `{"action":"tap","arguments":{"x":10,"y":20},"idempotencyKey":"k1","observedFrame":"frm_1","fencingToken":7,"deviceId":"dev_1","leaseId":"ignored"}`)
		}, status: 200},
		{name: "replayed action", req: func() *http.Request {
			return request("POST", base+"/actions", `{"action":"tap","arguments":{"x":10,"y":20},"idempotencyKey":"again"}`)
		}, status: 200},
		{name: "action with unreadable JSON", req: func() *http.Request { return request("POST", base+"/actions", `{"action":`) }, status: 400, code: "INVALID_ACTION"},
		{name: "action with a wrongly typed fencing token", req: func() *http.Request {
			return request("POST", base+"/actions", `{"action":"tap","idempotencyKey":"k","fencingToken":"7"}`)
		}, status: 400, code: "INVALID_ACTION"},
		{name: "action without a body", req: func() *http.Request { return request("POST", base+"/actions", "") }, status: 400, code: "INVALID_ACTION"},
		{name: "needs user", req: func() *http.Request {
			return request("POST", base+"/needs-user", `{"reason":"enter the one-time code","deadlineSeconds":600}`)
		}, status: 200},
		{name: "finish", req: func() *http.Request {
			return request("POST", base+"/finish", `{"state":"succeeded","reason":"done","detail":"settings open"}`)
		}, status: 200},
		{name: "refused token", req: func() *http.Request { return request("GET", "/vrx/vrx_nothing/v1/run", "") }, status: 404, code: "DEVICE_NOT_FOUND"},
		{name: "2 MiB body with Content-Length", req: func() *http.Request {
			return request("POST", base+"/actions", `{"blob":"`+strings.Repeat("a", 2<<20)+`"}`)
		}, status: 413, code: "payload_too_large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := tt.req()
			resp, body := apitest.Do(t, h, req)
			if resp.StatusCode != tt.status {
				t.Fatalf("got status %d; want %d\nbody: %.500s", resp.StatusCode, tt.status, body)
			}
			v.Check(t, req, resp, body)
			want := "application/json"
			if tt.ctype != "" {
				want = tt.ctype
			}
			if got := resp.Header.Get("Content-Type"); got != want {
				t.Errorf("got Content-Type %q; want %q", got, want)
			}
			if tt.ctype != "" {
				return
			}
			var got struct {
				OK    *bool `json:"ok"`
				Error struct {
					Code string `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			if got.Error.Code != tt.code {
				t.Errorf("got error.code %q; want %q", got.Error.Code, tt.code)
			}
			if tt.code == "payload_too_large" {
				return // the control surface's answer, the same on every surface
			}
			if got.OK == nil || *got.OK != (tt.code == "") {
				t.Errorf("got ok %v; want %v", got.OK, tt.code == "")
			}
		})
	}

	// What reached the application.
	if len(s.act) < 2 {
		t.Fatalf("got %d actions; want the two accepted ones", len(s.act))
	}
	a := s.act[0]
	if a.Access.Token != goodToken || a.Action != "tap" || string(a.Arguments) != `{"x":10,"y":20}` || a.IdempotencyKey != "k1" ||
		a.ObservedFrame != "frm_1" || a.FencingToken != 7 || a.DeviceID != "dev_1" {
		t.Errorf("got action %+v; want the body's fields", a)
	}
	if i := slices.IndexFunc(s.observe, func(o runs.RunObserve) bool { return o.Image == "jpeg" && o.Elements == "all" }); i < 0 ||
		s.observe[i].MaxWidth != 200 || s.observe[i].Quality != 50 {
		t.Errorf("got observations %+v; want one with jpeg, maxWidth 200, quality 50, all elements", s.observe)
	}
	if s.observe[0].Image != "none" || s.observe[0].Elements != "interactive" {
		t.Errorf("got a plain observe as %+v; want image none and interactive elements", s.observe[0])
	}
	if len(s.parked) != 1 || s.parked[0].Reason != "enter the one-time code" || s.parked[0].DeadlineSeconds != 600 {
		t.Errorf("got needs-user %+v", s.parked)
	}
	if len(s.finish) != 1 || s.finish[0].State != "succeeded" || s.finish[0].Reason != "done" || s.finish[0].Detail != "settings open" {
		t.Errorf("got finish %+v", s.finish)
	}
}

// TestScreenshotIsTheImage checks the screenshot route answers the bytes
// the run saw, with the frame they are stored as.
func TestScreenshotIsTheImage(t *testing.T) {
	s := &standIn{}
	h := server(t, s.application(t))
	resp, body := apitest.Do(t, h, request("GET", "/vrx/"+goodToken+"/v1/screenshot", ""))
	if _, err := png.Decode(bytes.NewReader(body)); err != nil {
		t.Fatalf("got a body that is no PNG: %v", err)
	}
	if got := resp.Header.Get("Frame-Id"); got != "frm_1" {
		t.Errorf("got Frame-Id %q; want frm_1", got)
	}
	if s.observe[0].Elements != "none" || s.observe[0].Image != "png" {
		t.Errorf("got %+v; want a PNG and no elements asked for", s.observe[0])
	}
	_, body = apitest.Do(t, h, request("GET", "/vrx/"+goodToken+"/v1/frames/frm_1?image=jpeg", ""))
	var fr struct {
		Image struct {
			MimeType string `json:"mimeType"`
			Width    int    `json:"width"`
			Data     []byte `json:"data"`
		} `json:"image"`
	}
	if err := json.Unmarshal(body, &fr); err != nil {
		t.Fatal(err)
	}
	if fr.Image.MimeType != "image/jpeg" || fr.Image.Width != 40 || !bytes.HasPrefix(fr.Image.Data, []byte{0xff, 0xd8}) {
		t.Errorf("got frame image %s %d px (%d bytes); want the PNG re-encoded as a 40 px JPEG", fr.Image.MimeType, fr.Image.Width, len(fr.Image.Data))
	}
}

// comparable is an answer without what differs on every request (the
// request id, the date).
func comparable(resp *http.Response, body []byte) string {
	h := resp.Header.Clone()
	h.Del("X-Request-Id")
	h.Del("Date")
	var lines []string
	for k, v := range h {
		lines = append(lines, k+": "+strings.Join(v, ", "))
	}
	slices.Sort(lines)
	return resp.Status + "\n" + strings.Join(lines, "\n") + "\n" + string(body)
}

// TestDeviceNotFoundIsByteIdentical proves that every refusal of the
// credential, on every route, and every path or method the surface does
// not serve, is the same answer: an unknown token, a malformed one, an
// organisation API key in the path or in Authorization, and a stray path.
func TestDeviceNotFoundIsByteIdentical(t *testing.T) {
	h := server(t, (&standIn{}).application(t))
	v := apitest.FromHandler(t, h)
	unknown := "vrx_0192a9b4c5d6e7f8a9b0c1d2e3f4a5b7_BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB"
	apiKey := "pbk_0192a9b4c5d6e7f8_c2VjcmV0c2VjcmV0c2VjcmV0"
	type probe struct {
		name, method, path, body, authorization string
		documented                              bool
	}
	var probes []probe
	routes := []struct{ method, path, body string }{
		{"GET", "/v1/run", ""}, {"GET", "/v1/observe?image=png", ""}, {"GET", "/v1/screenshot", ""},
		{"GET", "/v1/frames/frm_1", ""}, {"POST", "/v1/actions", `{"action":"tap","arguments":{"x":1,"y":1},"idempotencyKey":"k"}`},
		{"POST", "/v1/needs-user", `{"reason":"r"}`}, {"POST", "/v1/finish", `{"state":"failed"}`},
	}
	for _, rt := range routes {
		for _, tok := range []struct{ name, token string }{{"unknown token", unknown}, {"malformed token", "not-a-token"},
			{"API key in the path", apiKey}, {"token with a slash-free oddity", "vrx_"}} {
			probes = append(probes, probe{tok.name + " " + rt.method + " " + rt.path, rt.method, "/vrx/" + tok.token + rt.path, rt.body, "", true})
		}
		probes = append(probes, probe{"API key as Authorization " + rt.method + " " + rt.path, rt.method, "/vrx/" + unknown + rt.path, rt.body, "Bearer " + apiKey, true})
	}
	probes = append(probes,
		probe{"stray path under a good token", "GET", "/vrx/" + goodToken + "/v1/nothing", "", "", false},
		probe{"stray version", "GET", "/vrx/" + goodToken + "/v2/run", "", "", false},
		probe{"the prefix alone", "GET", "/vrx/", "", "", false},
		probe{"the token alone", "GET", "/vrx/" + goodToken, "", "", false},
		probe{"wrong method on a served path", "DELETE", "/vrx/" + goodToken + "/v1/run", "", "", false},
		probe{"POST on a read", "POST", "/vrx/" + goodToken + "/v1/observe", `{}`, "", false},
		probe{"non-canonical path", "GET", "/vrx/" + goodToken + "/v1/../v1/run", "", "", false},
	)
	var first string
	for _, p := range probes {
		t.Run(p.name, func(t *testing.T) {
			req := request(p.method, p.path, p.body)
			if p.authorization != "" {
				req.Header.Set("Authorization", p.authorization)
			}
			resp, body := apitest.Do(t, h, req)
			got := comparable(resp, body)
			if first == "" {
				first = got
				if resp.StatusCode != 404 || !bytes.Contains(body, []byte(`"DEVICE_NOT_FOUND"`)) {
					t.Fatalf("got %s; want 404 DEVICE_NOT_FOUND", got)
				}
			}
			if got != first {
				t.Errorf("got\n%s\nwant the same answer as every refusal:\n%s", got, first)
			}
			if p.documented {
				v.Check(t, req, resp, body)
			} else {
				v.CheckSchema(t, "VrxDeviceNotFoundError", body)
			}
		})
	}
}

// TestAuthorizationIsNeverRead sends a good token with credentials that
// the control surface would refuse: the surface answers as without them.
func TestAuthorizationIsNeverRead(t *testing.T) {
	h := server(t, (&standIn{}).application(t))
	for _, auth := range []string{"", "Bearer garbage", "Bearer pbk_0192a9b4c5d6e7f8_c2VjcmV0", "Basic dXNlcjpwYXNz"} {
		req := request("GET", "/vrx/"+goodToken+"/v1/run", "")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, body := apitest.Do(t, h, req)
		if resp.StatusCode != 200 || resp.Header.Get("WWW-Authenticate") != "" {
			t.Errorf("with Authorization %q: got %d %s (WWW-Authenticate %q); want 200",
				auth, resp.StatusCode, body, resp.Header.Get("WWW-Authenticate"))
		}
	}
}

// TestOversizeBodiesAnswerAlike proves the two ways a body can be over the
// limit answer the same bytes: a declared Content-Length (refused by the
// chain before routing) and a chunked body (refused when the surface reads
// past the limit).
func TestOversizeBodiesAnswerAlike(t *testing.T) {
	h := server(t, (&standIn{}).application(t))
	big := `{"action":"tap","idempotencyKey":"` + strings.Repeat("k", 2<<20) + `"}`
	declared := request("POST", "/vrx/"+goodToken+"/v1/actions", big)
	chunked := request("POST", "/vrx/"+goodToken+"/v1/actions", "")
	chunked.Body = io.NopCloser(strings.NewReader(big))
	chunked.ContentLength = -1
	chunked.TransferEncoding = []string{"chunked"}
	r1, b1 := apitest.Do(t, h, declared)
	r2, b2 := apitest.Do(t, h, chunked)
	if r1.StatusCode != 413 || comparable(r1, b1) != comparable(r2, b2) {
		t.Errorf("got\n%s\nfor a declared length and\n%s\nfor a chunked body; want one 413", comparable(r1, b1), comparable(r2, b2))
	}
}

// TestPanicAnswersInTheSurfaceEnvelope: a fault inside a handler is
// rendered by the surface's writer, not the control surface's.
func TestPanicAnswersInTheSurfaceEnvelope(t *testing.T) {
	app := (&standIn{}).application(t)
	app.Runs.RunFinish = cqrs.Fake[runs.RunFinish, projections.RunView](func(context.Context, runs.RunFinish) (projections.RunView, error) {
		panic("boom")
	})
	h := server(t, app)
	resp, body := apitest.Do(t, h, request("POST", "/vrx/"+goodToken+"/v1/finish", `{"state":"failed"}`))
	want := `{"ok":false,"error":{"code":"HARDWARE_OFFLINE","message":"internal error"}}`
	if resp.StatusCode != 503 || string(body) != want {
		t.Errorf("got %d %s; want 503 %s", resp.StatusCode, body, want)
	}
}

// TestActionFailuresAreTranslated checks an action's failure answers the
// device-surface code.
func TestActionFailuresAreTranslated(t *testing.T) {
	s := &standIn{actErr: domain.Errorf(domain.CodeStaleFrame, "the screen changed since observedFrame frm_1").With("frameId", "frm_2")}
	h := server(t, s.application(t))
	v := apitest.FromHandler(t, h)
	req := request("POST", "/vrx/"+goodToken+"/v1/actions", `{"action":"tap","arguments":{"x":1,"y":1},"idempotencyKey":"k","observedFrame":"frm_1"}`)
	resp, body := apitest.Do(t, h, req)
	want := `{"ok":false,"error":{"code":"STALE_FRAME","message":"the screen changed since observedFrame frm_1"}}`
	if resp.StatusCode != 409 || string(body) != want {
		t.Errorf("got %d %s; want 409 %s", resp.StatusCode, body, want)
	}
	v.Check(t, req, resp, body)
}

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestTheTokenNeverReachesTheAccessLog: the run token is a credential; the
// access log writes the path with {runToken} in its place, for served
// routes, refusals and stray paths alike.
func TestTheTokenNeverReachesTheAccessLog(t *testing.T) {
	logs := &syncBuffer{}
	h := httpapi.New(httpapi.Deps{Logger: slog.New(slog.NewJSONHandler(logs, nil)),
		VRX: vrx.New((&standIn{}).application(t))}).Handler()
	secret := goodToken[len(goodToken)-43:]
	for _, p := range []string{"/v1/run", "/v1/frames/frm_1", "/v1/nothing", ""} {
		apitest.Do(t, h, request("GET", "/vrx/"+goodToken+p, ""))
		apitest.Do(t, h, request("GET", "/vrx/not-a-token"+p, ""))
	}
	out := logs.String()
	if strings.Contains(out, secret) || strings.Contains(out, "not-a-token") {
		t.Errorf("the access log holds the token:\n%s", out)
	}
	if !strings.Contains(out, `"path":"/vrx/{runToken}/v1/frames/frm_1"`) {
		t.Errorf("got log\n%s\nwant the path with {runToken}", out)
	}
}
