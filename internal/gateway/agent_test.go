package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"phonefleet/domain"
	"phonefleet/internal/adbsim"
	"phonefleet/internal/gateway"
	"phonefleet/internal/sim"
	"phonefleet/internal/tunnel"
	"phonefleet/testutil"
)

const (
	testEnrollCode = "pfe_gwc_test_enrollsecret123"
	testCredential = "pfg_gw_test_credentialsecret456"
	testGatewayID  = "gw_test"
)

// agentTestCtx bounds a test: nothing it waits for may take longer.
func agentTestCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// agentHello is one gateway.hello the fake control plane answered, with
// the tunnel it came on.
type agentHello struct {
	hello tunnel.Hello
	peer  *tunnel.Peer
}

// fakeControlPlane serves what a gateway talks to: enrollment (one code,
// usable once), the current release (99.0.0) and the tunnel, where it
// answers gateway.hello and records gateway.devices.
type fakeControlPlane struct {
	srv *httptest.Server
	// refuse makes the tunnel answer 401, as for a revoked gateway.
	refuse atomic.Bool

	mu      sync.Mutex
	enrolls int
	used    bool
	peers   []*tunnel.Peer

	hellos  chan agentHello
	devices chan tunnel.DevicesChanged
}

func newFakeControlPlane(t *testing.T) *fakeControlPlane {
	t.Helper()
	cp := &fakeControlPlane{hellos: make(chan agentHello, 16), devices: make(chan tunnel.DevicesChanged, 16)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /gateway/v1/enroll", cp.enroll)
	mux.HandleFunc("GET /gateway/v1/releases/current", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+testCredential {
			writeEnvelope(w, http.StatusUnauthorized, "unauthorized")
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"version": "99.0.0", "channel": r.URL.Query().Get("channel"),
			"url": "https://example.test/phonefleet-99.0.0", "sha256": strings.Repeat("ab", 32), "publishedAt": "2026-01-01T00:00:00Z"})
	})
	mux.HandleFunc("GET "+tunnel.Path, func(w http.ResponseWriter, r *http.Request) {
		if cp.refuse.Load() || r.Header.Get("Authorization") != "Bearer "+testCredential {
			writeEnvelope(w, http.StatusUnauthorized, "unauthorized")
			return
		}
		p, err := tunnel.Accept(w, r, cp.handle, tunnel.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Errorf("Accept: %v", err)
			return
		}
		cp.mu.Lock()
		cp.peers = append(cp.peers, p)
		cp.mu.Unlock()
	})
	cp.srv = httptest.NewServer(mux)
	t.Cleanup(func() {
		cp.mu.Lock()
		peers := cp.peers
		cp.mu.Unlock()
		for _, p := range peers {
			p.Close(websocket.StatusGoingAway, "test over")
		}
		cp.srv.Close()
	})
	return cp
}

func writeEnvelope(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": code, "message": "refused", "retryable": false}})
}

func (cp *fakeControlPlane) enroll(w http.ResponseWriter, r *http.Request) {
	var req struct{ Code, Name, Version string }
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeEnvelope(w, http.StatusBadRequest, "invalid_argument")
		return
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if req.Code != testEnrollCode || cp.used {
		writeEnvelope(w, http.StatusUnauthorized, "unauthorized")
		return
	}
	cp.used = true
	cp.enrolls++
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]string{"gatewayId": testGatewayID, "orgId": "org_test", "name": req.Name,
		"credential": testCredential})
}

func (cp *fakeControlPlane) enrollments() int {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.enrolls
}

// handle is the control plane's side of the tunnel.
func (cp *fakeControlPlane) handle(ctx context.Context, method string, params json.RawMessage) (any, error) {
	switch method {
	case tunnel.MethodHello:
		var h tunnel.Hello
		if err := json.Unmarshal(params, &h); err != nil {
			return nil, err
		}
		w := tunnel.Welcome{GatewayID: testGatewayID, OrgID: "org_test"}
		for _, d := range h.Devices {
			w.Devices = append(w.Devices, tunnel.DeviceID{Key: d.Key, DeviceID: "dev_" + d.Key})
		}
		cp.hellos <- agentHello{hello: h, peer: tunnel.PeerFrom(ctx)}
		return w, nil
	case tunnel.MethodDevices:
		var d tunnel.DevicesChanged
		if err := json.Unmarshal(params, &d); err != nil {
			return nil, err
		}
		cp.devices <- d
		return nil, nil
	}
	return nil, tunnel.ErrUnknownMethod
}

func (cp *fakeControlPlane) nextHello(t *testing.T, ctx context.Context) agentHello {
	t.Helper()
	select {
	case h := <-cp.hellos:
		return h
	case <-ctx.Done():
		t.Fatal("the gateway never said hello")
	}
	return agentHello{}
}

