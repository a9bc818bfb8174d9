package gateway

import (
	"context"
	"errors"

	"phonefleet/domain"
	"phonefleet/internal/backends"
	"phonefleet/internal/tunnel"
)

// simPictures draws a sim phone's pictures from its replay state, as the
// sim's frame renderer draws a stored frame.
var simPictures, _ = (&backends.Registry{}).Renderer(domain.BackendSim)

// tunnelDevice is the domain.Backend of one device a gateway brings: each
// call is a request over the gateway's tunnel. What the device can do is
// what the gateway said in its hello (or its last device list).
type tunnelDevice struct {
	peer     *tunnel.Peer
	deviceID string
	info     tunnel.DeviceInfo
}

// Capabilities implements domain.Backend.
func (d *tunnelDevice) Capabilities() domain.Capabilities { return d.info.Capabilities }

// Observe implements domain.Backend. A sim phone is asked for its replay
// state only (a few kilobytes cross the tunnel), and its picture, marks
// and UI snapshot are drawn here from that state, exactly as a sim phone
// of this process draws them; Replay is kept when asked for (a frame is
// drawn from it later). Any other device is asked for what the caller
// asked; set-of-marks pictures are capability_unsupported, as on an adb
// device of this process. A call the gateway never got or never answered
// is device_disconnected (retryable).
func (d *tunnelDevice) Observe(ctx context.Context, opts domain.ObserveOptions) (domain.Observation, error) {
	if d.info.Backend != domain.BackendSim {
		if opts.Image && opts.Marks != nil {
			return domain.Observation{}, domain.Errorf(domain.CodeCapabilityUnsupported, "adb devices do not draw set-of-marks pictures").
				With("capability", "marks")
		}
		var obs domain.Observation
		if err := d.peer.Call(ctx, tunnel.MethodObserve, tunnel.NewObserveParams(d.info.Key, opts), &obs); err != nil {
			return domain.Observation{}, d.callFailed(err)
		}
		return obs, nil
	}
	var state domain.Observation
	if err := d.peer.Call(ctx, tunnel.MethodObserve, tunnel.ObserveParams{Device: d.info.Key, Replay: true}, &state); err != nil {
		return domain.Observation{}, d.callFailed(err)
	}
	if !opts.Image && !opts.Snapshot {
		if !opts.Replay {
			state.Replay = nil
		}
		return state, nil
	}
	obs, err := simPictures.RenderFrame(ctx, state.Replay, opts)
	if err != nil {
		return domain.Observation{}, err
	}
	if opts.Replay {
		obs.Replay = state.Replay
	}
	return obs, nil
}

// Act implements domain.Backend. A request the gateway never got is
// device_disconnected (the action did not happen); one it got and did not
// answer is action_outcome_unknown (it may have happened). The gateway's
// own refusals come back as it sent them.
func (d *tunnelDevice) Act(ctx context.Context, a domain.Action) (domain.ActionResult, error) {
	var res domain.ActionResult
	err := d.peer.Call(ctx, tunnel.MethodAct, tunnel.NewActParams(d.info.Key, a), &res)
	var de *domain.Error
	switch {
	case err == nil:
		return res, nil
	case errors.Is(err, tunnel.ErrNotSent):
		return domain.ActionResult{}, domain.Errorf(domain.CodeDeviceDisconnected,
			"the gateway of device %s went away before the action reached it; nothing was done", d.deviceID).
			With("deviceId", d.deviceID).WithRetryable(true).Wrap(err)
	case !errors.Is(err, tunnel.ErrNoAnswer) && errors.As(err, &de):
		return domain.ActionResult{}, de
	default:
		// Sent, and no answer that can be read came back.
		return domain.ActionResult{}, domain.Errorf(domain.CodeActionOutcomeUnknown,
			"the gateway of device %s did not answer the action; it may have happened", d.deviceID).
			With("deviceId", d.deviceID).Wrap(err)
	}
}

// Wake implements domain.Backend.
func (d *tunnelDevice) Wake(ctx context.Context) error {
	return d.command(ctx, tunnel.MethodWake)
}

// Stop implements domain.Backend.
func (d *tunnelDevice) Stop(ctx context.Context) error {
	return d.command(ctx, tunnel.MethodStop)
}

// Reset implements domain.Backend.
func (d *tunnelDevice) Reset(ctx context.Context) error {
	return d.command(ctx, tunnel.MethodReset)
}

func (d *tunnelDevice) command(ctx context.Context, method string) error {
	if err := d.peer.Call(ctx, method, tunnel.DeviceParams{Device: d.info.Key}, nil); err != nil {
		return d.callFailed(err)
	}
	return nil
}

// callFailed maps the error of a call other than an action: the gateway's
// own error as it sent it; a call it never got, or never answered, is
// device_disconnected (retryable: nothing of it is recorded as done); an
// answer that cannot be read is backend_command_failed.
func (d *tunnelDevice) callFailed(err error) error {
	var de *domain.Error
	switch {
	case errors.Is(err, tunnel.ErrNotSent), errors.Is(err, tunnel.ErrNoAnswer):
		return domain.Errorf(domain.CodeDeviceDisconnected, "the gateway of device %s went away during the call", d.deviceID).
			With("deviceId", d.deviceID).WithRetryable(true).Wrap(err)
	case errors.As(err, &de):
		return de
	default:
		return domain.Errorf(domain.CodeBackendCommandFailed, "the gateway's answer for device %s cannot be read", d.deviceID).
			With("deviceId", d.deviceID).Wrap(err)
	}
}

var _ domain.Backend = (*tunnelDevice)(nil)
