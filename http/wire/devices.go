package wire

import (
	"time"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/projections"
)

// Device is a device as the API shows it (spec 2.4): what it is, its screen
// size in pixels, whether it is awake, and who holds it until when.
type Device struct {
	DeviceID     string       `json:"deviceId"`
	Name         string       `json:"name"`
	Backend      string       `json:"backend"`
	Model        string       `json:"model,omitempty"`
	Width        int          `json:"width,omitempty"`
	Height       int          `json:"height,omitempty"`
	Status       string       `json:"status"`
	Leased       bool         `json:"leased"`
	Lease        *DeviceLease `json:"lease,omitempty"`
	RegisteredAt time.Time    `json:"registeredAt"`
	UpdatedAt    time.Time    `json:"updatedAt"`
	// ProxyID is the managed proxy the device is behind (GET
	// /v1/devices/{deviceId} only).
	ProxyID string `json:"proxyId,omitempty"`
}

// DeviceLease is who holds a device and until when. The lease id is not
// shown here: it is the holder's, answered by the lease routes and tools.
type DeviceLease struct {
	Holder     domain.ReceiptActor `json:"holder"`
	AcquiredAt time.Time           `json:"acquiredAt"`
	ExpiresAt  time.Time           `json:"expiresAt"`
}

// NewDevice returns d as the API shows it.
func NewDevice(d projections.DeviceView) Device {
	return Device{DeviceID: d.DeviceID, Name: d.Name, Backend: d.Backend, Model: d.Model, Width: d.Width, Height: d.Height,
		Status: d.Status, Leased: d.Leased, Lease: newDeviceLease(d.Lease), RegisteredAt: d.RegisteredAt, UpdatedAt: d.UpdatedAt}
}

func newDeviceLease(l *projections.DeviceLeaseView) *DeviceLease {
	if l == nil {
		return nil
	}
	return &DeviceLease{Holder: l.Holder, AcquiredAt: l.AcquiredAt, ExpiresAt: l.ExpiresAt}
}

// DevicePage is one page of a device listing; NextAfter, absent on the last
// page, is the cursor of the next.
type DevicePage struct {
	Devices   []Device `json:"devices"`
	NextAfter string   `json:"nextAfter,omitempty"`
}

// NewDevicePage returns p as the API lists it (devices never null).
func NewDevicePage(p fleet.DevicePage) DevicePage {
	return DevicePage{Devices: each(p.Devices, NewDevice), NextAfter: p.NextAfter}
}

// Driving is who is driving a device now: the holder of its lease in force,
// or nobody (lease absent).
type Driving struct {
	DeviceID string       `json:"deviceId"`
	Driving  bool         `json:"driving"`
	Lease    *DeviceLease `json:"lease,omitempty"`
	// LiveSession is the device's open live session, when one is.
	LiveSession *LiveSession `json:"liveSession,omitempty"`
}

// NewDriving returns d as the API shows it.
func NewDriving(d fleet.Driving) Driving {
	return Driving{DeviceID: d.DeviceID, Driving: d.Driving, Lease: newDeviceLease(d.Lease), LiveSession: newLiveSessionPtr(d.LiveSession)}
}

// Lease is a lease in force as its holder sees it: the lease id every
// action names, and the fencing token that orders holders.
type Lease struct {
	LeaseID      string              `json:"leaseId"`
	DeviceID     string              `json:"deviceId"`
	Holder       domain.ReceiptActor `json:"holder"`
	FencingToken int64               `json:"fencingToken"`
	AcquiredAt   time.Time           `json:"acquiredAt"`
	ExpiresAt    time.Time           `json:"expiresAt"`
}

// NewLease returns l as the API shows it.
func NewLease(l projections.LeaseView) Lease {
	return Lease{LeaseID: l.LeaseID, DeviceID: l.DeviceID, Holder: l.Holder, FencingToken: l.FencingToken,
		AcquiredAt: l.AcquiredAt, ExpiresAt: l.ExpiresAt}
}

// LeasePage is one page of the leases in force; NextAfter, absent on the
// last page, is the cursor of the next.
type LeasePage struct {
	Leases    []Lease `json:"leases"`
	NextAfter string  `json:"nextAfter,omitempty"`
}

// NewLeasePage returns p as the API lists it (leases never null).
func NewLeasePage(p fleet.LeasePage) LeasePage {
	return LeasePage{Leases: each(p.Leases, NewLease), NextAfter: p.NextAfter}
}
