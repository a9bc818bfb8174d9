package apps

import (
	"context"
	"encoding/json"
	"errors"
	"slices"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/eventstore"
)

// RunDeviceWork does a request's work on one device (sent by the app
// store's worker for each queued device): an installation's install, or
// a refresh's read.
type RunDeviceWork struct {
	OrgID      string
	RequestKey string
	DeviceID   string
	// Resume re-drives a device left installing or reading by a process
	// that stopped midway (the worker sends it once the state is stale):
	// the install's action key makes the device act at most once, and a
	// recorded outcome is answered as it was.
	Resume bool
}

// Outcomes of RunDeviceWork besides the device states: the device is
// leased by someone else and stays queued until it is free.
const WorkWaiting = "waiting_for_lease"

// RunDeviceWorkHandler handles RunDeviceWork.
type RunDeviceWorkHandler struct{ a *Apps }

// Handle works as the request's requester (their organisation, principal
// and device subset). An installation reads the device's software, checks
// the version fits it, takes the device's lease (a device leased by
// anyone stays queued: the next pass tries again), installs through an
// install_app action carrying the catalog's APK (its receipt is the
// device's receipt; the fleet checks the APK against its SHA-256 before
// anything is sent), gives the lease back and reads the device again. It
// answers the device's state afterwards; a device no longer queued is
// left as it is. Errors are only the store's: what went wrong on the
// device is the device's failed state, with its reason.
func (h RunDeviceWorkHandler) Handle(ctx context.Context, cmd RunDeviceWork) (string, error) {
	a := h.a
	stream := domain.AppRequestStream(cmd.OrgID, cmd.RequestKey)
	r, _, err := a.repo.Load(ctx, stream)
	if err != nil {
		return "", err
	}
	if !r.Exists() || r.OrgID != cmd.OrgID {
		return "", nil
	}
	state := r.States[cmd.DeviceID]
	working := state == domain.AppDeviceInstalling || state == domain.AppDeviceReading
	if state != domain.AppDeviceQueued && !(cmd.Resume && working) {
		return state, nil
	}
	auth := r.Auth()
	if auth.Has(domain.ScopeAppsWrite) {
		// Installing on the organisation's devices is what apps:write
		// grants: the install leases and acts for it, on the requester's
		// devices only (docs/decisions.md).
		for _, s := range []domain.Scope{domain.ScopeDevicesLease, domain.ScopeDevicesAct, domain.ScopeAppsRead} {
			if !auth.Has(s) {
				auth.Scopes = append(auth.Scopes, s)
			}
		}
	}
	w := work{a: a, r: r, stream: stream, deviceID: cmd.DeviceID, auth: auth, resumed: working}
	if r.Kind == domain.AppRequestRefresh {
		return w.refresh(ctx)
	}
	return w.install(ctx)
}

type work struct {
	a        *Apps
	r        *domain.AppRequest
	stream   string
	deviceID string
	auth     domain.Auth
	// resumed is work a stopped process had started: it is not started
	// again.
	resumed bool
}

func (w work) refresh(ctx context.Context) (string, error) {
	if started, err := w.start(ctx); err != nil || !started {
		return domain.AppDeviceReading, err
	}
	if _, err := w.read(ctx); err != nil {
		return w.fail(ctx, err)
	}
	return w.finish(ctx, domain.AppDeviceWorkFinished{DeviceID: w.deviceID, State: domain.AppDeviceRead})
}