// agentLog collects a gateway's JSON log lines.
type agentLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *agentLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *agentLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *agentLog) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// startAgent runs the gateway until the returned stop is called, which
// returns RunAgent's error.
func startAgent(t *testing.T, cfg gateway.AgentConfig) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gateway.RunAgent(ctx, cfg) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			err = <-done
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func act(t *testing.T, ctx context.Context, p *tunnel.Peer, device string, a domain.Action) domain.ActionResult {
	t.Helper()
	var res domain.ActionResult
	if err := p.Call(ctx, tunnel.MethodAct, tunnel.NewActParams(device, a), &res); err != nil {
		t.Fatalf("%s %s: %v", device, a.Type, err)
	}
	return res
}

func snapshot(t *testing.T, ctx context.Context, p *tunnel.Peer, device string) domain.UIElement {
	t.Helper()
	var obs domain.Observation
	if err := p.Call(ctx, tunnel.MethodObserve, tunnel.ObserveParams{Device: device, Snapshot: true}, &obs); err != nil {
		t.Fatalf("observe %s: %v", device, err)
	}
	var root domain.UIElement
	if err := json.Unmarshal(obs.Snapshot, &root); err != nil {
		t.Fatalf("observe %s: snapshot %q: %v", device, obs.Snapshot, err)
	}
	return root
}

func findElement(e domain.UIElement, match func(domain.UIElement) bool) (domain.UIElement, bool) {
	if match(e) {
		return e, true
	}
	for _, c := range e.Children {
		if f, ok := findElement(c, match); ok {
			return f, true
		}
	}
	return domain.UIElement{}, false
}

func showsText(root domain.UIElement, text string) bool {
	_, ok := findElement(root, func(e domain.UIElement) bool { return strings.Contains(e.Text, text) })
	return ok
}

