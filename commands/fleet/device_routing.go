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
	"phonefleet/eventstore"
	"phonefleet/projections"
)

// Forwarder carries a device call to the process that holds the device's
// host (internal/cluster implements it over NATS request–reply). A
// deployment of one instance has none: a device another process drives
// then answers device_unavailable (offline), as the runtime says.
type Forwarder interface {
	// Forward sends the call op with body to the holder of host and
	// returns the holder's reply (what ServeForwarded answered there). An
	// error wrapping ErrNotDelivered means no holder took the call, so
	// nothing ran; any other error means the call may have been taken and
	// its outcome is not known here.
	Forward(ctx context.Context, host, op string, body []byte) ([]byte, error)
}

// ErrNotDelivered is wrapped by a Forwarder's error when the call reached
// no holder (nobody holds the host, the transport is down): nothing ran.
var ErrNotDelivered = errors.New("no process holding the device took the call")

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
)

// forwardTimeouts bounds each call when the caller's context does not
// bound it sooner: an action may wait behind a full queue and then take
// its ActTimeout; the others are shorter.
var forwardTimeouts = map[string]time.Duration{
	OpPerformAction: 75 * time.Second,
	OpObserveDevice: 30 * time.Second,
	OpPowerDevice:   60 * time.Second,
	OpResetDevice:   60 * time.Second,
	OpAcquireLease:  10 * time.Second,
	OpLiveFrame:     5 * time.Second,
}

// forwardedOp runs a forwarded call's command on this process.
type forwardedOp func(ctx context.Context, f *Fleet, cmd json.RawMessage) (any, error)

// forwardedOps are the calls ServeForwarded runs.
var forwardedOps = map[string]forwardedOp{
	OpPerformAction: serveOp(func(f *Fleet) cqrs.Handles[PerformAction, ActOutcome] { return f.PerformAction() }),
	OpObserveDevice: serveOp(func(f *Fleet) cqrs.Handles[ObserveDevice, Observation] { return f.ObserveDevice() }),
	OpPowerDevice:   serveOp(func(f *Fleet) cqrs.Handles[PowerDevice, bool] { return poweredHandler{f} }),
	OpResetDevice:   serveOp(func(f *Fleet) cqrs.Handles[ResetDevice, bool] { return f.ResetDevice() }),
	OpAcquireLease:  serveOp(func(f *Fleet) cqrs.Handles[AcquireLease, projections.LeaseView] { return f.AcquireLease() }),
	OpLiveFrame:     serveOp(func(f *Fleet) cqrs.Handles[liveFrameCall, liveFrameAnswer] { return liveFrameHandler{f} }),
}

func serveOp[C, R any](h func(f *Fleet) cqrs.Handles[C, R]) forwardedOp {
	return func(ctx context.Context, f *Fleet, raw json.RawMessage) (any, error) {
		var c C
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, domain.Errorf(domain.CodeInternal, "internal error").Wrap(fmt.Errorf("forwarded call: %w", err))
		}
		return h(f).Handle(ctx, c)
	}
}

// SetForwarder gives the fleet its way to the other instances. Call it
// once, before serving requests; nil means none.
func (f *Fleet) SetForwarder(fw Forwarder) {
	if fw == nil {
		f.forwarder.Store(nil)
		return
	}
	f.forwarder.Store(&fw)
}

func (f *Fleet) forwarding() Forwarder {
	if p := f.forwarder.Load(); p != nil {
		return *p
	}
	return nil
}

// forwardedKey marks a context whose call came from another instance: it
// runs here or nowhere, never forwarded again.
type forwardedKey struct{}

func isForwarded(ctx context.Context) bool { return ctx.Value(forwardedKey{}) != nil }

// errNotHere answers a forwarded call for a device this process no longer
// holds: the caller asks again, and the host's new holder answers.
var errNotHere = errors.New("this process does not hold the device")

// remote reports the host to forward a call on d to, when another process
// drives d and there is a way to reach it. A call that came forwarded and
// finds d elsewhere answers errNotHere.
func (f *Fleet) remote(ctx context.Context, d *domain.Device) (host string, ok bool, err error) {
	host, local := f.runtime.Locate(d)
	if local || f.forwarding() == nil {
		return host, false, nil // here, or nowhere: Resolve answers offline
	}
	if isForwarded(ctx) {
		return host, false, errNotHere
	}
	return host, true, nil
}

// call is a forwarded call as it travels: the caller's event metadata and
// the command (which carries the caller's authorization context: the
// holder checks scopes and tenancy again).
type call struct {
	Meta eventstore.Metadata `json:"meta"`
	Cmd  json.RawMessage     `json:"cmd"`
}

// reply is a forwarded call's answer.
type reply struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  *wireError      `json:"error,omitempty"`
}

