// Package backends holds the device backend adapters behind domain.Backend:
// sim (the built-in virtual phone, internal/sim), adb (Android devices
// behind an adb server, internal/adb), and the kind that has no adapter
// yet (robot), which answers backend_not_implemented. Registry resolves a
// device row to its adapter.
package backends

import (
	"context"
	"slices"

	"phonefleet/domain"
)

// Registry resolves devices to their backends. It implements
// domain.Resolver.
type Registry struct {
	// Sim drives the sim phones; nil means this process drives none. Its
	// host claim is also the claim on the adb devices: the process that
	// drives the devices drives them all, so one process settles what an
	// earlier one left unfinished.
	Sim *SimHost
	// ADB drives the adb devices; nil means this process drives none.
	ADB *ADBHost
	// Gateways drives the devices gateways bring (the gateway hub); nil
	// means none are driven here. A gateway's device resolves only there,
	// never to the adapters above.
	Gateways GatewayBackends
	// Wrap, when not nil, wraps every resolved backend (tests use it to
	// inject faults: a dropped connection, an outcome that never comes).
	Wrap func(d *domain.Device, b domain.Backend) domain.Backend
}

// GatewayBackends drives the devices gateways bring, over their tunnels.
type GatewayBackends interface {
	// Device returns the backend of d, a device of a gateway (GatewayID
	// set). Errors: device_unavailable (offline) when the gateway's tunnel
	// does not end at this process or the gateway does not report d now.
	Device(ctx context.Context, d *domain.Device) (domain.Backend, error)
}

// Resolve returns the backend of d. Errors: backend_resolution_failed (the
// row names no valid kind), backend_not_implemented (robot),
// device_unavailable with reason offline (a device this process does not
// drive, or no adb server answers), device_disconnected (the adb server
// does not have the device now), internal_error (a sim's saved state
// cannot be read).
func (r *Registry) Resolve(ctx context.Context, d *domain.Device) (domain.Backend, error) {
	if err := CheckKind(d); err != nil {
		return nil, err
	}
	var b domain.Backend
	var err error
	switch {
	case d.GatewayID != "":
		if r.Gateways == nil {
			return nil, offline(d.ID)
		}
		b, err = r.Gateways.Device(ctx, d)
	case r.Sim == nil:
		return nil, offline(d.ID)
	case d.Backend == domain.BackendADB:
		if r.ADB == nil || !r.Sim.Hosting() {
			return nil, offline(d.ID)
		}
		b, err = r.ADB.Device(ctx, d)
	default:
		b, err = r.Sim.Device(ctx, d)
	}
	if err != nil {
		return nil, err
	}
	if r.Wrap != nil {
		return r.Wrap(d, b), nil
	}
	return b, nil
}

// CheckKind answers backend_resolution_failed for a device naming no valid
// kind and backend_not_implemented for a kind without an adapter.
func CheckKind(d *domain.Device) error {
	switch {
	case d.Backend == domain.BackendSim, d.Backend == domain.BackendADB:
		return nil
	case slices.Contains(domain.BackendKinds, d.Backend):
		return domain.Errorf(domain.CodeBackendNotImplemented, "device %s uses the %s backend, which has no adapter yet", d.ID, d.Backend).
			With("deviceId", d.ID).With("backend", d.Backend)
	default:
		return domain.Errorf(domain.CodeBackendResolutionFailed, "device %s names no valid backend", d.ID).
			With("deviceId", d.ID)
	}
}

// Renderer returns the frame renderer of a backend kind, if it has one.
func (r *Registry) Renderer(kind string) (domain.FrameRenderer, bool) {
	switch kind {
	case domain.BackendSim:
		return simRenderer{}, true
	case domain.BackendADB:
		return adbRenderer{}, true
	}
	return nil, false
}

func offline(deviceID string) error {
	return domain.Errorf(domain.CodeDeviceUnavailable, "device %s is not driven by this instance of the service", deviceID).
		With("reason", domain.ReasonOffline).With("deviceId", deviceID).WithRetryable(true)
}

var _ domain.Resolver = (*Registry)(nil)
