package tunnel

import (
	"encoding/json"

	"phonefleet/domain"
)

// The methods of the tunnel. The gateway calls MethodHello once per
// connection, first, and sends MethodDevices when its device list
// changes; the control plane calls the device.* methods, whose params
// always name the device by the gateway's key for it.
const (
	// MethodHello (gateway → control plane, request): params Hello,
	// result Welcome, answered once the control plane serves the
	// gateway's devices.
	MethodHello = "gateway.hello"
	// MethodDevices (gateway → control plane, notification): params
	// DevicesChanged, the whole current list.
	MethodDevices = "gateway.devices"
	// MethodObserve: params ObserveParams, result domain.Observation
	// (sent as Observation).
	MethodObserve = "device.observe"
	// MethodAct: params ActParams, result domain.ActionResult.
	MethodAct = "device.act"
	// MethodWake, MethodStop and MethodReset: params DeviceParams, result
	// an empty object.
	MethodWake  = "device.wake"
	MethodStop  = "device.stop"
	MethodReset = "device.reset"
	// MethodCapabilities: params DeviceParams, result domain.Capabilities.
	MethodCapabilities = "device.capabilities"
)

// Hello introduces a gateway on a new connection.
type Hello struct {
	// Version is the gateway's phonefleet version, Channel the release
	// channel it follows.
	Version string       `json:"version"`
	Channel string       `json:"channel"`
	Devices []DeviceInfo `json:"devices"`
}

// DeviceInfo describes one device a gateway serves.
type DeviceInfo struct {
	// Key names the device within its gateway, stably across restarts
	// ("sim-1", "adb-<serial>").
	Key string `json:"key"`
	// Backend is domain.BackendSim or domain.BackendADB.
	Backend      string              `json:"backend"`
	Model        string              `json:"model"`
	Serial       string              `json:"serial"`
	Width        int                 `json:"width"`
	Height       int                 `json:"height"`
	Capabilities domain.Capabilities `json:"capabilities"`
}

// Welcome answers Hello: who the control plane knows the gateway as, and
// the device id of each device key.
type Welcome struct {
	GatewayID string     `json:"gatewayId"`
	OrgID     string     `json:"orgId"`
	Devices   []DeviceID `json:"devices"`
}

// DeviceID pairs a gateway's device key with its control-plane device id.
type DeviceID struct {
	Key      string `json:"key"`
	DeviceID string `json:"deviceId"`
}

// DevicesChanged is the gateway's whole device list after a change.
type DevicesChanged struct {
	Devices []DeviceInfo `json:"devices"`
}

// DeviceParams names the device of a device.* call.
type DeviceParams struct {
	Device string `json:"device"`
}

// ObserveParams are device.observe's params: domain.ObserveOptions
// without Marks, which is a function (the control plane draws marks
// itself, from the replay or the snapshot).
type ObserveParams struct {
	Device   string `json:"device"`
	Image    bool   `json:"image,omitempty"`
	MaxWidth int    `json:"maxWidth,omitempty"`
	Format   string `json:"format,omitempty"`
	Quality  int    `json:"quality,omitempty"`
	Snapshot bool   `json:"snapshot,omitempty"`
	Replay   bool   `json:"replay,omitempty"`
}

// NewObserveParams returns the params observing device with o (o.Marks
// is not sent).
func NewObserveParams(device string, o domain.ObserveOptions) ObserveParams {
	return ObserveParams{Device: device, Image: o.Image, MaxWidth: o.MaxWidth, Format: o.Format, Quality: o.Quality,
		Snapshot: o.Snapshot, Replay: o.Replay}
}

// Options returns the observe options the params carry.
func (p ObserveParams) Options() domain.ObserveOptions {
	return domain.ObserveOptions{Image: p.Image, MaxWidth: p.MaxWidth, Format: p.Format, Quality: p.Quality,
		Snapshot: p.Snapshot, Replay: p.Replay}
}

// ActParams are device.act's params: the action as its type and arguments
// object, which the gateway reads with domain.ParseAction.
type ActParams struct {
	Device    string          `json:"device"`
	Type      string          `json:"type"`
	Arguments json.RawMessage `json:"arguments"`
}

// NewActParams returns the params performing a on device.
func NewActParams(device string, a domain.Action) ActParams {
	return ActParams{Device: device, Type: string(a.Type), Arguments: a.ArgumentsJSON()}
}

// Action reads the action back (domain.ParseAction): invalid_argument
// when it is not a valid one.
func (p ActParams) Action() (domain.Action, error) {
	return domain.ParseAction(p.Type, p.Arguments)
}

// Observation is domain.Observation as device.observe's result carries
// it: the same field names (decode it into a domain.Observation), with
// empty fields left out so that a nil Snapshot arrives nil, not as the
// four bytes "null". Convert with Observation(o); a field added to
// domain.Observation breaks that conversion until it is added here.
type Observation struct {
	ScreenHash  string
	Width       int
	Height      int
	ScreenOn    bool
	PNG         []byte          `json:",omitempty"`
	Image       []byte          `json:",omitempty"`
	ImageType   string          `json:",omitempty"`
	ImageWidth  int             `json:",omitempty"`
	ImageHeight int             `json:",omitempty"`
	Marks       []domain.Mark   `json:",omitempty"`
	Snapshot    json.RawMessage `json:",omitempty"`
	// Tree never travels: it is given only to a caller that asked for it
	// (domain.ObserveOptions.Tree), which device.observe's options never do.
	Tree   *domain.UIElement `json:"-"`
	Replay []byte            `json:",omitempty"`
}