// wireError is an error as it travels: a domain error whole; a conflict
// (the run's stream moved on) and a call for a device the holder does not
// hold as flags, since the caller acts on them; anything else as
// internal_error.
type wireError struct {
	Code      domain.Code    `json:"code,omitempty"`
	Message   string         `json:"message,omitempty"`
	Retryable *bool          `json:"retryable,omitempty"`
	Extra     map[string]any `json:"extra,omitempty"`
	Conflict  bool           `json:"conflict,omitempty"`
	NotHere   bool           `json:"notHere,omitempty"`
}

func toWire(err error) *wireError {
	var de *domain.Error
	switch {
	case errors.Is(err, errNotHere):
		return &wireError{NotHere: true}
	case errors.Is(err, eventstore.ErrConflict):
		return &wireError{Conflict: true}
	case errors.As(err, &de):
		return &wireError{Code: de.Code, Message: de.Message, Retryable: de.Retryable, Extra: de.Extra}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return &wireError{Code: domain.CodeServiceUnavailable, Message: "the call ran out of time on the instance holding the device"}
	default:
		return &wireError{Code: domain.CodeInternal, Message: "internal error"}
	}
}

func (w *wireError) err() error {
	switch {
	case w.NotHere:
		return errNotHere
	case w.Conflict:
		return &eventstore.ConflictError{}
	}
	return &domain.Error{Code: w.Code, Message: w.Message, Retryable: w.Retryable, Extra: w.Extra}
}

// ServeForwarded runs a device call another instance forwarded here (the
// cluster transport calls it for each call on a host this process holds)
// and returns the reply to send back. It never fails: every error travels
// in the reply.
func (f *Fleet) ServeForwarded(ctx context.Context, op string, body []byte) []byte {
	answer := func(res any, err error) []byte {
		var r reply
		if err != nil {
			r.Error = toWire(err)
		} else if b, merr := json.Marshal(res); merr != nil {
			r.Error = toWire(merr)
		} else {
			r.Result = b
		}
		b, _ := json.Marshal(r) // plain data: it cannot fail
		return b
	}
	run, ok := forwardedOps[op]
	if !ok {
		return answer(nil, domain.Errorf(domain.CodeServiceUnavailable, "this instance does not know the device call %q; it runs another version", op).WithRetryable(true))
	}
	var c call
	if err := json.Unmarshal(body, &c); err != nil {
		return answer(nil, fmt.Errorf("forwarded call: %w", err))
	}
	ctx = context.WithValue(eventstore.WithMetadata(ctx, c.Meta), forwardedKey{}, true)
	return answer(run(ctx, f, c.Cmd))
}

// notHereRetries is how often a call answered errNotHere is sent again
// (the host moved between the caller's look and the call) before the
// device answers offline.
var notHereRetries = []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}

// undeliveredRetries is how often a call nobody took is sent again while
// some process holds the device's host: one that has just taken it starts
// listening within moments.
var undeliveredRetries = []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond}