func (w work) install(ctx context.Context) (string, error) {
	a, r := w.a, w.r
	_, v, ok := a.cfg.Catalog.Find(r.Package, r.Version)
	if !ok {
		return w.fail(ctx, domain.Errorf(domain.CodeInvalidArgument, "%s %s is no longer in the catalog", r.Package, r.Version).
			With("reason", "not_in_catalog"))
	}
	// A device someone holds waits, queued, before anything is asked of
	// it: each pass looks at its lease only.
	if d, err := a.cfg.Devices.Visible(ctx, w.auth, w.deviceID); err != nil {
		return w.fail(ctx, err)
	} else if d.ActiveLease(a.cfg.Now()) != nil {
		return WorkWaiting, nil
	}
	sw, err := w.read(ctx)
	if err != nil {
		return w.fail(ctx, err)
	}
	data, err := a.openAPK(v)
	if err != nil {
		return w.fail(ctx, domain.Errorf(domain.CodeInternal, "the APK of %s %s cannot be read from its location", r.Package, r.Version).
			With("reason", "apk_unavailable").Wrap(err))
	}
	if reason, msg, ok := v.Ineligible(sw, int64(len(data))); !ok {
		return w.fail(ctx, domain.Errorf(domain.CodeCapabilityUnsupported, "%s", msg).With("reason", reason))
	}
	lease, err := a.cfg.Devices.Lease(ctx, fleet.AcquireLease{Auth: w.auth, DeviceID: w.deviceID, TTLSeconds: installLeaseSeconds})
	if err != nil {
		var de *domain.Error
		if errors.As(err, &de) && de.Code == domain.CodeDeviceUnavailable && de.Extra["reason"] == domain.ReasonAlreadyLeased {
			return WorkWaiting, nil
		}
		return w.fail(ctx, err)
	}
	release := func() {
		// A lease that cannot be given back now ends at its TTL.
		_ = a.cfg.Devices.Release(context.WithoutCancel(ctx), fleet.ReleaseLease{Auth: w.auth, DeviceID: w.deviceID, LeaseID: lease.LeaseID})
	}
	started, err := w.start(ctx)
	if err != nil || !started {
		release()
		return domain.AppDeviceInstalling, err
	}
	key := "app-install-" + r.InstallationID + "-" + w.deviceID
	args, _ := json.Marshal(map[string]string{"package": r.Package}) // a string always encodes
	out, actErr := a.cfg.Devices.Act(ctx, fleet.PerformAction{Auth: w.auth, DeviceID: w.deviceID, Action: string(domain.ActionInstallApp),
		Arguments: args, IdempotencyKey: key, LeaseID: lease.LeaseID,
		APK: &domain.APK{Package: r.Package, Version: r.Version, SHA256: r.SHA256, Data: data}})
	release()
	if actErr != nil {
		f := failure(w.deviceID, actErr)
		if domain.ErrorCode(actErr) != domain.CodeInvalidArgument || f.Reason != domain.ReasonAPKHashMismatch {
			f.IdempotencyKey = key // the failed action's receipt
		}
		return w.finish(ctx, f)
	}
	// The inventory follows what the device has now; the install stands
	// whether or not the device answers the read.
	_, _ = w.read(ctx)
	return w.finish(ctx, domain.AppDeviceWorkFinished{DeviceID: w.deviceID, State: domain.AppDeviceInstalled,
		ActionID: out.Receipt.ActionID, IdempotencyKey: key})
}

// installLeaseSeconds is the lease an install holds: long enough for the
// APK to stream, given back as soon as it is done.
const installLeaseSeconds = 300

// read asks the device for its software and records it.
func (w work) read(ctx context.Context) (domain.DeviceSoftware, error) {
	sw, err := w.a.cfg.Devices.Software(ctx, fleet.ReadSoftware{Auth: w.auth, DeviceID: w.deviceID})
	if err != nil {
		return sw, err
	}
	slices.SortFunc(sw.Apps, func(x, y domain.InstalledApp) int {
		switch {
		case x.Package < y.Package:
			return -1
		case x.Package > y.Package:
			return 1
		}
		return 0
	})
	news, err := eventstore.Encode(domain.Events, w.r.OrgID, domain.Event(domain.AppDeviceSoftwareRead{DeviceID: w.deviceID,
		OrgID: w.r.OrgID, Software: sw, ReadAt: w.a.cfg.Now()}))
	if err != nil {
		return sw, err
	}
	a, err := w.a.cfg.Store.Append(ctx, domain.AppSoftwareStream(w.deviceID), eventstore.AnyVersion, news...)
	if err != nil {
		return sw, err
	}
	return sw, w.a.wait(ctx, eventstore.Committed{Appends: []eventstore.Appended{a}})
}

// start moves the device from queued to working; false when another
// worker did first. Resumed work is started already.
func (w work) start(ctx context.Context) (bool, error) {
	if w.resumed {
		return true, nil
	}
	_, c, err := w.a.repo.Update(ctx, w.stream, func(r **domain.AppRequest) ([]domain.Event, error) {
		return (*r).Start(w.deviceID, w.a.cfg.Now()), nil
	})
	if err != nil {
		return false, err
	}
	return len(c.Appends) > 0, w.a.wait(ctx, c)
}

// fail records the device failed for err.
func (w work) fail(ctx context.Context, err error) (string, error) {
	return w.finish(ctx, failure(w.deviceID, err))
}

func (w work) finish(ctx context.Context, f domain.AppDeviceWorkFinished) (string, error) {
	f.At = w.a.cfg.Now()
	_, c, err := w.a.repo.Update(ctx, w.stream, func(r **domain.AppRequest) ([]domain.Event, error) {
		return (*r).Finish(f), nil
	})
	if err != nil {
		return "", err
	}
	return f.State, w.a.wait(ctx, c)
}

// failure is a device's failed state for err: its code, reason and
// message as the device (or the check before it) gave them.
func failure(deviceID string, err error) domain.AppDeviceWorkFinished {
	f := domain.AppDeviceWorkFinished{DeviceID: deviceID, State: domain.AppDeviceFailed, Code: string(domain.CodeInternal),
		Message: "internal error"}
	var de *domain.Error
	if errors.As(err, &de) {
		f.Code, f.Message = string(de.Code), de.Message
		if reason, ok := de.Extra["reason"].(string); ok {
			f.Reason = reason
		}
	}
	return f
}
