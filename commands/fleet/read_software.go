package fleet

import (
	"context"

	"phonefleet/domain"
)

// ReadSoftware asks a device what software it runs: its Android release
// and API level, ABIs, free storage and installed apps (the app
// library's capabilities and inventory).
type ReadSoftware struct {
	Auth     domain.Auth
	DeviceID string
}

// ReadSoftwareHandler handles ReadSoftware.
type ReadSoftwareHandler struct{ f *Fleet }

// ReadSoftware returns the handler of ReadSoftware.
func (f *Fleet) ReadSoftware() ReadSoftwareHandler { return ReadSoftwareHandler{f} }

// Handle reads the device on the process driving it, beside its queue
// like an observation (it changes nothing). It needs apps:read. Errors:
// device_unavailable (not_found, offline), backend_resolution_failed,
// backend_not_implemented, capability_unsupported (a backend that cannot
// say), device_disconnected, backend_command_failed.
func (h ReadSoftwareHandler) Handle(ctx context.Context, cmd ReadSoftware) (domain.DeviceSoftware, error) {
	f := h.f
	if err := cmd.Auth.Require(domain.ScopeAppsRead); err != nil {
		return domain.DeviceSoftware{}, err
	}
	d, err := f.visibleDevice(ctx, cmd.Auth, cmd.DeviceID)
	if err != nil {
		return domain.DeviceSoftware{}, err
	}
	if host, remote, err := f.runtime.Route(ctx, &d); err != nil {
		return domain.DeviceSoftware{}, err
	} else if remote {
		return forwardDeviceCall[ReadSoftware, domain.DeviceSoftware](ctx, f, host, OpReadSoftware, d.ID, cmd)
	}
	backend, err := f.runtime.Resolve(ctx, &d)
	if err != nil {
		return domain.DeviceSoftware{}, err
	}
	r, ok := backend.(domain.SoftwareReader)
	if !ok {
		return domain.DeviceSoftware{}, domain.Errorf(domain.CodeCapabilityUnsupported, "this device cannot report its software").
			With("capability", "software")
	}
	return r.Software(ctx)
}
