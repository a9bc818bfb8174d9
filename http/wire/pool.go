package wire

import (
	"phonefleet/commands/provisioning"
)

// PoolDevice is a unit of the shared pay-as-you-go pool handed to the
// caller (POST /v1/devices/take): the caller's lease on it, in the shape
// POST /v1/devices/{deviceId}/lease answers, and the device as GET
// /v1/devices/{deviceId} shows it.
type PoolDevice struct {
	Lease
	Device Device `json:"device"`
}

// NewPoolDevice returns t as the API shows it.
func NewPoolDevice(t provisioning.TakenPoolDevice) PoolDevice {
	return PoolDevice{Lease: NewLease(t.Lease), Device: NewDevice(t.Device)}
}