func TestAgentEnrollsServesAndComesBack(t *testing.T) {
	cp := newFakeControlPlane(t)
	dir := t.TempDir()
	logs := &agentLog{}
	cfg := gateway.AgentConfig{URLs: []string{cp.srv.URL}, DataDir: dir, EnrollCode: testEnrollCode, Name: "site-a",
		SimDevices: 2, Version: "1.0.0", Logger: logs.logger()}
	ctx := agentTestCtx(t)

	// First start: the gateway enrolls, stores its credential 0600 and
	// introduces its sims.
	stop := startAgent(t, cfg)
	seen := cp.nextHello(t, ctx)
	if got := cp.enrollments(); got != 1 {
		t.Fatalf("enrollments: got %d; want 1", got)
	}
	st, err := os.Stat(filepath.Join(dir, "gateway.json"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("gateway.json mode: got %v; want 0600", st.Mode().Perm())
	}
	h := seen.hello
	if h.Version != "1.0.0" || h.Channel != "stable" || len(h.Devices) != 2 {
		t.Fatalf("hello: got %+v; want version 1.0.0, channel stable, 2 devices", h)
	}
	for i, d := range h.Devices {
		want := []string{"sim-1", "sim-2"}[i]
		if d.Key != want || d.Backend != domain.BackendSim || d.Model != sim.DefaultModel || d.Width == 0 ||
			!strings.HasPrefix(d.Serial, testGatewayID) || len(d.Capabilities.Actions) == 0 {
			t.Errorf("hello device %d: got %+v; want sim %s with its model, size, serial and capabilities", i, d, want)
		}
	}

	// device.act types into the notes app; device.observe shows it.
	p := seen.peer
	act(t, ctx, p, "sim-1", domain.Action{Type: domain.ActionOpenApp, Package: sim.PkgNotes})
	field, ok := findElement(snapshot(t, ctx, p, "sim-1"), func(e domain.UIElement) bool { return e.Focusable })
	if !ok {
		t.Fatal("the notes app shows no field")
	}
	fx, fy := field.Centre()
	act(t, ctx, p, "sim-1", domain.Action{Type: domain.ActionTap, X: fx, Y: fy})
	res := act(t, ctx, p, "sim-1", domain.Action{Type: domain.ActionTypeText, Text: "hello gateway"})
	if !res.Changed {
		t.Errorf("type_text: got %+v; want a change", res)
	}
	if !showsText(snapshot(t, ctx, p, "sim-1"), "hello gateway") {
		t.Fatal("after type_text, sim-1 does not show the text")
	}
	if showsText(snapshot(t, ctx, p, "sim-2"), "hello gateway") {
		t.Fatal("sim-2 shows sim-1's text")
	}
	// The replay the control plane draws frames from, and the device's
	// other calls.
	var obs domain.Observation
	if err := p.Call(ctx, tunnel.MethodObserve, tunnel.ObserveParams{Device: "sim-1", Replay: true}, &obs); err != nil {
		t.Fatal(err)
	}
	if replayed, err := sim.Restore(sim.DefaultModel, obs.Replay); err != nil || replayed.ScreenHash() != obs.ScreenHash {
		t.Errorf("replay: %v; want a state that shows screen %s", err, obs.ScreenHash)
	}
	if obs.Snapshot != nil || obs.PNG != nil {
		t.Errorf("a replay-only observation carried a snapshot or a picture")
	}
	var caps domain.Capabilities
	if err := p.Call(ctx, tunnel.MethodCapabilities, tunnel.DeviceParams{Device: "sim-2"}, &caps); err != nil || !caps.Reset {
		t.Errorf("capabilities: got %+v, %v", caps, err)
	}
	for _, m := range []string{tunnel.MethodStop, tunnel.MethodWake, tunnel.MethodReset} {
		if err := p.Call(ctx, m, tunnel.DeviceParams{Device: "sim-2"}, nil); err != nil {
			t.Errorf("%s: %v", m, err)
		}
	}

	// Refusals come back as the device's domain errors.
	for _, tc := range []struct {
		name   string
		method string
		params any
		code   domain.Code
	}{
		{"unknown device", tunnel.MethodAct, tunnel.ActParams{Device: "sim-9", Type: "key", Arguments: json.RawMessage(`{"key":"HOME"}`)}, domain.CodeDeviceDisconnected},
		{"invalid action", tunnel.MethodAct, tunnel.ActParams{Device: "sim-1", Type: "fly", Arguments: json.RawMessage(`{}`)}, domain.CodeInvalidArgument},
		{"unknown method", "device.teleport", tunnel.DeviceParams{Device: "sim-1"}, domain.CodeServiceUnavailable},
	} {
		err := p.Call(ctx, tc.method, tc.params, nil)
		var de *domain.Error
		if !errors.As(err, &de) || de.Code != tc.code {
			t.Errorf("%s: got %v; want %s", tc.name, err, tc.code)
		}
	}

	// Stopping closes the tunnel with 1001.
	if err := stop(); err != nil {
		t.Fatalf("RunAgent after its context ended: %v", err)
	}
	<-p.Done()
	if got := websocket.CloseStatus(p.Err()); got != websocket.StatusGoingAway {
		t.Errorf("the control plane saw %v; want close status 1001", p.Err())
	}

	// Second start, no code: the stored credential serves, the sims come
	// back as they were.
	cfg.EnrollCode = ""
	startAgent(t, cfg)
	seen = cp.nextHello(t, ctx)
	if got := cp.enrollments(); got != 1 {
		t.Errorf("enrollments after a restart: got %d; want still 1", got)
	}
	if !showsText(snapshot(t, ctx, seen.peer, "sim-1"), "hello gateway") {
		t.Fatal("after a restart, sim-1 lost the text")
	}

	// The control plane drops the tunnel: the gateway comes back.
	seen.peer.Close(websocket.StatusTryAgainLater, "try again later")
	seen = cp.nextHello(t, ctx)
	if !showsText(snapshot(t, ctx, seen.peer, "sim-1"), "hello gateway") {
		t.Fatal("after reconnecting, sim-1 lost the text")
	}

	// The release check found 99.0.0.
	for !strings.Contains(logs.String(), "a newer phonefleet release exists") {
		select {
		case <-ctx.Done():
			t.Fatalf("no newer release logged:\n%s", logs)
		case <-time.After(10 * time.Millisecond):
		}
	}
	out := logs.String()
	for _, want := range []string{`"msg":"gateway tunnel connected"`, `"gatewayId":"gw_test"`, `"msg":"device call","gatewayId":"gw_test","op":"device.act","device":"sim-1"`, `"version":"99.0.0"`} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %s", want)
		}
	}
	for _, secret := range []string{testEnrollCode, "enrollsecret", testCredential, "credentialsecret"} {
		if strings.Contains(out, secret) {
			t.Errorf("the log shows a secret (%s)", secret)
		}
	}
}

