package domain

import (
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Backend kinds a device row may name (ARCHITECTURE.md, "Devices").
const (
	BackendSim   = "sim"
	BackendADB   = "adb"
	BackendRobot = "robot"
)

// BackendKinds lists the kinds a device may be registered with.
var BackendKinds = []string{BackendSim, BackendADB, BackendRobot}

// Device statuses as the read model reports them.
const (
	DeviceOnline  = "online"
	DeviceAsleep  = "asleep"
	DeviceOffline = "offline"
)

// Reasons carried by device_unavailable (spec 7.2).
const (
	ReasonNotFound      = "not_found"
	ReasonOffline       = "offline"
	ReasonAlreadyLeased = "already_leased"
	ReasonAsleep        = "asleep"
)

// Reasons that refine invalid_argument and stale_frame: an action whose
// coordinates no screen point answers (out of range, or outside the
// device's screen), and an observedFrame of another screen than the
// device's (another device's frame). The device surface answers them
// COORDINATE_OUT_OF_REACH and FRAME_VIEWPORT_MISMATCH.
const (
	ReasonOutOfReach       = "out_of_reach"
	ReasonViewportMismatch = "viewport_mismatch"
)

// ADBSerialStream is the stream whose first event (fleet.seeded, naming
// the device) claims an adb serial in an organisation, so registering the
// serial twice, by hand or by discovery, registers one device.
func ADBSerialStream(orgID, serial string) string { return "adb-serial-" + orgID + "-" + serial }

// HostSim is the host of the devices the service drives itself: the sim
// phones and the adb devices, driven by the one process holding the sim
// host claim.
const HostSim = "sim"

// HostKey names the host a device is driven under: HostSim, or
// "gw.<gatewayId>" for a device a gateway brings (driven by the process
// holding that gateway's tunnel). Every device call runs on the one
// process holding the device's host.
func (d *Device) HostKey() string {
	if d.GatewayID != "" {
		return GatewayHostKey(d.GatewayID)
	}
	return HostSim
}

// HostFence is a process's claim on a device host as its writes carry it:
// the database refuses a write whose Epoch is no longer the host's (SQL
// function host_fence, migration 0012), so a holder that lost its claim to
// another process cannot act on its devices or record their state.
type HostFence struct {
	// Host is the host key (HostSim or a GatewayHostKey).
	Host string
	// Epoch is the claim's generation now (the epoch of this process's
	// latest take); 0 means the host is not fenced (a runtime whose claims
	// are not kept in the database).
	Epoch int64
	// Since is the generation this process's unbroken hold began with. A
	// process that takes its own claim again (its connection was lost, and
	// nobody held the host meanwhile) keeps Since; one that finds another
	// held it in between starts anew. Work begun under one Since may write
	// under a later Epoch of the same Since, never of another.
	Since int64
}

// GatewayHostKey is the host key of a gateway's devices.
func GatewayHostKey(gatewayID string) string { return "gw." + gatewayID }

// GatewayDeviceStream is the stream whose first event (fleet.seeded,
// naming the device) claims a gateway's device key, so a gateway that
// reports a device again (every reconnection) registers it once.
func GatewayDeviceStream(gatewayID, key string) string {
	return "gateway-device-" + gatewayID + "-" + key
}

// ValidSerial reports whether s can be an adb serial (as the adb server
// lists it: a USB serial, host:port, an emulator name): printable, no
// spaces, at most 128 bytes.
func ValidSerial(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if r <= ' ' || r > '~' {
			return false
		}
	}
	return true
}

// MaxDeviceNameRunes bounds a device's display name.
const MaxDeviceNameRunes = 64

// DeviceStream returns the stream holding a device's registration, power
// state and leases. The fencing token is derived from it, so it only grows.
func DeviceStream(deviceID string) string { return "device-" + deviceID }

// LocalFleetStream is the stream of the FleetSeeded marker of a local
// deployment's organisation.
func LocalFleetStream(orgID string) string { return "fleet-seeded-" + orgID }

// Device is the aggregate of one device's stream. Command methods check
// the request against the current state and return the events to append;
// Apply is the only place its state changes.
type Device struct {
	ID      string
	OrgID   string
	Name    string
	Backend string
	Model   string
	Serial  string
	Width   int
	Height  int
	Asleep  bool
	// Offline reports that the device's transport lost it
	// (device.went_offline) and has not found it again.
	Offline      bool
	RegisteredAt time.Time
	// Lease is the last lease acquired and neither released nor recorded
	// as expired; it may already be past its expiry (see ActiveLease).
	Lease *Lease
	// FencingCounter is the highest fencing token issued for the device.
	FencingCounter int64
	// ResetDue names the lease whose ending (with resetOnRelease) made a
	// reset due that is not recorded done yet; empty when none is owed.
	ResetDue string
	// GatewayID is the gateway that brings the device, and GatewayKey the
	// gateway's own name for it; both empty for a device the service
	// drives itself (sims, adb on the service's adb server).
	GatewayID  string
	GatewayKey string
	// Retired reports that the device left its organisation
	// (device.retired): it then answers as one that never existed.
	Retired bool
	// Version is the stream version of the last applied event.
	Version int64
}

// Registered reports whether the device exists (its stream starts with
// device.registered, which always names an organisation) and has not been
// retired.
func (d *Device) Registered() bool { return d.OrgID != "" && !d.Retired }

