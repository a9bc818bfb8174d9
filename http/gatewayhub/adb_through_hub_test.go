package gatewayhub_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/png"
	"net/http/httptest"
	"strings"
	"testing"

	"phonefleet/commands/fleet"
	"phonefleet/commands/gateways"
	"phonefleet/domain"
	httpapi "phonefleet/http"
	"phonefleet/internal/gateway"
	"phonefleet/internal/sim"
	"phonefleet/testutil"
	"phonefleet/testutil/fleettest"
)

// findSimElement returns the first element of a sim phone's own tree that
// match accepts.
func findSimElement(e sim.Element, match func(sim.Element) bool) (sim.Element, bool) {
	if match(e) {
		return e, true
	}
	for _, c := range e.Children {
		if f, ok := findSimElement(c, match); ok {
			return f, true
		}
	}
	return sim.Element{}, false
}

// centre returns the middle of an element's bounds.
func centre(e domain.UIElement) (int, int) {
	return (e.Bounds[0] + e.Bounds[2]) / 2, (e.Bounds[1] + e.Bounds[3]) / 2
}

// An adb phone at a site, driven through the control plane: the real
// gateway process, enrolled with a code through the service's HTTP edge,
// serves the phone of its adb server over its tunnel to the hub; the
// fleet's commands register it, lease it, act on it (the phone's own
// state changes, the receipt commits with its frames), picture it and
// read its elements, and refuse set-of-marks pictures as for a local adb
// phone. Unplugged from the adb server, the device goes offline at the
// gateway's next listing; plugged back, online again, the same device.
func TestAdbThroughHub(t *testing.T) {
	server := testutil.ADBServer(t)
	daemon := fleettest.ADBPhone(t, server, "ADB-HUB-0001")
	phone := daemon.Phone()
	serial := daemon.Serial()

	e := newHubEnv(t)
	in := e.instance(t, instanceOptions{})
	// The service's HTTP edge: the gateway surface (enrollment, releases,
	// the tunnel) as a deployment serves it.
	edge := httptest.NewServer(httpapi.New(httpapi.Deps{Logger: quiet, App: &e.app, GatewayTunnel: in.tunnels.ServeTunnel}).Handler())
	t.Cleanup(edge.Close)
	ctx := testutil.Context(t)
	code, err := e.app.Gateways.CreateGatewayEnrollmentCode.Handle(ctx, gateways.CreateGatewayEnrollmentCode{Auth: e.admin, Name: "lab"})
	if err != nil {
		t.Fatal(err)
	}
	// Registered after the edge, so stopped before it (cleanups run last
	// first): the gateway closes its tunnel while the hub still serves.
	startAgent(t, gateway.AgentConfig{URLs: []string{edge.URL}, DataDir: t.TempDir(), EnrollCode: code.Code, ADBAddr: server,
		Version: "1.0.0", Logger: quiet})

	// The phone is registered as the gateway's adb device, online.
	var dev string
	eventually(t, "the gateway's adb phone is registered online", func() bool {
		page, err := in.app.Fleet.ListDevices.Handle(ctx, fleet.ListDevices{Auth: e.operator, DeviceQuery: fleet.DeviceQuery{Backend: domain.BackendADB}})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Devices) == 1 && page.Devices[0].Status == domain.DeviceOnline {
			dev = page.Devices[0].DeviceID
			return true
		}
		return false
	})
	model := phone.Model()
	view, err := in.app.Fleet.GetDevice.Handle(ctx, fleet.GetDevice{Auth: e.operator, DeviceID: dev})
	if err != nil {
		t.Fatal(err)
	}
	key := "adb-" + serial
	if view.Backend != domain.BackendADB || view.Model != model.DisplayName || view.Name != "lab/"+key ||
		view.Width != model.Width || view.Height != model.Height {
		t.Fatalf("device %+v; want adb %q named lab/%s, %dx%d", view, model.DisplayName, key, model.Width, model.Height)
	}
	registered := e.registration(t, dev)
	if registered.Serial != serial || registered.GatewayKey != key || registered.GatewayID == "" || registered.GatewayID == e.gatewayID {
		t.Fatalf("registration %+v; want serial %s, key %s, of the gateway the agent enrolled", registered, serial, key)
	}

	observe := func(cmd fleet.ObserveDevice) fleet.Observation {
		t.Helper()
		cmd.Auth, cmd.DeviceID = e.operator, dev
		obs, err := in.app.Fleet.ObserveDevice.Handle(ctx, cmd)
		if err != nil {
			t.Fatalf("observing %+v: %v", cmd, err)
		}
		return obs
	}
	snapshot := func() (string, domain.UIElement) {
		t.Helper()
		obs := observe(fleet.ObserveDevice{Snapshot: true})
		var root domain.UIElement
		if err := json.Unmarshal(obs.Snapshot, &root); err != nil {
			t.Fatalf("snapshot %q: %v", obs.Snapshot, err)
		}
		return obs.Frame.FrameID, root
	}
	leaseID := e.lease(t, in, dev)
	act := func(idempotencyKey, action, args, frame string) domain.Receipt {
		t.Helper()
		out, err := in.app.Fleet.PerformAction.Handle(ctx, fleet.PerformAction{Auth: e.operator, DeviceID: dev, LeaseID: leaseID,
			Action: action, Arguments: json.RawMessage(args), IdempotencyKey: idempotencyKey, ObservedFrame: frame})
		if err != nil {
			t.Fatalf("%s %s: %v", action, args, err)
		}
		if out.Receipt.State != "committed" || out.Receipt.Frames.Before == "" || out.Receipt.Frames.After == "" {
			t.Fatalf("%s: receipt %+v; want committed with before and after frames", action, out.Receipt)
		}
		return out.Receipt
	}

	// A tap at the centre of the Settings icon, decided on the frame seen,
	// opens Settings on the phone; the frame after it is a picture of the
	// phone's screen.
	home, root := snapshot()
	settings, ok := findElement(root, func(el domain.UIElement) bool { return el.Text == "Settings" })
	if !ok {
		t.Fatalf("the home screen shows no Settings icon: %+v", root)
	}
	x, y := centre(settings)
	rc := act("hub-adb-tap", "tap", fmt.Sprintf(`{"x":%d,"y":%d}`, x, y), home)
	if got := phone.Foreground(); got != "com.android.settings" {
		t.Fatalf("after the tap the phone shows %s; want com.android.settings", got)
	}
	after, err := in.app.Fleet.GetFrame.Handle(ctx, fleet.GetFrame{Auth: e.operator, FrameID: rc.Frames.After, FrameOptions: fleet.FrameOptions{Image: true}})
	if err != nil {
		t.Fatalf("the after frame: %v", err)
	}
	if img, err := png.Decode(bytes.NewReader(after.PNG)); err != nil || after.ScreenHash == "" ||
		img.Bounds().Dx() != model.Width || img.Bounds().Dy() != model.Height {
		t.Fatalf("the after frame: %s, %v; want the phone's %dx%d picture", after.ScreenHash, err, model.Width, model.Height)
	}

	// Text typed into the Notes field lands in it.
	act("hub-adb-open-notes", "open_app", `{"package":"`+sim.PkgNotes+`"}`, "")
	_, root = snapshot()
	field, ok := findElement(root, func(el domain.UIElement) bool { return strings.HasPrefix(el.Hint, "Write a note") })
	if !ok {
		t.Fatalf("Notes shows no note field: %+v", root)
	}
	act("hub-adb-focus", "tap", `{"ref":"`+field.Ref+`"}`, "")
	const text = "through the hub"
	act("hub-adb-type", "type_text", `{"text":"`+text+`"}`, "")
	if typed, ok := findSimElement(phone.Snapshot(), func(el sim.Element) bool { return el.Focused }); !ok || typed.Text != text {
		t.Fatalf("the phone's focused field holds %q; want %q", typed.Text, text)
	}

	// A screenshot is the phone's own PNG; a snapshot has its elements.
	shot := observe(fleet.ObserveDevice{Image: true})
	own, err := phone.Screenshot()
	if err != nil {
		t.Fatal(err)
	}
	if shot.ContentType != "image/png" || shot.ImageWidth != model.Width || shot.ImageHeight != model.Height || !bytes.Equal(shot.Image, own) {
		t.Fatalf("screenshot: %s %dx%d, %d bytes; want the phone's own %dx%d PNG (%d bytes)", shot.ContentType,
			shot.ImageWidth, shot.ImageHeight, len(shot.Image), model.Width, model.Height, len(own))
	}
	if _, root = snapshot(); len(root.Children) == 0 || !showsText(root, text) {
		t.Fatalf("snapshot: %+v; want the phone's elements, the typed text among them", root)
	}

	// Set-of-marks pictures are refused, as on a local adb phone.
	_, err = in.app.Fleet.ObserveDevice.Handle(ctx, fleet.ObserveDevice{Auth: e.operator, DeviceID: dev, Image: true, Marks: true})
	if domain.ErrorCode(err) != domain.CodeCapabilityUnsupported {
		t.Fatalf("a set-of-marks picture: %v; want capability_unsupported", err)
	}

	// Unplugged, the phone goes offline at the gateway's next listing and
	// cannot be observed; plugged back, it is the same device, online,
	// showing what was typed.
	if out, err := testutil.ADB(t, server, "disconnect", serial); err != nil {
		t.Fatalf("adb disconnect: %v: %s", err, out)
	}
	eventually(t, "the unplugged phone goes offline", func() bool { return e.status(t, dev) == domain.DeviceOffline })
	if !in.hub.Holds(domain.GatewayHostKey(registered.GatewayID)) {
		t.Fatal("the gateway's tunnel ended with the phone; want the phone alone gone from its list")
	}
	_, err = in.app.Fleet.ObserveDevice.Handle(ctx, fleet.ObserveDevice{Auth: e.operator, DeviceID: dev, Snapshot: true})
	if domain.ErrorCode(err) != domain.CodeDeviceUnavailable {
		t.Fatalf("observing the unplugged phone: %v; want device_unavailable", err)
	}
	testutil.ConnectADB(t, server, serial)
	eventually(t, "the phone plugged back comes online", func() bool { return e.status(t, dev) == domain.DeviceOnline })
	if page, err := in.app.Fleet.ListDevices.Handle(ctx, fleet.ListDevices{Auth: e.operator, DeviceQuery: fleet.DeviceQuery{Backend: domain.BackendADB}}); err != nil ||
		len(page.Devices) != 1 || page.Devices[0].DeviceID != dev {
		t.Fatalf("adb devices after the phone came back: %+v (%v); want %s alone", page.Devices, err, dev)
	}
	if _, root = snapshot(); !showsText(root, text) {
		t.Fatalf("after coming back the phone shows %+v; want the typed text", root)
	}
}

// registration reads the device.registered event that registered a
// device.
func (e *hubEnv) registration(t *testing.T, deviceID string) domain.DeviceRegistered {
	t.Helper()
	evs, err := e.store.Load(testutil.Context(t), domain.DeviceStream(deviceID), 1)
	if err != nil || len(evs) == 0 {
		t.Fatalf("the device's stream: %d events (%v)", len(evs), err)
	}
	ev, err := domain.Events.Decode(evs[0].Type, evs[0].SchemaVersion, evs[0].Data)
	if err != nil {
		t.Fatal(err)
	}
	r, ok := ev.(domain.DeviceRegistered)
	if !ok {
		t.Fatalf("the device's first event is %T; want device.registered", ev)
	}
	return r
}
