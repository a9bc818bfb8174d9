package service

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"image/png"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"phonefleet/domain"
	"phonefleet/internal/config"
	"phonefleet/testutil"
)

// clusterInstance is one in-process instance of the service.
type clusterInstance struct {
	name string
	app  *App
	c    auditClient
	stop func()
}

// startInstance runs the service as `phonefleet serve` does, configured by
// env alone, until stop is called or the test ends.
func startInstance(t *testing.T, name string, env map[string]string, logs io.Writer) *clusterInstance {
	t.Helper()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg, err := config.Load(fs, nil, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})).With("instance", name)
	ctx, cancel := context.WithCancel(testutil.Context(t))
	a, err := New(ctx, cfg, logger)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = a.Run(ctx); close(done) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(time.Minute):
				t.Errorf("instance %s did not stop within a minute", name)
			}
		})
	}
	t.Cleanup(stop)
	return &clusterInstance{name: name, app: a, c: auditClient{t: t, base: "http://" + a.Addr()}, stop: stop}
}

// holdsSim reports whether the instance drives the sim phones now.
func (i *clusterInstance) holdsSim() bool {
	return slices.Contains(i.app.devices.Runtime.HeldHosts(), domain.HostSim)
}

// onlineSimPhone waits (a minute at most) until the instance lists one
// device, online, and returns its id.
func (i *clusterInstance) onlineSimPhone(t *testing.T) string {
	t.Helper()
	var deviceID string
	waitUntil(t, time.Minute, "the sim phone listed online", func() (bool, error) {
		list, _ := i.c.must("GET", "/v1/devices", nil, http.StatusOK, nil).body["devices"].([]any)
		if len(list) != 1 {
			return false, nil
		}
		d := list[0].(map[string]any)
		deviceID = str(t, d, "deviceId")
		return d["status"] == "online", nil
	})
	return deviceID
}

