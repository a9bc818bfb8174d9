package service

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"phonefleet/commands/runs"
	"phonefleet/domain"
	"phonefleet/http/apitest"
	"phonefleet/testutil"
)

// vrxClient talks to the running service over real HTTP: /v1 as the local
// operator (no credential), /vrx through a run's vrxBaseUrl only.
type vrxClient struct {
	t    *testing.T
	base string
	v    *apitest.Validator
}

// do sends a request and returns the answer; with check, it must be one
// the OpenAPI document describes.
func (c *vrxClient) do(method, url, body string, header map[string]string, check bool) (*http.Response, []byte) {
	c.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	if check {
		// Validate against the path as served (the document's templates
		// start at the origin).
		vreq := httptest.NewRequest(method, req.URL.RequestURI(), nil)
		c.v.Check(c.t, vreq, resp, b)
	}
	return resp, b
}

// json sends a request that must answer want and decodes the answer into out.
func (c *vrxClient) json(method, url, body string, want int, out any) {
	c.t.Helper()
	resp, b := c.do(method, url, body, nil, true)
	if resp.StatusCode != want {
		c.t.Fatalf("%s %s: got %d %s; want %d", method, url, resp.StatusCode, b, want)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			c.t.Fatalf("%s %s: %v in %s", method, url, err, b)
		}
	}
}

