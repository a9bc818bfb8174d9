package service

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image/png"
	"net/http"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"phonefleet/testutil"
)

// clusterMCP is an MCP client on one instance's /mcp, as the local
// operator.
type clusterMCP struct {
	t   *testing.T
	ctx context.Context
	on  *clusterInstance
	c   *mcpclient.Client
}

// connectMCP connects mcp-go's client to the instance's /mcp and
// initializes the session; it closes when the test ends.
func connectMCP(t *testing.T, ctx context.Context, on *clusterInstance) *clusterMCP {
	t.Helper()
	tr, err := transport.NewStreamableHTTP(on.c.base + "/mcp")
	if err != nil {
		t.Fatal(err)
	}
	c := mcpclient.NewClient(tr)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.Initialize(ctx, mcpgo.InitializeRequest{}); err != nil {
		t.Fatalf("initialize through %s: %v", on.name, err)
	}
	return &clusterMCP{t: t, ctx: ctx, on: on, c: c}
}

// call runs the tool and fails the test unless it succeeds; it answers
// the result with its JSON block decoded into out (when out is not nil).
func (m *clusterMCP) call(name string, args map[string]any, out any) *mcpgo.CallToolResult {
	m.t.Helper()
	req := mcpgo.CallToolRequest{}
	req.Params.Name, req.Params.Arguments = name, args
	res, err := m.c.CallTool(m.ctx, req)
	if err != nil {
		m.t.Fatalf("%s through %s: %v", name, m.on.name, err)
	}
	var text string
	for _, b := range res.Content {
		if tc, ok := b.(mcpgo.TextContent); ok {
			text = tc.Text
		}
	}
	if res.IsError {
		m.t.Fatalf("%s %v through %s: got the error %s", name, args, m.on.name, text)
	}
	if out != nil {
		if err := json.Unmarshal([]byte(text), out); err != nil {
			m.t.Fatalf("%s through %s: the answer %q is not the JSON expected: %v", name, m.on.name, text, err)
		}
	}
	return res
}

// mcpScreen is the part of an observe or get_frame answer the test reads.
type mcpScreen struct {
	DeviceID string       `json:"deviceId"`
	FrameID  string       `json:"frameId"`
	App      string       `json:"app"`
	Elements []mcpElement `json:"elements"`
}

// mcpElement is the part of an answer's UI element the test reads.
type mcpElement struct {
	Ref    string `json:"ref"`
	ID     string `json:"id"`
	Text   string `json:"text"`
	Bounds [4]int `json:"bounds"`
}

// element returns the ref and the centre of the element with resource id
// id (without its package), failing the test when the screen shows none.
func (s mcpScreen) element(t *testing.T, id string) (ref string, x, y int) {
	t.Helper()
	for _, e := range s.Elements {
		if e.ID == id {
			return e.Ref, (e.Bounds[0] + e.Bounds[2]) / 2, (e.Bounds[1] + e.Bounds[3]) / 2
		}
	}
	t.Fatalf("frame %s of %s shows no element %q: %+v", s.FrameID, s.App, id, s.Elements)
	return "", 0, 0
}

// mcpAction is what an action tool answers; Receipt is kept whole, to be
// compared with a replay and with the receipt reads.
type mcpAction struct {
	IdempotencyKey string         `json:"idempotencyKey"`
	Replayed       bool           `json:"replayed"`
	Receipt        map[string]any `json:"receipt"`
}