func TestAgentRefusals(t *testing.T) {
	cp := newFakeControlPlane(t)
	ctx := agentTestCtx(t)
	base := func(dir string) gateway.AgentConfig {
		return gateway.AgentConfig{URLs: []string{cp.srv.URL}, DataDir: dir, SimDevices: 1, Version: "1.0.0",
			Logger: slog.New(slog.DiscardHandler)}
	}
	writeCredential := func(t *testing.T, dir string, mode os.FileMode) {
		t.Helper()
		raw := `{"gatewayId":"gw_test","orgId":"org_test","credential":"` + testCredential + `"}`
		if err := os.WriteFile(filepath.Join(dir, "gateway.json"), []byte(raw), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(dir, "gateway.json"), mode); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("no credential and no code", func(t *testing.T) {
		err := gateway.RunAgent(ctx, base(t.TempDir()))
		if err == nil || err.Error() != "no credential: set GATEWAY_ENROLL_CODE" {
			t.Fatalf("got %v; want the no-credential error", err)
		}
	})
	t.Run("a refused code", func(t *testing.T) {
		cfg := base(t.TempDir())
		cfg.EnrollCode = "pfe_gwc_test_wrong"
		err := gateway.RunAgent(ctx, cfg)
		if err == nil || !strings.Contains(err.Error(), "enrollment code refused") || strings.Contains(err.Error(), "wrong") {
			t.Fatalf("got %v; want enrollment code refused, without the code", err)
		}
	})
	t.Run("a credential file others may read", func(t *testing.T) {
		cfg := base(t.TempDir())
		writeCredential(t, cfg.DataDir, 0o644)
		err := gateway.RunAgent(ctx, cfg)
		if err == nil || !strings.Contains(err.Error(), "readable by others") {
			t.Fatalf("got %v; want the file refused", err)
		}
	})
	t.Run("a refused credential", func(t *testing.T) {
		cfg := base(t.TempDir())
		writeCredential(t, cfg.DataDir, 0o600)
		cp.refuse.Store(true)
		defer cp.refuse.Store(false)
		err := gateway.RunAgent(ctx, cfg)
		if err == nil || !strings.Contains(err.Error(), "gateway credential refused (revoked?)") || !errors.Is(err, tunnel.ErrRefused) {
			t.Fatalf("got %v; want the credential refused", err)
		}
		if strings.Contains(err.Error(), testCredential) {
			t.Errorf("the error %q shows the credential", err)
		}
	})
	t.Run("a damaged sim state", func(t *testing.T) {
		cfg := base(t.TempDir())
		writeCredential(t, cfg.DataDir, 0o600)
		if err := os.MkdirAll(filepath.Join(cfg.DataDir, "sims"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cfg.DataDir, "sims", "sim-1.state"), []byte("{not json"), 0o600); err != nil {
			t.Fatal(err)
		}
		err := gateway.RunAgent(ctx, cfg)
		if err == nil || !strings.Contains(err.Error(), "sim-1.state") {
			t.Fatalf("got %v; want the state file named", err)
		}
	})
}

func TestAgentServesADBDevices(t *testing.T) {
	server := testutil.ADBServer(t)
	phone, err := sim.New(sim.DefaultModel, "ADB-GW-0001")
	if err != nil {
		t.Fatal(err)
	}
	daemon, err := adbsim.Start(phone, adbsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = daemon.Close() })
	testutil.ConnectADB(t, server, daemon.Serial())

	cp := newFakeControlPlane(t)
	ctx := agentTestCtx(t)
	startAgent(t, gateway.AgentConfig{URLs: []string{cp.srv.URL}, DataDir: t.TempDir(), EnrollCode: testEnrollCode,
		ADBAddr: server, Version: "1.0.0", Logger: slog.New(slog.DiscardHandler)})
	seen := cp.nextHello(t, ctx)
	key := "adb-" + daemon.Serial()
	if len(seen.hello.Devices) != 1 || seen.hello.Devices[0].Key != key || seen.hello.Devices[0].Backend != domain.BackendADB ||
		seen.hello.Devices[0].Width != phone.Model().Width {
		t.Fatalf("hello devices: got %+v; want the adb device %s", seen.hello.Devices, key)
	}
	act(t, ctx, seen.peer, key, domain.Action{Type: domain.ActionOpenApp, Package: sim.PkgNotes})
	if got := phone.Foreground(); got != sim.PkgNotes {
		t.Fatalf("the phone shows %s; want the notes app", got)
	}

	// The phone leaves the adb server: the next listing tells the
	// control plane.
	if out, err := testutil.ADB(t, server, "disconnect", daemon.Serial()); err != nil {
		t.Fatalf("adb disconnect: %v: %s", err, out)
	}
	select {
	case d := <-cp.devices:
		if len(d.Devices) != 0 {
			t.Fatalf("gateway.devices: got %+v; want an empty list", d.Devices)
		}
	case <-ctx.Done():
		t.Fatal("no gateway.devices after the phone left")
	}
	err = seen.peer.Call(ctx, tunnel.MethodObserve, tunnel.ObserveParams{Device: key}, nil)
	if domain.ErrorCode(err) != domain.CodeDeviceDisconnected {
		t.Fatalf("observing the phone that left: got %v; want device_disconnected", err)
	}
}