// vrxCode returns the error code of a device-surface answer.
func vrxCode(t *testing.T, body []byte) string {
	t.Helper()
	var e struct {
		OK    bool `json:"ok"`
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.OK {
		t.Fatalf("got %s; want a device-surface error", body)
	}
	return e.Error.Code
}

// sameAnswer is an answer without what differs on every request.
func sameAnswer(resp *http.Response, body []byte) string {
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

type vrxRun struct {
	OK  bool `json:"ok"`
	Run struct {
		AgentRunID     string  `json:"agentRunId"`
		RunID          string  `json:"runId"`
		State          string  `json:"state"`
		DeviceID       string  `json:"deviceId"`
		StepSeq        int     `json:"stepSeq"`
		ParkedReason   *string `json:"parkedReason"`
		ParkDeadlineAt *string `json:"parkDeadlineAt"`
		Reason         *string `json:"reason"`
	} `json:"run"`
}

type vrxObservation struct {
	OK       bool   `json:"ok"`
	FrameID  string `json:"frameId"`
	Width    int    `json:"width"`
	Height   int    `json:"height"`
	Elements []struct {
		Ref    string `json:"ref"`
		Bounds [4]int `json:"bounds"`
	} `json:"elements"`
	Image *struct {
		MimeType string `json:"mimeType"`
		Width    int    `json:"width"`
		Data     []byte `json:"data"`
	} `json:"image"`
}

type vrxAction struct {
	OK       bool           `json:"ok"`
	Replayed bool           `json:"replayed"`
	Receipt  domain.Receipt `json:"receipt"`
}

// TestExternalWorkerDrivesARunThroughVrx starts the service as `phonefleet
// serve` does (local mode, sim phones), starts external runs through the
// application object, and drives them through their vrxBaseUrl only, over
// real HTTP, every answer checked against the served OpenAPI document.
func TestExternalWorkerDrivesARunThroughVrx(t *testing.T) {
	a, base, c, sims := startWithSims(t, 3)
	ctx := testutil.Context(t)
	dev := func(i int) string { return sims[i] }

	// The starter: an API key, minted by the local operator, as REST
	// authenticates it.
	var minted struct {
		Token string `json:"token"`
		Key   struct {
			ID string `json:"id"`
		} `json:"key"`
	}
	c.json("POST", base+"/v1/api-keys", `{"name":"worker","scopes":["devices:read","devices:act","runs:start"]}`, 201, &minted)
	authOf := func(bearer string) domain.Auth {
		r := httptest.NewRequest("GET", "/v1/devices", nil)
		if bearer != "" {
			r.Header.Set("Authorization", "Bearer "+bearer)
		}
		auth, err := a.deps.Auth.Authenticate(r)
		if err != nil {
			t.Fatal(err)
		}
		return auth
	}
	keyAuth, operator := authOf(minted.Token), authOf("")
	if keyAuth.APIKeyID != minted.Key.ID {
		t.Fatalf("got key auth %+v; want key %s", keyAuth, minted.Key.ID)
	}
	start := func(auth domain.Auth, device, goal string) runs.StartedRun {
		t.Helper()
		started, err := a.app.Runs.StartRun.Handle(ctx, runs.StartRun{Auth: auth, DeviceID: device, Goal: goal,
			Executor: domain.ExecutorExternal})
		if err != nil {
			t.Fatalf("start a run on %s: %v", device, err)
		}
		if !strings.HasPrefix(started.VrxBaseURL, base+"/vrx/vrx_") {
			t.Fatalf("got vrxBaseUrl %q; want %s/vrx/<run token>", started.VrxBaseURL, base)
		}
		return started
	}

	// One answer for every refusal; the first unknown token sets it.
	unknownToken := "vrx_0192a9b4c5d6e7f8a9b0c1d2e3f4a5b6_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	resp, body := c.do("GET", base+"/vrx/"+unknownToken+"/v1/run", "", nil, true)
	refusal := sameAnswer(resp, body)
	if resp.StatusCode != 404 || vrxCode(t, body) != "DEVICE_NOT_FOUND" {
		t.Fatalf("unknown token: got %s; want 404 DEVICE_NOT_FOUND", refusal)
	}
	refused := func(t *testing.T, resp *http.Response, body []byte) {
		t.Helper()
		if got := sameAnswer(resp, body); got != refusal {
			t.Errorf("got\n%s\nwant the one refusal\n%s", got, refusal)
		}
	}

	var ended string // the vrxBaseUrl of a run that finished
	t.Run("observe, act, read a frame, finish", func(t *testing.T) {
		c.t = t
		started := start(keyAuth, dev(0), "tap the middle of the screen")
		vb := started.VrxBaseURL
		var run vrxRun
		c.json("GET", vb+"/v1/run", "", 200, &run)
		if run.Run.RunID != started.Run.RunID || run.Run.AgentRunID != started.Run.AgentRunID || run.Run.State != domain.RunStateRunning ||
			run.Run.DeviceID != dev(0) {
			t.Fatalf("got run %+v; want the started run, running on %s", run.Run, dev(0))
		}
		var obs vrxObservation
		c.json("GET", vb+"/v1/observe?image=jpeg&maxWidth=200&elements=all", "", 200, &obs)
		if obs.FrameID == "" || obs.Width == 0 || obs.Image == nil || obs.Image.MimeType != "image/jpeg" || obs.Image.Width > 200 {
			t.Fatalf("got observation %+v; want a frame and a JPEG at most 200 px wide", obs)
		}
		tap := fmt.Sprintf(`{"action":"tap","arguments":{"x":%d,"y":%d},"idempotencyKey":"vrx-step-1","observedFrame":%q}`,
			obs.Width/2, obs.Height/2, obs.FrameID)
		var act vrxAction
		c.json("POST", vb+"/v1/actions", tap, 200, &act)
		rc := act.Receipt
		if rc.State != "committed" || rc.AgentRunID != started.Run.AgentRunID || rc.Actor.APIKeyID != minted.Key.ID ||
			rc.Actor.UserID != "" || rc.DeviceID != dev(0) || rc.ObservedFrame != obs.FrameID || act.Replayed {
			t.Fatalf("got receipt %+v; want committed, the run's agentRunId %s, the starter key %s as actor",
				rc, started.Run.AgentRunID, minted.Key.ID)
		}
		// The same key again: the recorded outcome, nothing done twice.
		resp, b := c.do("POST", vb+"/v1/actions", tap, nil, true)
		var again vrxAction
		if err := json.Unmarshal(b, &again); err != nil || resp.StatusCode != 200 || !again.Replayed ||
			resp.Header.Get("Idempotent-Replayed") != "true" || again.Receipt.ActionID != rc.ActionID {
			t.Fatalf("retry: got %d %s; want the replayed receipt", resp.StatusCode, b)
		}
		// The receipt as the control surface records it.
		var stored domain.Receipt
		c.json("GET", base+"/v1/receipts/vrx-step-1", "", 200, &stored)
		if stored.AgentRunID != started.Run.AgentRunID || stored.Actor.APIKeyID != minted.Key.ID {
			t.Fatalf("got stored receipt %+v; want the run's agentRunId and the starter key", stored)
		}
		// The frame the action was decided on, as JSON with its picture.
		var fr struct {
			OK      bool   `json:"ok"`
			FrameID string `json:"frameId"`
			Image   *struct {
				MimeType string `json:"mimeType"`
			} `json:"image"`
		}
		c.json("GET", vb+"/v1/frames/"+obs.FrameID+"?image=png", "", 200, &fr)
		if !fr.OK || fr.FrameID != obs.FrameID || fr.Image == nil || fr.Image.MimeType != "image/png" {
			t.Fatalf("got frame %+v; want %s with its PNG", fr, obs.FrameID)
		}
		resp, b = c.do("GET", vb+"/v1/screenshot?format=jpeg", "", nil, true)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "image/jpeg" || len(b) < 100 || resp.Header.Get("Frame-Id") == "" {
			t.Fatalf("screenshot: got %d %s (%d bytes); want a JPEG", resp.StatusCode, resp.Header.Get("Content-Type"), len(b))
		}

		// Revoking the starter's key does not recall the run (spec 5.3.3).
		c.json("DELETE", base+"/v1/api-keys/"+minted.Key.ID, "", 204, nil)
		req, _ := http.NewRequest("GET", base+"/v1/devices", nil)
		req.Header.Set("Authorization", "Bearer "+minted.Token)
		if r, err := http.DefaultClient.Do(req); err != nil || r.StatusCode != 401 {
			t.Fatalf("the revoked key on /v1: got %v %v; want 401", r, err)
		} else {
			r.Body.Close()
		}
		c.json("GET", vb+"/v1/observe", "", 200, &obs)
		c.json("POST", vb+"/v1/actions", fmt.Sprintf(`{"action":"key","arguments":{"key":"BACK"},"idempotencyKey":"vrx-step-2","observedFrame":%q}`, obs.FrameID), 200, &act)
		if act.Receipt.Actor.APIKeyID != minted.Key.ID || act.Receipt.AgentRunID != started.Run.AgentRunID {
			t.Fatalf("after revocation: got receipt %+v; want it still attributed to the starter key", act.Receipt)
		}

		c.json("POST", vb+"/v1/finish", `{"state":"succeeded","reason":"done","detail":"tapped"}`, 200, &run)
		if run.Run.State != domain.RunStateSucceeded || run.Run.Reason == nil || *run.Run.Reason != "done" || run.Run.StepSeq != 2 {
			t.Fatalf("got finished run %+v; want succeeded after 2 steps with reason done", run.Run)
		}
		view, err := a.app.Runs.GetRun.Handle(ctx, runs.GetRun{Auth: operator, RunID: started.Run.RunID})
		if err != nil || view.State != domain.RunStateSucceeded {
			t.Fatalf("GetRun: got %+v, %v; want succeeded", view, err)
		}
		// An ended run's token works no more.
		resp, b = c.do("GET", vb+"/v1/run", "", nil, true)
		refused(t, resp, b)
		ended = vb
		// Its device is free again: the local operator can lease it.
		c.json("POST", base+"/v1/devices/"+dev(0)+"/lease", `{"ttlSeconds":60}`, 201, nil)
	})

	t.Run("cancelling a run kills its token at once", func(t *testing.T) {
		c.t = t
		started := start(operator, dev(1), "be cancelled")
		vb := started.VrxBaseURL
		var obs vrxObservation
		c.json("GET", vb+"/v1/observe", "", 200, &obs)
		if _, err := a.app.Runs.CancelRun.Handle(ctx, runs.CancelRun{Auth: operator, RunID: started.Run.RunID}); err != nil {
			t.Fatal(err)
		}
		for _, r := range []struct{ method, path, body string }{
			{"GET", "/v1/run", ""}, {"GET", "/v1/observe", ""},
			{"POST", "/v1/actions", fmt.Sprintf(`{"action":"tap","arguments":{"x":1,"y":1},"idempotencyKey":"after-cancel","observedFrame":%q}`, obs.FrameID)},
			{"POST", "/v1/finish", `{"state":"succeeded"}`},
		} {
			resp, b := c.do(r.method, vb+r.path, r.body, nil, true)
			refused(t, resp, b)
		}
		view, err := a.app.Runs.GetRun.Handle(ctx, runs.GetRun{Auth: operator, RunID: started.Run.RunID})
		if err != nil || view.State != domain.RunStateCancelled {
			t.Fatalf("GetRun: got %+v, %v; want cancelled", view, err)
		}
	})

	t.Run("needs-user parks the run", func(t *testing.T) {
		c.t = t
		started := start(operator, dev(2), "needs a one-time code")
		vb := started.VrxBaseURL
		var run vrxRun
		c.json("POST", vb+"/v1/needs-user", `{"reason":"enter the one-time code","deadlineSeconds":600}`, 200, &run)
		if run.Run.State != domain.RunStateAwaitingUser || run.Run.ParkedReason == nil || *run.Run.ParkedReason != "enter the one-time code" ||
			run.Run.ParkDeadlineAt == nil {
			t.Fatalf("got %+v; want awaiting_user with the reason and a deadline", run.Run)
		}
		c.json("GET", vb+"/v1/run", "", 200, &run)
		if run.Run.State != domain.RunStateAwaitingUser {
			t.Fatalf("got state %s; want awaiting_user", run.Run.State)
		}
		// Parked, the run holds no lease: it cannot act.
		var obs vrxObservation
		c.json("GET", vb+"/v1/observe", "", 200, &obs)
		resp, b := c.do("POST", vb+"/v1/actions", fmt.Sprintf(`{"action":"tap","arguments":{"x":1,"y":1},"idempotencyKey":"parked","observedFrame":%q}`, obs.FrameID), nil, true)
		if resp.StatusCode != 409 || vrxCode(t, b) != "FENCING_TOKEN_STALE" {
			t.Fatalf("acting while parked: got %d %s; want 409 FENCING_TOKEN_STALE", resp.StatusCode, b)
		}
		// A person may take the device meanwhile.
		c.json("POST", base+"/v1/devices/"+dev(2)+"/lease", `{"ttlSeconds":60}`, 201, nil)
		if _, err := a.app.Runs.CancelRun.Handle(ctx, runs.CancelRun{Auth: operator, RunID: started.Run.RunID}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("every refusal is DEVICE_NOT_FOUND, byte-identical", func(t *testing.T) {
		c.t = t
		if ended == "" {
			t.Skip("needs the ended run of the first subtest")
		}
		for _, p := range []struct {
			name, url, method, body string
			header                  map[string]string
		}{
			{name: "unknown token", method: "GET", url: base + "/vrx/" + unknownToken + "/v1/observe"},
			{name: "malformed token", method: "GET", url: base + "/vrx/not-a-token/v1/run"},
			{name: "ended run", method: "GET", url: ended + "/v1/run"},
			{name: "ended run acting", method: "POST", url: ended + "/v1/actions", body: `{"action":"key","arguments":{"key":"BACK"},"idempotencyKey":"late"}`},
			{name: "API key as the path token", method: "GET", url: base + "/vrx/" + minted.Token + "/v1/run"},
			{name: "API key as Authorization beside an unknown token", method: "GET", url: base + "/vrx/" + unknownToken + "/v1/run",
				header: map[string]string{"Authorization": "Bearer " + minted.Token}},
			{name: "stray path", method: "GET", url: base + "/vrx/" + unknownToken + "/v1/devices"},
		} {
			t.Run(p.name, func(t *testing.T) {
				c.t = t
				resp, b := c.do(p.method, p.url, p.body, p.header, false)
				refused(t, resp, b)
			})
		}
		// A live run's token naming another device.
		c.t = t
		started := start(operator, dev(1), "wrong device")
		var obs vrxObservation
		c.json("GET", started.VrxBaseURL+"/v1/observe", "", 200, &obs)
		resp, b := c.do("POST", started.VrxBaseURL+"/v1/actions",
			fmt.Sprintf(`{"action":"tap","arguments":{"x":1,"y":1},"idempotencyKey":"wrong-device","deviceId":%q}`, dev(0)), nil, true)
		refused(t, resp, b)
		// A good token with an API key in Authorization works as without it.
		resp, b = c.do("GET", started.VrxBaseURL+"/v1/run", "", map[string]string{"Authorization": "Bearer " + minted.Token}, true)
		if resp.StatusCode != 200 {
			t.Fatalf("a good token beside an Authorization header: got %d %s; want 200", resp.StatusCode, b)
		}
		if _, err := a.app.Runs.CancelRun.Handle(ctx, runs.CancelRun{Auth: operator, RunID: started.Run.RunID}); err != nil {
			t.Fatal(err)
		}
	})
}

// startWithSims starts the service as `phonefleet serve` does (local
// mode, n sim phones, the log to logger when one is given) and waits until
// its n phones are listed; it returns a client checking answers against
// the served document, and the phones' ids.
func startWithSims(t *testing.T, n int, logger ...*slog.Logger) (*App, string, *vrxClient, []string) {
	t.Helper()
	env := map[string]string{"DATABASE_URL": testutil.DatabaseURL(t), "SERVICE_ADDR": "127.0.0.1:0",
		"SERVICE_DATA_DIR": filepath.Join(t.TempDir(), "data"), "SERVICE_SIM_DEVICES": fmt.Sprint(n)}
	log := slog.New(slog.DiscardHandler)
	if len(logger) > 0 {
		log = logger[0]
	}
	a, base := startAppLogging(t, env, log)
	c := &vrxClient{t: t, base: base, v: apitest.FromHandler(t, a.server.Handler())}
	var devices struct {
		Devices []struct {
			DeviceID string `json:"deviceId"`
		} `json:"devices"`
	}
	waitUntil(t, 20*time.Second, fmt.Sprintf("%d sim phones", n), func() (bool, error) {
		c.json("GET", base+"/v1/devices", "", 200, &devices)
		return len(devices.Devices) == n, nil
	})
	ids := make([]string, n)
	for i, d := range devices.Devices {
		ids[i] = d.DeviceID
	}
	return a, base, c, ids
}

// TestVrxNamesWhatTheWorkerGotWrong drives the device surface's precise
// refusals through the real run commands: a point no screen answers is
// COORDINATE_OUT_OF_REACH (422), a frame of another device as
// observedFrame is FRAME_VIEWPORT_MISMATCH (409), an unknown frame is
// FRAME_UNAVAILABLE (404, as frame_not_found is on REST). Each is the
// worker's mistake, so nothing is done on the phone and the service logs
// none of them as its own fault.
func TestVrxNamesWhatTheWorkerGotWrong(t *testing.T) {
	logs := &testutil.SyncBuffer{}
	a, _, c, sims := startWithSims(t, 2, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})))
	ctx := testutil.Context(t)
	r := httptest.NewRequest("GET", "/v1/devices", nil)
	operator, err := a.deps.Auth.Authenticate(r)
	if err != nil {
		t.Fatal(err)
	}
	vrxBase := func(device string) string {
		started, err := a.app.Runs.StartRun.Handle(ctx, runs.StartRun{Auth: operator, DeviceID: device,
			Goal: "make mistakes", Executor: domain.ExecutorExternal})
		if err != nil {
			t.Fatalf("start a run on %s: %v", device, err)
		}
		return started.VrxBaseURL
	}
	mine, other := vrxBase(sims[0]), vrxBase(sims[1])
	var obs, otherObs vrxObservation
	c.json("GET", mine+"/v1/observe", "", 200, &obs)
	c.json("GET", other+"/v1/observe", "", 200, &otherObs)

	tests := []struct {
		name, method, url, body string
		status                  int
		code                    string
	}{
		{"tap beyond the screen", "POST", mine + "/v1/actions",
			fmt.Sprintf(`{"action":"tap","arguments":{"x":%d,"y":10},"idempotencyKey":"far-1","observedFrame":%q}`, obs.Width+500, obs.FrameID),
			422, "COORDINATE_OUT_OF_REACH"},
		{"tap at a negative point", "POST", mine + "/v1/actions",
			`{"action":"tap","arguments":{"x":-1,"y":10},"idempotencyKey":"far-2"}`, 422, "COORDINATE_OUT_OF_REACH"},
		{"swipe off the screen", "POST", mine + "/v1/actions",
			fmt.Sprintf(`{"action":"swipe","arguments":{"x1":10,"y1":10,"x2":10,"y2":%d},"idempotencyKey":"far-3"}`, obs.Height+1000),
			422, "COORDINATE_OUT_OF_REACH"},
		{"another device's frame", "POST", mine + "/v1/actions",
			fmt.Sprintf(`{"action":"tap","arguments":{"x":10,"y":10},"idempotencyKey":"wrong-frame","observedFrame":%q}`, otherObs.FrameID),
			409, "FRAME_VIEWPORT_MISMATCH"},
		{"an unknown frame", "GET", mine + "/v1/frames/frm_0192a9b4c5d6e7f8a9b0c1d2e3f4a5b6", "", 404, "FRAME_UNAVAILABLE"},
		{"another device's frame read", "GET", mine + "/v1/frames/" + otherObs.FrameID, "", 404, "FRAME_UNAVAILABLE"},
		{"a malformed tap", "POST", mine + "/v1/actions", `{"action":"tap","arguments":{"x":"left"},"idempotencyKey":"bad"}`, 400, "INVALID_ACTION"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c.t = t
			resp, body := c.do(tt.method, tt.url, tt.body, nil, true)
			if resp.StatusCode != tt.status || vrxCode(t, body) != tt.code {
				t.Fatalf("got %d %s; want %d %s", resp.StatusCode, body, tt.status, tt.code)
			}
		})
	}
	c.t = t
	// Nothing reached the phone: the run took no step.
	var run vrxRun
	c.json("GET", mine+"/v1/run", "", 200, &run)
	if run.Run.StepSeq != 0 {
		t.Errorf("got stepSeq %d after refused actions; want 0", run.Run.StepSeq)
	}
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("the worker's mistakes were logged as the service's faults:\n%s", logs.String())
	}
}