// TestTwoInstancesServeOneSimPhone runs two instances on one database and
// one NATS server: local mode, one sim phone, driven by whichever instance
// holds the sim host (H); the other (N) forwards its device calls there.
// Single-character typing alternating between the instances, each awaited,
// lands exactly once and in order; keys sent again on the other instance
// replay the same receipt; observing through N works. When H stops, N
// takes the sim host and drives the phone itself, its state intact.
func TestTwoInstancesServeOneSimPhone(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode")
	}
	var logs testutil.SyncBuffer
	env := map[string]string{
		"DATABASE_URL": testutil.DatabaseURL(t), "SERVICE_NATS_URL": testutil.NATS(t),
		"SERVICE_ADDR": "127.0.0.1:0", "SERVICE_DATA_DIR": filepath.Join(t.TempDir(), "data"),
		"SERVICE_MODE": "local", "SERVICE_SIM_DEVICES": "1",
	}
	first := startInstance(t, "first", env, &logs)
	second := startInstance(t, "second", env, &logs)
	h, n := first, second
	if second.holdsSim() {
		h, n = second, first
	}
	if !h.holdsSim() || n.holdsSim() {
		t.Fatalf("%s holds %v, %s holds %v; want one instance holding the sim host", first.name, first.app.devices.Runtime.HeldHosts(),
			second.name, second.app.devices.Runtime.HeldHosts())
	}
	defer func() {
		if t.Failed() {
			t.Logf("the instances' logs:\n%s", logs.String())
		}
	}()

	// The sim phone, seen through N.
	deviceID := n.onlineSimPhone(t)
	dev := "/v1/devices/" + deviceID
	lease := str(t, n.c.must("POST", dev+"/lease", map[string]any{"ttlSeconds": 600}, http.StatusCreated, nil).body, "leaseId")
	run := fmt.Sprintf("%d", time.Now().UnixNano())
	act := func(on *clusterInstance, key, action string, args map[string]any) auditResponse {
		t.Helper()
		return on.c.must("POST", dev+"/actions", map[string]any{"action": action, "arguments": args,
			"idempotencyKey": key, "leaseId": lease}, http.StatusOK, nil)
	}
	snapshot := func(on *clusterInstance) deviceUIElement {
		t.Helper()
		r := on.c.call("GET", dev+"/snapshot", nil, nil)
		if r.status != http.StatusOK {
			t.Fatalf("snapshot through %s: got %d %v", on.name, r.status, r.body)
		}
		raw, _ := json.Marshal(r.body["root"])
		var root deviceUIElement
		if err := json.Unmarshal(raw, &root); err != nil {
			t.Fatal(err)
		}
		return root
	}
	noteText := func(on *clusterInstance) string {
		t.Helper()
		f, ok := snapshot(on).find(func(e deviceUIElement) bool { return e.ResourceID == "com.example.notes:id/input" })
		if !ok {
			t.Fatalf("through %s: Notes shows no note field", on.name)
		}
		return f.Text
	}

	// Open Notes and focus its field, through N.
	act(n, "cluster-open-"+run, "open_app", map[string]any{"package": "com.example.notes"})
	field, ok := snapshot(n).find(func(e deviceUIElement) bool { return e.ResourceID == "com.example.notes:id/input" })
	if !ok || len(field.Bounds) != 4 {
		t.Fatalf("through %s: Notes shows no note field", n.name)
	}
	act(n, "cluster-focus-"+run, "tap", map[string]any{"x": (field.Bounds[0] + field.Bounds[2]) / 2, "y": (field.Bounds[1] + field.Bounds[3]) / 2})

	// Twenty characters, one per action, alternating N and H, each awaited.
	const text = "abcdefghijklmnopqrst"
	key := func(i int) string { return fmt.Sprintf("cluster-type-%s-%02d", run, i) }
	sent := map[int]map[string]any{}
	for i, ch := range text {
		on := []*clusterInstance{n, h}[i%2]
		r := act(on, key(i), "type_text", map[string]any{"text": string(ch)})
		if r.header.Get("Idempotent-Replayed") != "" || r.body["state"] != "committed" {
			t.Fatalf("typing %q through %s: got %v (replayed %q); want a new committed receipt", ch, on.name, r.body, r.header.Get("Idempotent-Replayed"))
		}
		sent[i] = r.body
	}
	// Some keys again, on the other instance: the same receipt, replayed.
	for _, i := range []int{0, 5, 10, 15, 19} {
		other := []*clusterInstance{h, n}[i%2]
		r := act(other, key(i), "type_text", map[string]any{"text": string(text[i])})
		if r.header.Get("Idempotent-Replayed") != "true" || !reflect.DeepEqual(r.body, sent[i]) {
			t.Fatalf("key %d again through %s: got %v (replayed %q); want the receipt %v replayed", i, other.name, r.body,
				r.header.Get("Idempotent-Replayed"), sent[i])
		}
	}
	if n.holdsSim() || !h.holdsSim() {
		t.Fatalf("the sim host moved while typing (%s holds %v); the test proves nothing about forwarding", n.name, n.app.devices.Runtime.HeldHosts())
	}
	if got := noteText(n); got != text {
		t.Fatalf("the note field holds %q; want %q, each character once and in order", got, text)
	}
	if got := noteText(h); got != text {
		t.Fatalf("through %s the note field holds %q; want %q", h.name, got, text)
	}

	// The receipts: twenty committed typings, in the order they were sent.
	var typed []string
	waitUntil(t, 30*time.Second, "twenty committed typing receipts", func() (bool, error) {
		r := n.c.must("GET", "/v1/receipts?limit=200&deviceId="+deviceID, nil, http.StatusOK, nil)
		list, _ := r.body["receipts"].([]any)
		typed = typed[:0]
		for _, x := range list {
			rc := x.(map[string]any)
			if k, _ := rc["idempotencyKey"].(string); strings.HasPrefix(k, "cluster-type-"+run) {
				if rc["state"] != "committed" {
					return false, nil // the read model catches up
				}
				typed = append(typed, k)
			}
		}
		return len(typed) == len(text), nil
	})
	slices.Reverse(typed) // newest first
	for i, k := range typed {
		if k != key(i) {
			t.Fatalf("receipts in order %q; want keys 0 to 19 in the order sent", typed)
		}
	}

	// A screenshot through N.
	res, err := http.Get(n.c.base + dev + "/screenshot?maxWidth=540")
	if err != nil {
		t.Fatal(err)
	}
	pic, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK || res.Header.Get("Frame-Id") == "" {
		t.Fatalf("screenshot through %s: got %s, Frame-Id %q", n.name, res.Status, res.Header.Get("Frame-Id"))
	}
	if _, err := png.Decode(bytes.NewReader(pic)); err != nil {
		t.Fatalf("screenshot through %s: %v", n.name, err)
	}

	// H stops: N takes the sim host and drives the phone itself.
	h.stop()
	waitUntil(t, time.Minute, n.name+" taking the sim host", func() (bool, error) { return n.holdsSim(), nil })
	act(n, key(len(text)), "type_text", map[string]any{"text": "u"})
	if got := noteText(n); got != text+"u" {
		t.Fatalf("after the takeover the note field holds %q; want %q", got, text+"u")
	}
	r := act(n, key(3), "type_text", map[string]any{"text": string(text[3])})
	if r.header.Get("Idempotent-Replayed") != "true" || !reflect.DeepEqual(r.body, sent[3]) {
		t.Fatalf("a key %s served, again after the takeover: got %v; want its receipt replayed", h.name, r.body)
	}
}
