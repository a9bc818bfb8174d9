package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/draw"
	"image/png"
	"time"

	"phonefleet/commands/cqrs"
	"phonefleet/domain"
	"phonefleet/projections"
)

// The device calls that go to the process holding the device. Each is a
// whole command: the holder runs the same handler as a local call, so
// the device's queue there stays its only executor.
const (
	OpPerformAction = "perform_action"
	OpObserveDevice = "observe_device"
	OpPowerDevice   = "power_device"
	OpResetDevice   = "reset_device"
	OpAcquireLease  = "acquire_lease"
	OpLiveFrame     = "live_frame"
	OpReadSoftware  = "read_software"
	// OpSetNetworkProxy applies a device's network proxy setting (managed
	// proxies).
	OpSetNetworkProxy = "set_network_proxy"
)

// forwardTimeouts bounds each call when the caller's context does not
// bound it sooner: an action may wait behind a full queue and then take
// its ActTimeout; the others are shorter.
var forwardTimeouts = map[string]time.Duration{
	OpPerformAction:   75 * time.Second,
	OpObserveDevice:   30 * time.Second,
	OpPowerDevice:     60 * time.Second,
	OpResetDevice:     60 * time.Second,
	OpAcquireLease:    10 * time.Second,
	OpLiveFrame:       5 * time.Second,
	OpReadSoftware:    30 * time.Second,
	OpSetNetworkProxy: 60 * time.Second,
}

// ServedCalls are the device calls this process runs for the instances
// that do not hold a device (internal/devices.Calls): each op runs the
// handler of its command in h, the application object's fleet handlers,
// as a local call would, on the holder's queue for the device.
func ServedCalls(h Handlers) map[string]func(ctx context.Context, cmd json.RawMessage) (any, error) {
	return map[string]func(context.Context, json.RawMessage) (any, error){
		OpPerformAction:   served(h.PerformAction),
		OpObserveDevice:   served(h.ObserveDevice),
		OpPowerDevice:     served(poweredHandler{h.PowerDevice}),
		OpResetDevice:     served(h.ResetDevice),
		OpAcquireLease:    served(h.AcquireLease),
		OpLiveFrame:       served(h.LiveFrame),
		OpReadSoftware:    served(h.ReadSoftware),
		OpSetNetworkProxy: served(h.SetDeviceNetworkProxy),
	}
}

// served runs h on a forwarded command.
func served[C, R any](h cqrs.Handles[C, R]) func(ctx context.Context, raw json.RawMessage) (any, error) {
	return func(ctx context.Context, raw json.RawMessage) (any, error) {
		var c C
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, domain.Errorf(domain.CodeInternal, "internal error").Wrap(fmt.Errorf("forwarded call: %w", err))
		}
		return h.Handle(ctx, c)
	}
}

// forwardCall sends cmd as op to the holder of host through the device
// runtime and returns its answer, within the op's time bound. Errors: the
// holder's; device_unavailable (offline, retryable) when no holder took
// it; one wrapping domain.ErrUnanswered when it was sent and no answer
// came (the caller decides what that means for its command).
func forwardCall[C, R any](ctx context.Context, f *Fleet, host, op string, cmd C) (R, error) {
	var res R
	ctx, cancel := context.WithTimeout(ctx, forwardTimeouts[op])
	defer cancel()
	err := f.runtime.Call(ctx, host, op, cmd, &res)
	return res, err
}

// forwardDeviceCall is forwardCall for the calls other than actions: one
// sent and not answered is device_disconnected, retryable (nothing of it is
// recorded as done; a reset stays owed).
func forwardDeviceCall[C, R any](ctx context.Context, f *Fleet, host, op, deviceID string, cmd C) (R, error) {
	res, err := forwardCall[C, R](ctx, f, host, op, cmd)
	if errors.Is(err, domain.ErrUnanswered) {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		return res, unansweredDevice(deviceID)
	}
	return res, err
}

// unansweredDevice is the answer of a call other than an action that was
// sent and not answered: the device (or the instance driving it) dropped
// off. A power change or reset the device may have made is read from the
// device's state later; nothing is recorded as done.
func unansweredDevice(deviceID string) *domain.Error {
	return domain.Errorf(domain.CodeDeviceDisconnected, "the instance driving device %s stopped answering", deviceID).
		With("deviceId", deviceID).WithRetryable(true)
}

