package commands

import (
	"context"
	"encoding/json"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// ObserveDevice looks at a device's screen now (GET
// /v1/devices/{deviceId}/screenshot and /snapshot).
type ObserveDevice struct {
	Auth     domain.Auth
	DeviceID string
	// Image asks for a PNG screenshot, at most MaxWidth wide when positive.
	Image    bool
	MaxWidth int
	// Snapshot asks for the UI element tree.
	Snapshot bool
	// LeaseID, when given, must be the device's lease in force held by the
	// caller; observing does not need a lease.
	LeaseID string
}

// Observation is a device's screen as just captured and stored as a frame.
type Observation struct {
	Frame    domain.FrameRef
	DeviceID string
	Width    int
	Height   int
	ScreenOn bool
	PNG      []byte
	Snapshot json.RawMessage
}

// ObserveDeviceHandler handles ObserveDevice.
type ObserveDeviceHandler struct{ f *Fleet }

// ObserveDevice returns the handler of ObserveDevice.
func (f *Fleet) ObserveDevice() ObserveDeviceHandler { return ObserveDeviceHandler{f} }

// Handle captures the screen and stores it as a frame (frame.captured), so
// an action can name it as observedFrame. It needs devices:read. Errors:
// device_unavailable (not_found, offline), backend_resolution_failed,
// backend_not_implemented, capability_unsupported, invalid_argument,
// lease_mismatch, device_disconnected, backend_command_failed.
func (h ObserveDeviceHandler) Handle(ctx context.Context, cmd ObserveDevice) (Observation, error) {
	f := h.f
	if err := cmd.Auth.Require(domain.ScopeDevicesRead); err != nil {
		return Observation{}, err
	}
	if cmd.MaxWidth < 0 {
		return Observation{}, domain.Errorf(domain.CodeInvalidArgument, "maxWidth must be positive")
	}
	d, err := f.visibleDevice(ctx, cmd.Auth, cmd.DeviceID)
	if err != nil {
		return Observation{}, err
	}
	now := f.now()
	if cmd.LeaseID != "" {
		if _, err := d.CheckLease(now, domain.HolderOf(cmd.Auth), cmd.LeaseID); err != nil {
			return Observation{}, err
		}
	}
	backend, err := f.runtime.Resolve(ctx, &d)
	if err != nil {
		return Observation{}, err
	}
	caps := backend.Capabilities()
	if cmd.Image && !caps.Screenshot || cmd.Snapshot && !caps.UISnapshot {
		return Observation{}, domain.Errorf(domain.CodeCapabilityUnsupported, "this device cannot be observed that way").
			With("capability", map[bool]string{true: "screenshot", false: "ui_snapshot"}[cmd.Image && !caps.Screenshot])
	}
	obs, err := backend.Observe(ctx, domain.ObserveOptions{Image: cmd.Image, MaxWidth: cmd.MaxWidth, Snapshot: cmd.Snapshot, Replay: true})
	if err != nil {
		return Observation{}, err
	}
	row := f.frameFor(&d, obs, now)
	if row.stored {
		// Same screen as the last stored frame: name that one.
		out := Observation{Frame: *row.ref(), DeviceID: d.ID, Width: obs.Width, Height: obs.Height, ScreenOn: obs.ScreenOn,
			PNG: obs.PNG, Snapshot: obs.Snapshot}
		return out, nil
	}
	if cmd.MaxWidth > 0 && cmd.MaxWidth < obs.Width {
		row.PNG = nil // only the full-size picture is kept; it can be redrawn
	}
	ev := domain.FrameCaptured{Frame: *row.ref(), DeviceID: d.ID, Reason: observeReason(cmd), RunID: cmd.Auth.RunID}
	news, err := eventstore.Encode(domain.Events, d.OrgID, domain.Event(ev))
	if err != nil {
		return Observation{}, err
	}
	u := (&eventstore.Unit{}).Append("frame-"+row.ID, eventstore.NoStream, news...)
	queueFrame(u, row)
	if _, err := f.store.Commit(ctx, u); err != nil {
		return Observation{}, err
	}
	f.runtime.RememberFrames(row.Frame)
	return Observation{Frame: *row.ref(), DeviceID: d.ID, Width: obs.Width, Height: obs.Height, ScreenOn: obs.ScreenOn,
		PNG: obs.PNG, Snapshot: obs.Snapshot}, nil
}

func observeReason(cmd ObserveDevice) string {
	switch {
	case cmd.Image && cmd.Snapshot:
		return "screenshot_and_snapshot"
	case cmd.Image:
		return "screenshot"
	}
	return "snapshot"
}