// TestClusterMCPDrivesThePhoneThroughTheOtherInstance runs two instances
// on one database and one NATS server, as TestTwoInstancesServeOneSimPhone
// does, and drives the sim phone through the MCP surface of the instance
// that does not hold it (N): list, lease, observe (a screenshot and the UI
// elements), open apps, tap by coordinates and by ref, type text. The
// holder's (H) REST shows each action done once and in order; a tool call
// again with its key answers the same receipt and acts no more, on N and
// on H's /mcp alike. Receipt reads through N (get_receipt, list_receipts,
// get_frame of a receipt's frame) answer what H records, and reading again
// changes nothing.
func TestClusterMCPDrivesThePhoneThroughTheOtherInstance(t *testing.T) {
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
	ctx, cancel := context.WithTimeout(testutil.Context(t), 3*time.Minute)
	defer cancel()
	m := connectMCP(t, ctx, n)

	// The sim phone, listed through N's list_devices.
	var deviceID string
	waitUntil(t, time.Minute, "the sim phone listed online", func() (bool, error) {
		var page struct {
			Devices []struct {
				DeviceID string `json:"deviceId"`
				Status   string `json:"status"`
			} `json:"devices"`
		}
		m.call("list_devices", nil, &page)
		if len(page.Devices) != 1 {
			return false, nil
		}
		deviceID = page.Devices[0].DeviceID
		return page.Devices[0].Status == "online", nil
	})
	var lease struct {
		LeaseID  string `json:"leaseId"`
		DeviceID string `json:"deviceId"`
	}
	m.call("acquire_lease", map[string]any{"deviceId": deviceID, "ttlSeconds": 600}, &lease)
	if lease.LeaseID == "" || lease.DeviceID != deviceID {
		t.Fatalf("acquire_lease through %s: got %+v; want a lease on %s", n.name, lease, deviceID)
	}

	// observe through N: the screenshot, as an image block that decodes,
	// and the UI elements.
	observe := func() mcpScreen {
		t.Helper()
		var sc mcpScreen
		res := m.call("observe", map[string]any{"deviceId": deviceID, "maxWidth": 360}, &sc)
		img, ok := res.Content[0].(mcpgo.ImageContent)
		if len(res.Content) != 2 || !ok || img.MIMEType != "image/png" {
			t.Fatalf("observe through %s: got %d blocks, the first %T; want a PNG screenshot and the JSON", n.name, len(res.Content), res.Content[0])
		}
		raw, err := base64.StdEncoding.DecodeString(img.Data)
		if err != nil {
			t.Fatal(err)
		}
		pic, err := png.Decode(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("observe through %s: the screenshot: %v", n.name, err)
		}
		if w := pic.Bounds().Dx(); w != 360 {
			t.Fatalf("observe through %s: got a screenshot %d pixels wide; want 360", n.name, w)
		}
		if sc.DeviceID != deviceID || sc.FrameID == "" || len(sc.Elements) == 0 {
			t.Fatalf("observe through %s: got %+v; want the frame and its elements", n.name, sc)
		}
		return sc
	}
	observe()

	// The actions, each through N with its own key; sent keeps them in order.
	run := fmt.Sprintf("%d", time.Now().UnixNano())
	var sent []string
	receipts := map[string]map[string]any{}
	act := func(tool, key string, args map[string]any) {
		t.Helper()
		args["deviceId"], args["leaseId"], args["idempotencyKey"] = deviceID, lease.LeaseID, key
		var out mcpAction
		m.call(tool, args, &out)
		if out.IdempotencyKey != key || out.Replayed || out.Receipt["state"] != "committed" {
			t.Fatalf("%s through %s: got %+v; want a new committed receipt for %s", tool, n.name, out, key)
		}
		sent = append(sent, key)
		receipts[key] = out.Receipt
	}
	// again sends the call again, on the client given: the receipt replayed.
	again := func(on *clusterMCP, tool, key string, args map[string]any) {
		t.Helper()
		args["deviceId"], args["leaseId"], args["idempotencyKey"] = deviceID, lease.LeaseID, key
		var out mcpAction
		on.call(tool, args, &out)
		if !out.Replayed || !reflect.DeepEqual(out.Receipt, receipts[key]) {
			t.Fatalf("%s with %s again through %s: got %+v; want the receipt %v replayed", tool, key, on.on.name, out, receipts[key])
		}
	}
	// phone is the phone's UI as H's REST shows it.
	phone := func() deviceUIElement {
		t.Helper()
		r := h.c.must("GET", "/v1/devices/"+deviceID+"/snapshot", nil, http.StatusOK, nil)
		raw, _ := json.Marshal(r.body["root"])
		var root deviceUIElement
		if err := json.Unmarshal(raw, &root); err != nil {
			t.Fatal(err)
		}
		return root
	}
	// texts lists the texts of the elements with the resource id, depth first.
	texts := func(root deviceUIElement, resourceID string) []string {
		var out []string
		var walk func(e deviceUIElement)
		walk = func(e deviceUIElement) {
			if e.ResourceID == resourceID {
				out = append(out, e.Text)
			}
			for _, c := range e.Children {
				walk(c)
			}
		}
		walk(root)
		return out
	}
	key := func(name string) string { return "cluster-mcp-" + run + "-" + name }

	// Notes: focus the field by coordinates, type three pieces, save by ref.
	act("open_app", key("open-notes"), map[string]any{"package": "com.example.notes"})
	sc := observe()
	if sc.App != "com.example.notes" {
		t.Fatalf("after open_app through %s the front app is %q; want Notes", n.name, sc.App)
	}
	_, x, y := sc.element(t, "input")
	act("tap", key("focus"), map[string]any{"x": x, "y": y, "observedFrame": sc.FrameID})
	pieces := []string{"abc", "def", "ghi"}
	for i, p := range pieces {
		act("type_text", key(fmt.Sprintf("type-%d", i)), map[string]any{"text": p})
	}
	again(m, "type_text", key("type-1"), map[string]any{"text": "def"})
	hm := connectMCP(t, ctx, h)
	again(hm, "type_text", key("type-2"), map[string]any{"text": "ghi"})
	if got := texts(phone(), "com.example.notes:id/input"); !slices.Equal(got, []string{"abcdefghi"}) {
		t.Fatalf("%s shows the note field %q; want \"abcdefghi\", each piece once and in order", h.name, got)
	}
	sc = observe()
	save, _, _ := sc.element(t, "save")
	act("tap_element", key("save"), map[string]any{"ref": save, "observedFrame": sc.FrameID})
	again(m, "tap_element", key("save"), map[string]any{"ref": save, "observedFrame": sc.FrameID})
	root := phone()
	if got := texts(root, "com.example.notes:id/note"); !slices.Equal(got, []string{"abcdefghi"}) {
		t.Fatalf("%s shows the notes %q; want the one note \"abcdefghi\"", h.name, got)
	}
	if got := texts(root, "com.example.notes:id/input"); !slices.Equal(got, []string{""}) {
		t.Fatalf("%s shows the note field %q after saving; want it empty", h.name, got)
	}

	// Counter: install, open, then + by coordinates twice and by ref once;
	// each key again, and the count is still three.
	act("install_catalog_app", key("install"), map[string]any{"package": "com.example.counter"})
	act("open_app", key("open-counter"), map[string]any{"package": "com.example.counter"})
	sc = observe()
	inc, x, y := sc.element(t, "increment")
	act("tap", key("inc-0"), map[string]any{"x": x, "y": y})
	act("tap", key("inc-1"), map[string]any{"x": x, "y": y})
	act("tap_element", key("inc-2"), map[string]any{"ref": inc})
	again(m, "tap", key("inc-0"), map[string]any{"x": x, "y": y})
	again(hm, "tap", key("inc-1"), map[string]any{"x": x, "y": y})
	again(m, "tap_element", key("inc-2"), map[string]any{"ref": inc})
	if got := texts(phone(), "com.example.counter:id/count"); !slices.Equal(got, []string{"3"}) {
		t.Fatalf("%s shows the count %q; want 3, each tap once", h.name, got)
	}
	if n.holdsSim() || !h.holdsSim() {
		t.Fatalf("the sim host moved (%s holds %v); the test proves nothing about forwarding", n.name, n.app.devices.Runtime.HeldHosts())
	}

	// H's receipts: one per key, committed, in the order sent.
	hReceipts := func() []map[string]any {
		t.Helper()
		r := h.c.must("GET", "/v1/receipts?limit=200&deviceId="+deviceID, nil, http.StatusOK, nil)
		var out []map[string]any
		for _, x := range r.body["receipts"].([]any) {
			out = append(out, x.(map[string]any))
		}
		return out
	}
	ours := func(list []map[string]any) []string {
		var keys []string
		for _, rc := range list {
			if k, _ := rc["idempotencyKey"].(string); strings.HasPrefix(k, key("")) && rc["state"] == "committed" {
				keys = append(keys, k)
			}
		}
		slices.Reverse(keys) // newest first
		return keys
	}
	var recorded []map[string]any
	waitUntil(t, 30*time.Second, fmt.Sprintf("%s listing the %d committed receipts", h.name, len(sent)), func() (bool, error) {
		recorded = hReceipts()
		return len(ours(recorded)) == len(sent), nil
	})
	if got := ours(recorded); !slices.Equal(got, sent) || len(recorded) != len(sent) {
		t.Fatalf("%s lists the receipts %q (%d in all); want %q, each once and in the order sent", h.name, got, len(recorded), sent)
	}

	// Receipt reads through N: get_receipt answers what the action did and
	// what H's REST reads, again and again.
	readKey := key("type-1")
	var got map[string]any
	m.call("get_receipt", map[string]any{"idempotencyKey": readKey}, &got)
	if !reflect.DeepEqual(got, receipts[readKey]) {
		t.Fatalf("get_receipt %s through %s: got %v; want the action's receipt %v", readKey, n.name, got, receipts[readKey])
	}
	if rest := h.c.must("GET", "/v1/receipts/"+readKey, nil, http.StatusOK, nil).body; !reflect.DeepEqual(got, rest) {
		t.Fatalf("get_receipt %s through %s: got %v; %s's REST reads %v", readKey, n.name, got, h.name, rest)
	}
	var reread map[string]any
	m.call("get_receipt", map[string]any{"idempotencyKey": readKey}, &reread)
	if !reflect.DeepEqual(reread, got) {
		t.Fatalf("get_receipt %s again through %s: got %v; want %v", readKey, n.name, reread, got)
	}
	// list_receipts through N: H's list.
	var page struct {
		Receipts []map[string]any `json:"receipts"`
	}
	m.call("list_receipts", map[string]any{"deviceId": deviceID, "limit": 200}, &page)
	if !reflect.DeepEqual(page.Receipts, recorded) {
		t.Fatalf("list_receipts through %s: got %v; %s lists %v", n.name, page.Receipts, h.name, recorded)
	}
	// The receipt's after frame, drawn through N: the field as typed then.
	frames, _ := got["frames"].(map[string]any)
	after, _ := frames["after"].(string)
	if after == "" {
		t.Fatalf("receipt %s names no after frame: %v", readKey, got)
	}
	for range 2 {
		var fr mcpScreen
		res := m.call("get_frame", map[string]any{"frameId": after}, &fr)
		if _, ok := res.Content[0].(mcpgo.ImageContent); !ok || fr.FrameID != after {
			t.Fatalf("get_frame %s through %s: got %T first and %+v; want the screenshot and the frame", after, n.name, res.Content[0], fr)
		}
		i := slices.IndexFunc(fr.Elements, func(e mcpElement) bool { return e.ID == "input" })
		if i < 0 || fr.Elements[i].Text != "abcdef" {
			t.Fatalf("get_frame %s through %s shows %+v; want the note field holding \"abcdef\" (after the second piece)", after, n.name, fr.Elements)
		}
	}
	// The reads acted on nothing: H's receipts and the phone are as they were.
	if now := hReceipts(); !reflect.DeepEqual(now, recorded) {
		t.Fatalf("after the reads %s lists %v; want %v unchanged", h.name, now, recorded)
	}
	if got := texts(phone(), "com.example.counter:id/count"); !slices.Equal(got, []string{"3"}) {
		t.Fatalf("after the reads %s shows the count %q; want 3", h.name, got)
	}
}
