package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/testutil"
)

// proc is a running phonefleet process (serve or gateway) whose JSON log
// the test reads as it comes.
type proc struct {
	name string
	cmd  *exec.Cmd
	logs *testutil.SyncBuffer
	done chan struct{}
	err  error
	base string // serve: http://addr
}

// startProc runs phonefleet with args and env and returns at once; the
// log is collected until the process ends.
func startProc(t *testing.T, name string, env []string, args ...string) *proc {
	t.Helper()
	cmd := command(env, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{name: name, cmd: cmd, logs: &testutil.SyncBuffer{}, done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 4<<20)
		for sc.Scan() {
			p.logs.Write(append(sc.Bytes(), '\n'))
		}
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() { p.kill() })
	return p
}

// startServeAt runs `phonefleet serve` on a free port and waits until it
// serves.
func startServeAt(t *testing.T, name string, env []string) *proc {
	t.Helper()
	p := startProc(t, name, env, "serve", "-addr", "127.0.0.1:0")
	line := p.waitLog(t, 90*time.Second, func(m map[string]any) bool { return m["msg"] == "phonefleet serving" })
	p.base = "http://" + line["addr"].(string)
	return p
}

func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// exited waits for the process to end by itself and returns its exit code.
func (p *proc) exited(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return exitCodeOf(p.err)
	case <-time.After(within):
		t.Fatalf("%s did not exit within %s\n%s", p.name, within, p.logs)
		return 0
	}
}

