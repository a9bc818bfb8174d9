// Package backends holds the device backend adapters behind domain.Backend:
// sim (the built-in virtual phone, internal/sim), and the kinds that have
// no adapter yet (adb, robot), which answer backend_not_implemented.
// Registry resolves a device row to its adapter.
package backends

import (
	"context"
	"slices"

	"phonefleet/domain"
)

// Registry resolves devices to their backends. It implements
// domain.Resolver.
type Registry struct {
	// Sim drives the sim phones; nil means this process drives none.
	Sim *SimHost
	// Wrap, when not nil, wraps every resolved backend (tests use it to
	// inject faults: a dropped connection, an outcome that never comes).
	Wrap func(d *domain.Device, b domain.Backend) domain.Backend
}

// Resolve returns the backend of d. Errors: backend_resolution_failed (the
// row names no valid kind), backend_not_implemented (adb, robot),
// device_unavailable with reason offline (a sim phone this process does
// not drive), internal_error (its saved state cannot be read).
func (r *Registry) Resolve(ctx context.Context, d *domain.Device) (domain.Backend, error) {
	if err := CheckKind(d); err != nil {
		return nil, err
	}
	if r.Sim == nil {
		return nil, offline(d.ID)
	}
	b, err := r.Sim.Device(ctx, d)
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
	case d.Backend == domain.BackendSim:
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
	if kind == domain.BackendSim {
		return simRenderer{}, true
	}
	return nil, false
}

func offline(deviceID string) error {
	return domain.Errorf(domain.CodeDeviceUnavailable, "device %s is not driven by this instance of the service", deviceID).
		With("reason", domain.ReasonOffline).With("deviceId", deviceID).WithRetryable(true)
}

var _ domain.Resolver = (*Registry)(nil)
