package fleet

import (
	"context"

	"phonefleet/domain"
	"phonefleet/projections"
)

// RenameDevice gives a device a new display name (PATCH /v1/devices/{deviceId}).
type RenameDevice struct {
	Auth     domain.Auth
	DeviceID string
	Name     string
}

// RenameDeviceHandler handles RenameDevice.
type RenameDeviceHandler struct{ f *Fleet }

// RenameDevice returns the handler of RenameDevice.
func (f *Fleet) RenameDevice() RenameDeviceHandler { return RenameDeviceHandler{f} }

// Handle records device.renamed and answers the device as the read model
// then shows it. It needs devices:read (renaming is a person's act, not a
// gesture), and is refused to OAuth apps (spec 5.2). Errors:
// permission_denied, invalid_argument, device_unavailable (not_found).
func (h RenameDeviceHandler) Handle(ctx context.Context, cmd RenameDevice) (projections.DeviceView, error) {
	f := h.f
	if err := cmd.Auth.Require(domain.ScopeDevicesRead); err != nil {
		return projections.DeviceView{}, err
	}
	if cmd.Auth.Kind == domain.PrincipalApp {
		return projections.DeviceView{}, domain.Errorf(domain.CodePermissionDenied, "OAuth apps cannot rename devices; rename it in the console")
	}
	if _, err := domain.CheckDeviceName(cmd.Name); err != nil {
		return projections.DeviceView{}, err
	}
	if _, err := f.visibleDevice(ctx, cmd.Auth, cmd.DeviceID); err != nil {
		return projections.DeviceView{}, deviceNotFound(cmd.DeviceID)
	}
	_, c, err := f.devices.Update(ctx, cmd.DeviceID, func(d *domain.Device) ([]domain.Event, error) {
		return d.Rename(cmd.Name)
	})
	if err != nil {
		return projections.DeviceView{}, err
	}
	if err := f.waitFor(ctx, c.Last(), projections.DevicesName); err != nil {
		return projections.DeviceView{}, err
	}
	return f.device(ctx, cmd.Auth, cmd.DeviceID)
}