// waitLog waits for a log line matching match and returns it.
func (p *proc) waitLog(t *testing.T, within time.Duration, match func(map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		for _, l := range strings.Split(p.logs.String(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && match(m) {
				return m
			}
		}
		select {
		case <-p.done:
			t.Fatalf("%s exited (%v) before the awaited log line\n%s", p.name, p.err, p.logs)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the awaited log line did not come within %s\n%s", p.name, within, p.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// countLog counts the log lines matching match.
func (p *proc) countLog(match func(map[string]any) bool) int {
	n := 0
	for _, l := range strings.Split(p.logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && match(m) {
			n++
		}
	}
	return n
}

func msgIs(msg string) func(map[string]any) bool {
	return func(m map[string]any) bool { return m["msg"] == msg }
}

// answer is an HTTP answer.
type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(a.body, &m); err != nil {
		t.Fatalf("answer %d is not a JSON object: %s", a.status, a.body)
	}
	return m
}

func (a answer) code() string {
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	_ = json.Unmarshal(a.body, &e)
	return e.Error.Code
}

func call(t *testing.T, base, method, path, bearer string, body any) answer {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := (&http.Client{Timeout: 120 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s%s: %v", method, base, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: b}
}

type deviceRow struct {
	DeviceID string `json:"deviceId"`
	Name     string `json:"name"`
	Status   string `json:"status"`
}

func listDevices(t *testing.T, base string) map[string]deviceRow {
	t.Helper()
	a := call(t, base, "GET", "/v1/devices?limit=200", "", nil)
	if a.status != 200 {
		t.Fatalf("list devices: %d %s", a.status, a.body)
	}
	var page struct{ Devices []deviceRow }
	if err := json.Unmarshal(a.body, &page); err != nil {
		t.Fatal(err)
	}
	out := map[string]deviceRow{}
	for _, d := range page.Devices {
		out[d.DeviceID] = d
	}
	return out
}

// eventually retries check until it returns "" or the time is up.
func eventually(t *testing.T, within time.Duration, what string, check func() string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		msg := check()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %s after %s", what, msg, within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// uiElement is a node of a snapshot's element tree.
type uiElement struct {
	Ref      string      `json:"ref"`
	Text     string      `json:"text"`
	Hint     string      `json:"hint"`
	Focused  bool        `json:"focused"`
	Children []uiElement `json:"children"`
}

func (e uiElement) find(match func(uiElement) bool) (uiElement, bool) {
	if match(e) {
		return e, true
	}
	for _, c := range e.Children {
		if f, ok := c.find(match); ok {
			return f, true
		}
	}
	return uiElement{}, false
}

func snapshotOf(t *testing.T, base, dev string) uiElement {
	t.Helper()
	a := call(t, base, "GET", "/v1/devices/"+dev+"/snapshot", "", nil)
	if a.status != 200 {
		t.Fatalf("snapshot of %s via %s: %d %s", dev, base, a.status, a.body)
	}
	var f struct{ Root uiElement }
	if err := json.Unmarshal(a.body, &f); err != nil {
		t.Fatal(err)
	}
	return f.Root
}

func noteText(t *testing.T, base, dev string) string {
	t.Helper()
	field, ok := snapshotOf(t, base, dev).find(func(e uiElement) bool { return strings.HasPrefix(e.Hint, "Write a note") })
	if !ok {
		t.Fatalf("device %s shows no note field", dev)
	}
	return field.Text
}

// TestGatewayAndTwoInstances runs the real processes: two `phonefleet
// serve` instances on one database and one NATS server, and one
// `phonefleet gateway` with two sim phones. It checks enrollment and its
// refusals, actions through either instance acting once and in order,
// the gateway killed mid-action and coming back, an instance killed
// (idle, then mid-action), revocation, and that no secret is logged or
// recorded.
func TestGatewayAndTwoInstances(t *testing.T) {
	if testing.Short() {
		t.Skip("runs four processes")
	}
	dbURL := testutil.DatabaseURL(t)
	natsURL := testutil.NATS(t)
	dir := t.TempDir()
	manifest := filepath.Join(dir, "releases.json")
	if err := os.WriteFile(manifest, []byte(`{"releases":[{"version":"99.0.0","channel":"stable","url":"http://127.0.0.1/dl/99.0.0",`+
		`"sha256":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","publishedAt":"2026-01-01T00:00:00Z"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	serveEnv := []string{"DATABASE_URL=" + dbURL, "SERVICE_DATA_DIR=" + filepath.Join(dir, "data"), "SERVICE_NATS_URL=" + natsURL,
		"SERVICE_SIM_DEVICES=1", "SERVICE_RELEASES_FILE=" + manifest, "SERVICE_LOG_LEVEL=debug"}
	a := startServeAt(t, "serve-a", serveEnv)
	b := startServeAt(t, "serve-b", serveEnv)
	procs := []*proc{a, b}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, p := range procs {
			if d := os.Getenv("PHONEFLEET_E2E_LOG_DIR"); d != "" {
				_ = os.WriteFile(filepath.Join(d, p.name+".log"), []byte(p.logs.String()), 0o600)
			}
			lines := strings.Split(strings.TrimSpace(p.logs.String()), "\n")
			t.Logf("---- the last lines of %s's log:\n%s", p.name, strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
	})
	cpDevices := listDevices(t, b.base)
	if len(cpDevices) != 1 {
		t.Fatalf("the service's own sims: %v; want one", cpDevices)
	}
	var cpSim string
	for id := range cpDevices {
		cpSim = id
	}

	// 1. Enrollment and its refusals.
	created := call(t, a.base, "POST", "/v1/gateways/enrollment-codes", "", map[string]any{"name": "site-1"})
	if created.status != 201 {
		t.Fatalf("create an enrollment code: %d %s", created.status, created.body)
	}
	code := created.json(t)["code"].(string)
	forged := code[:len(code)-10] + "AAAAAAAAAA"
	for _, bad := range []string{forged, "pfe_nope", ""} {
		if r := call(t, b.base, "POST", "/gateway/v1/enroll", "", map[string]any{"code": bad}); r.status != 401 && r.status != 400 {
			t.Fatalf("enroll with %.12q: %d %s; want a refusal", bad, r.status, r.body)
		}
	}
	gwDir := filepath.Join(dir, "gateway")
	gwEnv := func(extra ...string) []string {
		return append([]string{"GATEWAY_URL=" + a.base + "," + b.base, "GATEWAY_DATA_DIR=" + gwDir, "GATEWAY_SIM_DEVICES=2",
			"GATEWAY_NAME=site-1", "SERVICE_LOG_LEVEL=debug"}, extra...)
	}
	startGateway := func(name string, extra ...string) *proc {
		t.Helper()
		g := startProc(t, name, gwEnv(extra...), "gateway")
		procs = append(procs, g)
		g.waitLog(t, 60*time.Second, msgIs("gateway tunnel connected"))
		return g
	}
	g := startGateway("gateway-1", "GATEWAY_ENROLL_CODE="+code)
	info, err := os.Stat(filepath.Join(gwDir, "gateway.json"))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("the gateway's credential file: %v, %v; want mode 0600", info, err)
	}
	var saved struct{ GatewayID, Credential string }
	raw, _ := os.ReadFile(filepath.Join(gwDir, "gateway.json"))
	if err := json.Unmarshal(raw, &saved); err != nil || saved.GatewayID == "" || !strings.HasPrefix(saved.Credential, "pfg_") {
		t.Fatalf("the credential file holds %v (%v)", saved.GatewayID, err)
	}
	if r := call(t, b.base, "POST", "/gateway/v1/enroll", "", map[string]any{"code": code}); r.status != 401 {
		t.Fatalf("the used code again: %d %s; want 401", r.status, r.body)
	}
	if r := call(t, b.base, "GET", "/gateway/v1/releases/current?channel=stable", saved.Credential, nil); r.status != 200 || r.json(t)["version"] != "99.0.0" {
		t.Fatalf("current release with the credential: %d %s", r.status, r.body)
	}
	g.waitLog(t, 30*time.Second, msgIs("a newer phonefleet release exists"))

	// 2. The gateway's phones are the organisation's, online, seen from
	// either instance.
	var gwDevs []string
	eventually(t, 30*time.Second, "the gateway's devices online on b", func() string {
		gwDevs = gwDevs[:0]
		for id, d := range listDevices(t, b.base) {
			if id == cpSim {
				continue
			}
			if d.Status != "online" {
				return d.Name + " " + d.Status
			}
			gwDevs = append(gwDevs, id)
		}
		if len(gwDevs) != 2 {
			return fmt.Sprintf("%d devices", len(gwDevs))
		}
		return ""
	})
	dev := gwDevs[0]
	gatewayView := func(p *proc) map[string]any {
		t.Helper()
		l := call(t, p.base, "GET", "/v1/gateways", "", nil).json(t)
		for _, g := range l["gateways"].([]any) {
			if g := g.(map[string]any); g["gatewayId"] == saved.GatewayID {
				return g
			}
		}
		t.Fatalf("GET /v1/gateways does not list %s: %v", saved.GatewayID, l)
		return nil
	}
	eventually(t, 30*time.Second, "the gateway shown connected", func() string {
		if g := gatewayView(b); g["connected"] != true || g["version"] != "0.1.0-dev" || g["instance"] == nil {
			return fmt.Sprint(g)
		}
		return ""
	})

	// 3. Actions through either instance act once each, in order.
	lease := call(t, b.base, "POST", "/v1/devices/"+dev+"/lease", "", map[string]any{})
	if lease.status != 200 && lease.status != 201 {
		t.Fatalf("lease via b: %d %s", lease.status, lease.body)
	}
	leaseID := lease.json(t)["leaseId"].(string)
	act := func(p *proc, device, lease, key, action string, args map[string]any) answer {
		return call(t, p.base, "POST", "/v1/devices/"+device+"/actions", "", map[string]any{
			"action": action, "arguments": args, "idempotencyKey": key, "leaseId": lease})
	}
	mustAct := func(p *proc, device, lease, key, action string, args map[string]any) answer {
		t.Helper()
		r := act(p, device, lease, key, action, args)
		if r.status != 200 || r.json(t)["state"] != "committed" {
			t.Fatalf("%s %s via %s: %d %s", action, key, p.name, r.status, r.body)
		}
		return r
	}
	mustAct(a, dev, leaseID, "open-notes", "open_app", map[string]any{"package": "com.example.notes"})
	field, ok := snapshotOf(t, b.base, dev).find(func(e uiElement) bool { return strings.HasPrefix(e.Hint, "Write a note") })
	if !ok {
		t.Fatalf("the gateway's sim shows no note field: %s", call(t, b.base, "GET", "/v1/devices/"+dev+"/snapshot", "", nil).body)
	}
	mustAct(b, dev, leaseID, "focus", "tap", map[string]any{"ref": field.Ref})
	want := ""
	const text = "abcdefghijklmnop"
	for i, c := range text {
		p, other := []*proc{a, b}[i%2], []*proc{b, a}[i%2]
		key := fmt.Sprintf("seq-%02d", i)
		first := mustAct(p, dev, leaseID, key, "type_text", map[string]any{"text": string(c)})
		want += string(c)
		if i%4 == 3 {
			again := act(other, dev, leaseID, key, "type_text", map[string]any{"text": string(c)})
			if again.status != 200 || again.header.Get("Idempotent-Replayed") != "true" || again.json(t)["actionId"] != first.json(t)["actionId"] {
				t.Fatalf("%s repeated via %s: %d %v %s; want the same receipt replayed", key, other.name, again.status, again.header, again.body)
			}
		}
	}
	// The same key to both instances at the same moment: one acts.
	for i, c := range "XYZ" {
		key := fmt.Sprintf("race-%d", i)
		var wg sync.WaitGroup
		rs := make([]answer, 2)
		for j, p := range []*proc{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rs[j] = act(p, dev, leaseID, key, "type_text", map[string]any{"text": string(c)})
			}()
		}
		wg.Wait()
		okCount := 0
		for _, r := range rs {
			switch {
			case r.status == 200:
				okCount++
			case r.status == 409 && r.code() == "idempotency_conflict":
			default:
				t.Fatalf("racing %s: %d %s", key, r.status, r.body)
			}
		}
		if okCount == 0 {
			// Both saw it in progress: the outcome comes with a repeat.
			eventually(t, 30*time.Second, key+" settled", func() string {
				if r := act(a, dev, leaseID, key, "type_text", map[string]any{"text": string(c)}); r.status != 200 {
					return r.code()
				}
				return ""
			})
		}
		want += string(c)
	}
	if got := noteText(t, a.base, dev); got != want {
		t.Fatalf("the gateway's phone holds %q; want %q, each character once, in order", got, want)
	}
	// Every receipt committed (the read model may trail the answers by a
	// moment), and in the order typed.
	eventually(t, 30*time.Second, "the receipts", func() string {
		rc := call(t, b.base, "GET", "/v1/receipts?deviceId="+dev+"&limit=200", "", nil)
		var page struct {
			Receipts []struct {
				IdempotencyKey string         `json:"idempotencyKey"`
				State          string         `json:"state"`
				Action         string         `json:"action"`
				Arguments      map[string]any `json:"arguments"`
			}
		}
		if err := json.Unmarshal(rc.body, &page); err != nil || rc.status != 200 {
			t.Fatalf("receipts: %d %s", rc.status, rc.body)
		}
		typed := ""
		for i := len(page.Receipts) - 1; i >= 0; i-- { // oldest first
			r := page.Receipts[i]
			if r.Action != "type_text" {
				continue
			}
			if r.State != "committed" {
				return "receipt " + r.IdempotencyKey + " " + r.State
			}
			typed += r.Arguments["text"].(string)
		}
		switch {
		case !strings.HasPrefix(want, typed):
			t.Fatalf("the receipts record %q typed; want %q", typed, want)
		case typed != want:
			return fmt.Sprintf("%q recorded", typed)
		}
		return ""
	})
	// The service's own sim through the instance that does not drive it.
	cpLease := call(t, b.base, "POST", "/v1/devices/"+cpSim+"/lease", "", map[string]any{})
	cpLeaseID := cpLease.json(t)["leaseId"].(string)
	for _, p := range []*proc{a, b} {
		mustAct(p, cpSim, cpLeaseID, "cp-"+p.name, "key", map[string]any{"key": "home"})
	}

	// 4. The gateway killed mid-action.
	g.kill()
	eventually(t, 30*time.Second, "the gateway's devices offline", func() string {
		if d := listDevices(t, a.base)[dev]; d.Status != "offline" {
			return d.Status
		}
		return ""
	})
	if r := act(b, dev, leaseID, "while-away", "key", map[string]any{"key": "home"}); r.code() != "device_unavailable" || !strings.Contains(string(r.body), `"offline"`) {
		t.Fatalf("an action while the gateway is away: %d %s; want device_unavailable, offline", r.status, r.body)
	}
	g = startGateway("gateway-2", "GATEWAY_SIM_LATENCY=3s")
	if n := g.countLog(msgIs("gateway enrolled")); n != 0 {
		t.Fatalf("the gateway enrolled again on restart")
	}
	mid := make(chan answer, 1)
	go func() { mid <- act(b, dev, leaseID, "mid-kill", "type_text", map[string]any{"text": "!"}) }()
	g.waitLog(t, 30*time.Second, func(m map[string]any) bool { return m["msg"] == "device call" && m["op"] == "device.act" })
	g.kill()
	r := <-mid
	switch {
	case r.status == 504 && r.code() == "action_outcome_unknown":
	case r.status == 503 && r.code() == "device_disconnected":
	default:
		t.Fatalf("the action when the gateway died: %d %s; want action_outcome_unknown or device_disconnected", r.status, r.body)
	}
	t.Logf("the gateway killed mid-action: the action answered %d %s", r.status, r.code())
	for _, p := range []*proc{a, b} {
		rr := call(t, p.base, "GET", "/v1/receipts/mid-kill", "", nil)
		rec := rr.json(t)
		if r.code() == "action_outcome_unknown" && rec["outcomeUnknown"] != true ||
			r.code() == "device_disconnected" && rec["state"] != "failed" {
			t.Fatalf("the receipt via %s: %s; the answer was %s", p.name, rr.body, r.body)
		}
	}
	eventually(t, 30*time.Second, "the gateway's devices offline", func() string {
		if d := listDevices(t, b.base)[dev]; d.Status != "offline" {
			return d.Status
		}
		return ""
	})

	// 5. It comes back: the same devices, online; the key answers as
	// recorded and the phone did not act twice.
	before := len(listDevices(t, a.base))
	g = startGateway("gateway-3")
	eventually(t, 30*time.Second, "the gateway's devices back online", func() string {
		for _, id := range gwDevs {
			if d := listDevices(t, a.base)[id]; d.Status != "online" {
				return d.Name + " " + d.Status
			}
		}
		return ""
	})
	if after := len(listDevices(t, a.base)); after != before {
		t.Fatalf("%d devices after the reconnection; want the same %d", after, before)
	}
	if again := act(a, dev, leaseID, "mid-kill", "type_text", map[string]any{"text": "!"}); again.code() != r.code() {
		t.Fatalf("mid-kill repeated: %d %s; want the recorded %s", again.status, again.body, r.code())
	}
	got := noteText(t, b.base, dev)
	if got != want && got != want+"!" {
		t.Fatalf("after the kill the phone holds %q; want %q or %q", got, want, want+"!")
	}
	want = got
	mustAct(a, dev, leaseID, "after-1", "type_text", map[string]any{"text": "1"})
	mustAct(b, dev, leaseID, "after-2", "type_text", map[string]any{"text": "2"})
	want += "12"
	if got := noteText(t, a.base, dev); got != want {
		t.Fatalf("after the reconnection the phone holds %q; want %q", got, want)
	}

	// 6. An instance killed. The tunnel is on a (first in the gateway's
	// list): killing b leaves a serving every device.
	b.kill()
	mustAct(a, dev, leaseID, "b-dead", "type_text", map[string]any{"text": "3"})
	mustAct(a, cpSim, cpLeaseID, "cp-b-dead", "key", map[string]any{"key": "home"})
	want += "3"
	b = startServeAt(t, "serve-b2", serveEnv)
	procs = append(procs, b)
	// Now the holder dies mid-action: the caller settles the action, the
	// gateway moves to b, and so do the service's sims.
	g.kill()
	g = startGateway("gateway-4", "GATEWAY_SIM_LATENCY=3s")
	holderBefore := g.countLog(msgIs("gateway tunnel connected"))
	mid = make(chan answer, 1)
	go func() { mid <- act(b, dev, leaseID, "holder-dies", "type_text", map[string]any{"text": "?"}) }()
	g.waitLog(t, 30*time.Second, func(m map[string]any) bool { return m["msg"] == "device call" && m["op"] == "device.act" })
	a.kill()
	r = <-mid
	switch {
	case r.status == 504 && r.code() == "action_outcome_unknown":
	case r.status == 503 && r.code() == "device_disconnected":
	default:
		t.Fatalf("the action when its instance died: %d %s; want action_outcome_unknown or device_disconnected", r.status, r.body)
	}
	t.Logf("the instance holding the tunnel killed mid-action: the action answered %d %s via the other", r.status, r.code())
	eventually(t, 60*time.Second, "the gateway reconnected to b", func() string {
		if g.countLog(msgIs("gateway tunnel connected")) <= holderBefore {
			return "not reconnected"
		}
		return ""
	})
	eventually(t, 60*time.Second, "holder-dies settled", func() string {
		rec := call(t, b.base, "GET", "/v1/receipts/holder-dies", "", nil).json(t)
		if rec["state"] == "pending" && rec["outcomeUnknown"] != true {
			return "pending"
		}
		if r.code() == "action_outcome_unknown" && rec["outcomeUnknown"] != true || r.code() == "device_disconnected" && rec["state"] != "failed" {
			t.Fatalf("holder-dies answered %s; its receipt: %v", r.body, rec)
		}
		return ""
	})
	eventually(t, 60*time.Second, "b serves every device", func() string {
		for _, id := range []string{dev, cpSim} {
			l := cpLeaseID
			if id == dev {
				l = leaseID
			}
			if r := act(b, id, l, "b-serves-"+id+fmt.Sprint(time.Now().UnixNano()), "key", map[string]any{"key": "home"}); r.status != 200 {
				return r.code()
			}
		}
		return ""
	})

	// 7. Revocation, from an instance other than the one holding the
	// tunnel: the tunnel closes, the devices go offline, the gateway
	// exits 1; the credential no longer opens anything.
	a = startServeAt(t, "serve-a2", serveEnv)
	procs = append(procs, a)
	if r := call(t, a.base, "DELETE", "/v1/gateways/"+saved.GatewayID, "", nil); r.status != 204 {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	if code := g.exited(t, 60*time.Second); code != 1 {
		t.Fatalf("the revoked gateway exited %d; want 1\n%s", code, g.logs)
	}
	eventually(t, 30*time.Second, "the revoked gateway's devices offline", func() string {
		for _, id := range gwDevs {
			if d := listDevices(t, a.base)[id]; d.Status != "offline" {
				return d.Status
			}
		}
		return ""
	})
	eventually(t, 30*time.Second, "the revoked gateway shown disconnected", func() string {
		if g := gatewayView(a); g["connected"] != false || g["state"] != "revoked" {
			return fmt.Sprint(g)
		}
		return ""
	})
	forgedCred := saved.Credential[:len(saved.Credential)-10] + "AAAAAAAAAA"
	for _, cred := range []string{saved.Credential, forgedCred} {
		if r := call(t, a.base, "GET", "/gateway/v1/releases/current", cred, nil); r.status != 401 {
			t.Fatalf("releases with a revoked or forged credential: %d %s", r.status, r.body)
		}
	}
	revoked := startProc(t, "gateway-revoked", gwEnv(), "gateway")
	if code := revoked.exited(t, 60*time.Second); code != 1 {
		t.Fatalf("a revoked gateway's start exited %d; want 1", code)
	}

	// No secret in any log, nor in any event.
	secrets := []string{code, saved.Credential, code[len(code)-33:], saved.Credential[len(saved.Credential)-33:]}
	for _, p := range append(procs, revoked) {
		for _, s := range secrets {
			if strings.Contains(p.logs.String(), s) {
				t.Errorf("%s logged a secret (%.8s…)", p.name, s)
			}
		}
	}
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, s := range secrets {
		var n int
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM events WHERE data::text LIKE '%' || $1 || '%'`, s).Scan(&n); err != nil || n != 0 {
			t.Errorf("events hold a secret (%.8s…): %d, %v", s, n, err)
		}
	}
}
