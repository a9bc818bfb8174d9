package domain

import (
	"slices"
	"time"
)

// appEvents are the events of the app store and the app library: one
// stream per tracked request (AppRequestStream: an installation or an
// inventory refresh, keyed by the organisation and the caller's
// requestKey, so a retry finds the first request), and one per device for
// what it last reported of its software (AppSoftwareStream).
var appEvents = []EventDef{
	Def[AppInstallationRequested](1, nil),
	Def[AppInventoryRefreshRequested](1, nil),
	Def[AppDeviceWorkStarted](1, nil),
	Def[AppDeviceWorkFinished](1, nil),
	Def[AppDeviceSoftwareRead](1, nil),
}

// Prefixes of the app store's ids.
const (
	PrefixInstallation = "ins"
)

// Kinds of tracked app requests.
const (
	AppRequestInstallation = "installation"
	AppRequestRefresh      = "inventory_refresh"
)

// States of one device within a tracked app request.
const (
	AppDeviceQueued     = "queued"
	AppDeviceInstalling = "installing"
	AppDeviceInstalled  = "installed"
	AppDeviceReading    = "reading"
	AppDeviceRead       = "read"
	AppDeviceFailed     = "failed"
)

// AppRequestStream is the stream of the organisation's request under
// requestKey; its first event claims the key.
func AppRequestStream(orgID, requestKey string) string {
	return "app-request-" + orgID + "-" + requestKey
}

// AppSoftwareStream is the stream of what a device reported of its
// software.
func AppSoftwareStream(deviceID string) string { return "app-software-" + deviceID }

// AppInstallationRequested records an installation of a catalog version
// on devices. It is the first event of its request's stream.
type AppInstallationRequested struct {
	InstallationID string   `json:"installationId"`
	RequestKey     string   `json:"requestKey"`
	OrgID          string   `json:"orgId"`
	Package        string   `json:"package"`
	Title          string   `json:"title"`
	Version        string   `json:"version"`
	SHA256         string   `json:"sha256"`
	Devices        []string `json:"devices"`
	// Requester is who asked, with enough of their credential to lease
	// and act on the devices for them.
	Requester ScheduleCreator `json:"requester"`
	// Fingerprint identifies what the key was first used for.
	Fingerprint string    `json:"fingerprint"`
	RequestedAt time.Time `json:"requestedAt"`
}

// EventName implements Event.
func (AppInstallationRequested) EventName() string { return "app.installation_requested" }

// AppInventoryRefreshRequested records a re-read of devices' software. It
// is the first event of its request's stream.
type AppInventoryRefreshRequested struct {
	RequestKey  string          `json:"requestKey"`
	OrgID       string          `json:"orgId"`
	Devices     []string        `json:"devices"`
	Requester   ScheduleCreator `json:"requester"`
	Fingerprint string          `json:"fingerprint"`
	RequestedAt time.Time       `json:"requestedAt"`
}

// EventName implements Event.
func (AppInventoryRefreshRequested) EventName() string { return "app.inventory_refresh_requested" }

// AppDeviceWorkStarted records that a request's work on one device began
// (installing, or reading).
type AppDeviceWorkStarted struct {
	RequestKey string    `json:"requestKey"`
	DeviceID   string    `json:"deviceId"`
	State      string    `json:"state"`
	At         time.Time `json:"at"`
}

// EventName implements Event.
func (AppDeviceWorkStarted) EventName() string { return "app.device_work_started" }

// AppDeviceWorkFinished records how a request's work on one device ended:
// installed or read, or failed with the reason and message the device (or
// the check before it) gave. An install names the action (its receipt).
type AppDeviceWorkFinished struct {
	RequestKey     string    `json:"requestKey"`
	DeviceID       string    `json:"deviceId"`
	State          string    `json:"state"`
	Code           string    `json:"code,omitempty"`
	Reason         string    `json:"reason,omitempty"`
	Message        string    `json:"message,omitempty"`
	ActionID       string    `json:"actionId,omitempty"`
	IdempotencyKey string    `json:"idempotencyKey,omitempty"`
	At             time.Time `json:"at"`
}