// poweredHandler runs a forwarded PowerDevice on the holder. The device's
// view has fields that do not travel; the caller reads it itself once the
// holder answers (the holder has waited for the read model).
type poweredHandler struct {
	power cqrs.Handles[PowerDevice, projections.DeviceView]
}

func (h poweredHandler) Handle(ctx context.Context, cmd PowerDevice) (bool, error) {
	_, err := h.power.Handle(ctx, cmd)
	return err == nil, err
}

// LiveFrame asks the holder of a device for its live screen: the
// screen's hash only (which also answers what the device can show), or
// the screen painted no wider than MaxWidth. It is sent by the instance
// that does not hold the device, for a live screen opened there.
type LiveFrame struct {
	Auth     domain.Auth
	DeviceID string
	MaxWidth int
	HashOnly bool
}

// LiveFrameAnswer is the holder's answer: the device's screenshot
// capability and width, the screen's hash, and its picture (PNG) when asked.
type LiveFrameAnswer struct {
	Screenshot bool
	Width      int
	Hash       string
	PNG        []byte
}

// LiveFrameHandler handles LiveFrame.
type LiveFrameHandler struct{ f *Fleet }

// LiveFrame returns the handler of LiveFrame.
func (f *Fleet) LiveFrame() LiveFrameHandler { return LiveFrameHandler{f} }

// Handle reads the device's live screen here, where it is driven, outside
// its action queue. It needs devices:read; OAuth apps are refused.
// Errors: permission_denied, device_unavailable (not_found; offline, or a
// device this process no longer drives, which the caller asks again),
// backend_resolution_failed, backend_not_implemented, and the backend's.
func (h LiveFrameHandler) Handle(ctx context.Context, c LiveFrame) (LiveFrameAnswer, error) {
	if err := denyLive(c.Auth); err != nil {
		return LiveFrameAnswer{}, err
	}
	d, err := h.f.visibleDevice(ctx, c.Auth, c.DeviceID)
	if err != nil {
		return LiveFrameAnswer{}, err
	}
	if _, _, err := h.f.runtime.Route(ctx, &d); err != nil {
		return LiveFrameAnswer{}, err
	}
	backend, err := h.f.runtime.Resolve(ctx, &d)
	if err != nil {
		return LiveFrameAnswer{}, err
	}
	caps := backend.Capabilities()
	a := LiveFrameAnswer{Screenshot: caps.Screenshot, Width: caps.Width}
	if !caps.Screenshot {
		return a, nil
	}
	src := sourceOf(backend)
	if c.HashOnly {
		a.Hash = src.ScreenHash()
		return a, nil
	}
	img, hash, err := src.LiveFrame(c.MaxWidth)
	if err != nil {
		return LiveFrameAnswer{}, err
	}
	var buf bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestSpeed}).Encode(&buf, img); err != nil {
		return LiveFrameAnswer{}, err
	}
	a.Hash, a.PNG = hash, buf.Bytes()
	return a, nil
}

// remoteScreen is the live screen of a device another instance drives:
// each look is a forwarded live_frame call.
type remoteScreen struct {
	f    *Fleet
	host string
	call LiveFrame
}

// ScreenHash implements ScreenSource; an unreachable screen has no hash.
func (r *remoteScreen) ScreenHash() string {
	c := r.call
	c.HashOnly = true
	a, err := forwardCall[LiveFrame, LiveFrameAnswer](context.Background(), r.f, r.host, OpLiveFrame, c)
	if err != nil {
		return ""
	}
	return a.Hash
}

// LiveFrame implements ScreenSource.
func (r *remoteScreen) LiveFrame(maxWidth int) (*image.RGBA, string, error) {
	c := r.call
	c.MaxWidth = maxWidth
	a, err := forwardDeviceCall[LiveFrame, LiveFrameAnswer](context.Background(), r.f, r.host, OpLiveFrame, c.DeviceID, c)
	if err != nil {
		return nil, "", err
	}
	img, err := png.Decode(bytes.NewReader(a.PNG))
	if err != nil {
		return nil, "", domain.Errorf(domain.CodeBackendCommandFailed, "the device's screen cannot be read").Wrap(err)
	}
	rgba, ok := img.(*image.RGBA)
	if !ok {
		rgba = image.NewRGBA(img.Bounds())
		draw.Draw(rgba, rgba.Bounds(), img, img.Bounds().Min, draw.Src)
	}
	return rgba, a.Hash, nil
}