// Apply changes state by one recorded event at stream version version.
// Events of other kinds are ignored.
func (d *Device) Apply(e Event, version int64) {
	d.Version = version
	switch e := e.(type) {
	case DeviceRegistered:
		d.ID, d.OrgID, d.Name, d.Backend = e.DeviceID, e.OrgID, e.Name, e.Backend
		d.Model, d.Serial, d.Width, d.Height = e.Model, e.Serial, e.Width, e.Height
		d.RegisteredAt = e.RegisteredAt
		d.GatewayID, d.GatewayKey = e.GatewayID, e.GatewayKey
	case DeviceRenamed:
		d.Name = e.Name
	case DeviceWoken:
		d.Asleep = false
	case DeviceStopped:
		d.Asleep = true
	case LeaseAcquired:
		d.Lease = &Lease{ID: e.LeaseID, DeviceID: e.DeviceID, FencingToken: e.FencingToken, Holder: e.Holder,
			AcquiredAt: e.AcquiredAt, ExpiresAt: e.ExpiresAt, ResetOnRelease: e.ResetOnRelease}
		d.FencingCounter = max(d.FencingCounter, e.FencingToken)
	case LeaseRenewed:
		if d.Lease != nil && d.Lease.ID == e.LeaseID {
			d.Lease.ExpiresAt = e.ExpiresAt
		}
	case LeaseReleased:
		if d.Lease != nil && d.Lease.ID == e.LeaseID {
			d.Lease = nil
		}
		if e.Reset {
			d.ResetDue = e.LeaseID
		}
	case LeaseExpired:
		if d.Lease != nil && d.Lease.ID == e.LeaseID {
			d.Lease = nil
		}
		if e.Reset {
			d.ResetDue = e.LeaseID
		}
	case DeviceReset:
		d.ResetDue = ""
		d.Asleep = false
	case DeviceWentOffline:
		d.Offline = true
	case DeviceCameOnline:
		d.Offline = false
	case DeviceRetired:
		d.Retired, d.Lease = true, nil
	}
}

// Status is offline, asleep or online.
func (d *Device) Status() string {
	if d.Offline {
		return DeviceOffline
	}
	if d.Asleep {
		return DeviceAsleep
	}
	return DeviceOnline
}

// ErrDeviceNotFound is the answer for a device that does not exist, belongs
// to another organisation, or lies outside the credential's device subset:
// the three are indistinguishable.
func ErrDeviceNotFound(deviceID string) *Error {
	return Errorf(CodeDeviceUnavailable, "no device %s is available to this credential", deviceID).
		With("reason", ReasonNotFound).With("deviceId", deviceID)
}

// Register returns the event registering a new device. The caller appends
// it to a stream that must not exist yet.
func (d *Device) Register(e DeviceRegistered) ([]Event, error) {
	if d.Registered() {
		return nil, Errorf(CodeInvalidArgument, "device %s is already registered", e.DeviceID)
	}
	name, err := CheckDeviceName(e.Name)
	if err != nil {
		return nil, err
	}
	e.Name = name
	if e.OrgID == "" {
		return nil, Errorf(CodeInvalidArgument, "a device needs an organisation")
	}
	if strings.TrimSpace(e.Backend) == "" {
		return nil, Errorf(CodeInvalidArgument, "a device needs a backend kind")
	}
	return []Event{e}, nil
}

// Rename returns the event giving the device a new display name.
func (d *Device) Rename(name string) ([]Event, error) {
	name, err := CheckDeviceName(name)
	if err != nil {
		return nil, err
	}
	if name == d.Name {
		return nil, nil
	}
	return []Event{DeviceRenamed{DeviceID: d.ID, Name: name}}, nil
}

// CheckDeviceName trims name and refuses an empty or over-long one, or one
// holding control characters, with invalid_argument.
func CheckDeviceName(name string) (string, error) {
	name = strings.TrimSpace(name)
	switch {
	case name == "":
		return "", Errorf(CodeInvalidArgument, "name must not be empty")
	case !utf8.ValidString(name):
		return "", Errorf(CodeInvalidArgument, "name must be valid UTF-8")
	case utf8.RuneCountInString(name) > MaxDeviceNameRunes:
		return "", Errorf(CodeInvalidArgument, "name must be at most %d characters", MaxDeviceNameRunes)
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return "", Errorf(CodeInvalidArgument, "name must not hold control characters")
		}
	}
	return name, nil
}

// CheckPower decides whether actor may wake or stop the device now: when
// the device is leased, only its holder, presenting the lease, may.
// It answers lease_required, lease_mismatch or device_unavailable
// (already_leased).
func (d *Device) CheckPower(now time.Time, actor Actor, leaseID string) error {
	l := d.ActiveLease(now)
	if l == nil {
		return nil
	}
	if l.Holder != actor {
		return Errorf(CodeDeviceUnavailable, "device %s is leased by someone else", d.ID).
			With("reason", ReasonAlreadyLeased).With("deviceId", d.ID).WithRetryable(true)
	}
	_, err := d.CheckLease(now, actor, leaseID)
	return err
}

// Wake returns the event recording that the screen was turned on.
func (d *Device) Wake(now time.Time) []Event {
	return []Event{DeviceWoken{DeviceID: d.ID, At: now}}
}

// Connection returns the event recording that the device's transport
// has it (online) or lost it (state says how), or none when that is
// already recorded.
func (d *Device) Connection(now time.Time, online bool, state string) []Event {
	switch {
	case online && d.Offline:
		return []Event{DeviceCameOnline{DeviceID: d.ID, At: now}}
	case !online && !d.Offline:
		return []Event{DeviceWentOffline{DeviceID: d.ID, State: state, At: now}}
	}
	return nil
}

// Stop returns the event recording that the device was put to sleep.
func (d *Device) Stop(now time.Time) []Event {
	return []Event{DeviceStopped{DeviceID: d.ID, At: now}}
}