// hostHeld reports whether some process holds host's claim now (true when
// it cannot be told).
func (f *Fleet) hostHeld(ctx context.Context, host string) bool {
	if f.cfg.HostState == nil {
		return true
	}
	_, held, err := f.cfg.HostState(ctx, host)
	return err != nil || held
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// errUnanswered wraps the transport's error when a call was sent and no
// answer came: the call may have run.
type errUnanswered struct{ err error }

func (e errUnanswered) Error() string {
	return "the instance holding the device did not answer: " + e.err.Error()
}
func (e errUnanswered) Unwrap() error { return e.err }

// forwardCall sends cmd as op to the holder of host and decodes its
// answer. Errors: the holder's; device_unavailable (offline, retryable)
// when no holder took it; errUnanswered when it was sent and no answer
// came (the caller decides what that means for its command).
func forwardCall[C, R any](ctx context.Context, f *Fleet, host, op string, cmd C) (R, error) {
	var zero R
	fw := f.forwarding()
	// A call without metadata (a live frame) records nothing; one that
	// records fails on the holder as it would here.
	meta, _ := eventstore.MetadataFrom(ctx)
	raw, err := json.Marshal(cmd)
	if err != nil {
		return zero, err
	}
	body, err := json.Marshal(call{Meta: meta, Cmd: raw})
	if err != nil {
		return zero, err
	}
	ctx, cancel := context.WithTimeout(ctx, forwardTimeouts[op])
	defer cancel()
	undelivered := 0
	for attempt := 0; ; attempt++ {
		out, err := fw.Forward(ctx, host, op, body)
		if errors.Is(err, ErrNotDelivered) {
			// A process holding the claim may not listen yet (it has just
			// taken the host); one that holds nothing never will.
			if undelivered < len(undeliveredRetries) && f.hostHeld(ctx, host) {
				if !sleepCtx(ctx, undeliveredRetries[undelivered]) {
					return zero, ctx.Err()
				}
				undelivered++
				continue
			}
			return zero, hostUnreachable(host)
		}
		if err != nil {
			return zero, errUnanswered{err}
		}
		var r reply
		if err := json.Unmarshal(out, &r); err != nil {
			return zero, fmt.Errorf("forwarded %s: %w", op, err)
		}
		if r.Error != nil {
			if r.Error.NotHere && attempt < len(notHereRetries) {
				if !sleepCtx(ctx, notHereRetries[attempt]) {
					return zero, ctx.Err()
				}
				continue
			}
			if r.Error.NotHere {
				return zero, hostUnreachable(host)
			}
			return zero, r.Error.err()
		}
		var res R
		if err := json.Unmarshal(r.Result, &res); err != nil {
			return zero, fmt.Errorf("forwarded %s answer: %w", op, err)
		}
		return res, nil
	}
}

// forwardDeviceCall is forwardCall for the calls other than actions: one
// sent and not answered is device_disconnected, retryable (nothing of it is
// recorded as done; a reset stays owed).
func forwardDeviceCall[C, R any](ctx context.Context, f *Fleet, host, op, deviceID string, cmd C) (R, error) {
	res, err := forwardCall[C, R](ctx, f, host, op, cmd)
	var u errUnanswered
	if errors.As(err, &u) {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		return res, unansweredDevice(deviceID)
	}
	return res, err
}

// hostUnreachable is the answer for a device whose host no process holds
// (or none can be reached): nothing was done.
func hostUnreachable(host string) *domain.Error {
	return domain.Errorf(domain.CodeDeviceUnavailable, "no instance of the service drives this device now; nothing was done").
		With("reason", domain.ReasonOffline).WithRetryable(true).With("host", host)
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
type poweredHandler struct{ f *Fleet }

func (h poweredHandler) Handle(ctx context.Context, cmd PowerDevice) (bool, error) {
	_, err := h.f.PowerDevice().Handle(ctx, cmd)
	return err == nil, err
}

// liveFrameCall asks the holder of a device for its live screen: the
// screen's hash only (Probe also answers what the device can show), or
// the screen painted no wider than MaxWidth.
type liveFrameCall struct {
	Auth     domain.Auth
	DeviceID string
	MaxWidth int
	HashOnly bool
}

// liveFrameAnswer is the holder's answer: the device's screenshot
// capability and width, the screen's hash, and its picture (PNG) when asked.
type liveFrameAnswer struct {
	Screenshot bool
	Width      int
	Hash       string
	PNG        []byte
}

// liveFrameHandler runs a forwarded liveFrameCall on the holder.
type liveFrameHandler struct{ f *Fleet }

func (h liveFrameHandler) Handle(ctx context.Context, c liveFrameCall) (liveFrameAnswer, error) {
	if err := denyLive(c.Auth); err != nil {
		return liveFrameAnswer{}, err
	}
	d, err := h.f.visibleDevice(ctx, c.Auth, c.DeviceID)
	if err != nil {
		return liveFrameAnswer{}, err
	}
	if _, _, err := h.f.remote(ctx, &d); err != nil {
		return liveFrameAnswer{}, err
	}
	backend, err := h.f.runtime.Resolve(ctx, &d)
	if err != nil {
		return liveFrameAnswer{}, err
	}
	caps := backend.Capabilities()
	a := liveFrameAnswer{Screenshot: caps.Screenshot, Width: caps.Width}
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
		return liveFrameAnswer{}, err
	}
	var buf bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestSpeed}).Encode(&buf, img); err != nil {
		return liveFrameAnswer{}, err
	}
	a.Hash, a.PNG = hash, buf.Bytes()
	return a, nil
}

// remoteScreen is the live screen of a device another instance drives:
// each look is a forwarded live_frame call.
type remoteScreen struct {
	f    *Fleet
	host string
	call liveFrameCall
}

// ScreenHash implements ScreenSource; an unreachable screen has no hash.
func (r *remoteScreen) ScreenHash() string {
	c := r.call
	c.HashOnly = true
	a, err := forwardCall[liveFrameCall, liveFrameAnswer](context.Background(), r.f, r.host, OpLiveFrame, c)
	if err != nil {
		return ""
	}
	return a.Hash
}

// LiveFrame implements ScreenSource.
func (r *remoteScreen) LiveFrame(maxWidth int) (*image.RGBA, string, error) {
	c := r.call
	c.MaxWidth = maxWidth
	a, err := forwardDeviceCall[liveFrameCall, liveFrameAnswer](context.Background(), r.f, r.host, OpLiveFrame, c.DeviceID, c)
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