// EventName implements Event.
func (AppDeviceWorkFinished) EventName() string { return "app.device_work_finished" }

// AppDeviceSoftwareRead records what a device reported of its software.
type AppDeviceSoftwareRead struct {
	DeviceID string         `json:"deviceId"`
	OrgID    string         `json:"orgId"`
	Software DeviceSoftware `json:"software"`
	ReadAt   time.Time      `json:"readAt"`
}

// EventName implements Event.
func (AppDeviceSoftwareRead) EventName() string { return "app.device_software_read" }

// AppRequest is a tracked request of the app store or library: an
// installation or an inventory refresh, with the state of each device.
type AppRequest struct {
	Kind           string
	InstallationID string
	RequestKey     string
	OrgID          string
	Package        string
	Title          string
	Version        string
	SHA256         string
	Devices        []string
	Requester      ScheduleCreator
	Fingerprint    string
	RequestedAt    time.Time
	// States maps each device to its state.
	States map[string]string
}

// NewAppRequest returns an empty request (no events yet).
func NewAppRequest() *AppRequest { return &AppRequest{States: map[string]string{}} }

// Apply folds one event.
func (r *AppRequest) Apply(e Event) {
	switch e := e.(type) {
	case AppInstallationRequested:
		*r = AppRequest{Kind: AppRequestInstallation, InstallationID: e.InstallationID, RequestKey: e.RequestKey, OrgID: e.OrgID,
			Package: e.Package, Title: e.Title, Version: e.Version, SHA256: e.SHA256, Devices: slices.Clone(e.Devices),
			Requester: e.Requester, Fingerprint: e.Fingerprint, RequestedAt: e.RequestedAt, States: map[string]string{}}
		for _, d := range e.Devices {
			r.States[d] = AppDeviceQueued
		}
	case AppInventoryRefreshRequested:
		*r = AppRequest{Kind: AppRequestRefresh, RequestKey: e.RequestKey, OrgID: e.OrgID, Devices: slices.Clone(e.Devices),
			Requester: e.Requester, Fingerprint: e.Fingerprint, RequestedAt: e.RequestedAt, States: map[string]string{}}
		for _, d := range e.Devices {
			r.States[d] = AppDeviceQueued
		}
	case AppDeviceWorkStarted:
		r.States[e.DeviceID] = e.State
	case AppDeviceWorkFinished:
		r.States[e.DeviceID] = e.State
	}
}

// Exists reports whether the request was recorded.
func (r *AppRequest) Exists() bool { return r.Kind != "" }

// Auth rebuilds the requester's authorization context, in the request's
// organisation: the installation leases and acts as them.
func (r *AppRequest) Auth() Auth {
	c := r.Requester
	return Auth{OrgID: r.OrgID, Kind: c.Kind, UserID: c.UserID, APIKeyID: c.APIKeyID, ClientID: c.ClientID, Role: c.Role,
		Scopes: slices.Clone(c.Scopes), Devices: slices.Clone(c.Devices), Instance: c.Instance}
}

// Start moves a queued device to working (installing or reading); a device
// not queued decides nothing.
func (r *AppRequest) Start(deviceID string, at time.Time) []Event {
	if r.States[deviceID] != AppDeviceQueued {
		return nil
	}
	state := AppDeviceInstalling
	if r.Kind == AppRequestRefresh {
		state = AppDeviceReading
	}
	return []Event{AppDeviceWorkStarted{RequestKey: r.RequestKey, DeviceID: deviceID, State: state, At: at}}
}

// Finish records a working device's end; one already finished decides
// nothing, so the end is recorded once.
func (r *AppRequest) Finish(f AppDeviceWorkFinished) []Event {
	switch r.States[f.DeviceID] {
	case AppDeviceQueued, AppDeviceInstalling, AppDeviceReading:
	default:
		return nil
	}
	f.RequestKey = r.RequestKey
	return []Event{f}
}
