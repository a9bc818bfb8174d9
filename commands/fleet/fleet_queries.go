package fleet

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"phonefleet/commands/cqrs"
	"phonefleet/domain"
	"phonefleet/projections"
)

// The fleet's reads. They answer from the read models (projections), which
// the commands above wait for before answering, so a caller reads its own
// writes.

// DeviceQuery filters GET /v1/devices.
type DeviceQuery struct {
	// Status is online or asleep ("" = any).
	Status string
	// Backend is a backend kind ("" = any).
	Backend string
	// Leased keeps devices (not) leased now; nil = any.
	Leased *bool
	// After is the cursor from the previous page (nextAfter).
	After string
	// Limit is 1 to 200; 0 means 50, more is clamped to 200.
	Limit int
}

// DevicePage is one page of devices; NextAfter is "" on the last.
type DevicePage struct {
	Devices   []projections.DeviceView
	NextAfter string
}

// listDevices lists the devices the credential can see (devices:read).
// Errors: permission_denied, invalid_argument.
func (f *Fleet) listDevices(ctx context.Context, auth domain.Auth, q DeviceQuery) (DevicePage, error) {
	if err := auth.Require(domain.ScopeDevicesRead); err != nil {
		return DevicePage{}, err
	}
	if q.Status != "" && q.Status != domain.DeviceOnline && q.Status != domain.DeviceAsleep {
		return DevicePage{}, domain.Errorf(domain.CodeInvalidArgument, "status must be online or asleep")
	}
	if q.Backend != "" && !slices.Contains(domain.BackendKinds, q.Backend) {
		return DevicePage{}, domain.Errorf(domain.CodeInvalidArgument, "backend must be sim, adb or robot")
	}
	if q.Limit < 0 {
		return DevicePage{}, domain.Errorf(domain.CodeInvalidArgument, "limit must be at least 1")
	}
	devs, next, err := projections.ListDevices(ctx, f.pool, projections.DeviceFilter{OrgID: auth.OrgID, Devices: auth.Devices,
		Status: q.Status, Backend: q.Backend, Leased: q.Leased, After: q.After, Limit: q.Limit, Now: f.now()})
	return DevicePage{Devices: devs, NextAfter: next}, err
}

// device reads one device (devices:read). A device of another
// organisation or outside the credential's subset answers as an unknown one
// does: device_unavailable with reason not_found, as the command side.
func (f *Fleet) device(ctx context.Context, auth domain.Auth, deviceID string) (projections.DeviceView, error) {
	if err := auth.Require(domain.ScopeDevicesRead); err != nil {
		return projections.DeviceView{}, err
	}
	if !auth.CanSeeDevice(deviceID) {
		return projections.DeviceView{}, deviceNotFound(deviceID)
	}
	d, err := projections.GetDevice(ctx, f.pool, auth.OrgID, deviceID, f.now())
	if errors.Is(err, projections.ErrNoRow) {
		return d, deviceNotFound(deviceID)
	}
	return d, err
}

// deviceNotFound is the one answer for a device the caller cannot see, on
// read routes as on command routes: device_unavailable with reason
// not_found (spec 7.2), an MCP code as well as a REST one.
func deviceNotFound(deviceID string) error {
	return domain.ErrDeviceNotFound(deviceID)
}

// Driving says who holds a device now.
type Driving struct {
	DeviceID string
	Driving  bool
	Lease    *projections.DeviceLeaseView
	// LiveSession is the device's open live session (who drives it, who
	// watches), when one is; the application object's GetDriving adds it
	// (LiveSessions.WithLiveSession).
	LiveSession *LiveSessionView
}

// driving answers who is driving a device (devices:read): the holder of
// its lease in force and until when, or nobody.
func (f *Fleet) driving(ctx context.Context, auth domain.Auth, deviceID string) (Driving, error) {
	d, err := f.device(ctx, auth, deviceID)
	if err != nil {
		return Driving{}, err
	}
	return Driving{DeviceID: d.DeviceID, Driving: d.Leased, Lease: d.Lease}, nil
}

// LeaseQuery filters GET /v1/leases.
type LeaseQuery struct {
	DeviceID string
	After    string
	Limit    int
}

// LeasePage is one page of leases in force; NextAfter is "" on the last.
type LeasePage struct {
	Leases    []projections.LeaseView
	NextAfter string
}

// listLeases lists the organisation's leases in force (devices:read),
// within the credential's device subset.
func (f *Fleet) listLeases(ctx context.Context, auth domain.Auth, q LeaseQuery) (LeasePage, error) {
	if err := auth.Require(domain.ScopeDevicesRead); err != nil {
		return LeasePage{}, err
	}
	if q.Limit < 0 {
		return LeasePage{}, domain.Errorf(domain.CodeInvalidArgument, "limit must be at least 1")
	}
	ls, next, err := projections.ListLeases(ctx, f.pool, projections.LeaseFilter{OrgID: auth.OrgID, Devices: auth.Devices,
		DeviceID: q.DeviceID, After: q.After, Limit: q.Limit, Now: f.now()})
	return LeasePage{Leases: ls, NextAfter: next}, err
}

// ReceiptQuery is GET /v1/receipts's query (spec 4.3), as sent.
type ReceiptQuery struct {
	DeviceID      string
	AgentRunID    *string
	Status        string
	ActorUserID   *string
	ActorAPIKeyID *string
	// Limit nil means 50; values above 200 are clamped; below 1 refused.
	Limit *int
	// Before and BeforeKey are the cursor (nextBefore, nextBeforeKey),
	// passed back unchanged.
	Before    string
	BeforeKey string
}

// ReceiptPage is one page of receipts, newest first; NextBefore is zero on
// the last page.
type ReceiptPage = projections.ReceiptPage

// listReceipts reads the receipt feed (devices:read; not open to OAuth
// apps). Both actor filters at once, an empty agentRunId or actor filter,
// an unknown status, a limit below 1 or an unreadable before answer
// invalid_argument.
func (f *Fleet) listReceipts(ctx context.Context, auth domain.Auth, q ReceiptQuery) (ReceiptPage, error) {
	if err := auth.Require(domain.ScopeDevicesRead); err != nil {
		return ReceiptPage{}, err
	}
	if auth.Kind == domain.PrincipalApp {
		return ReceiptPage{}, domain.Errorf(domain.CodePermissionDenied, "the receipt feed is not open to OAuth apps; read a receipt by its idempotency key instead")
	}
	if q.ActorUserID != nil && q.ActorAPIKeyID != nil {
		return ReceiptPage{}, domain.Errorf(domain.CodeInvalidArgument, "actorUserId and actorApiKeyId are mutually exclusive; send one")
	}
	filter := projections.ReceiptFilter{OrgID: auth.OrgID, Devices: auth.Devices, DeviceID: q.DeviceID, BeforeKey: q.BeforeKey}
	for name, p := range map[string]*string{"agentRunId": q.AgentRunID, "actorUserId": q.ActorUserID, "actorApiKeyId": q.ActorAPIKeyID} {
		if p != nil && *p == "" {
			return ReceiptPage{}, domain.Errorf(domain.CodeInvalidArgument, "%s must not be empty", name)
		}
	}
	deref := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	filter.AgentRunID, filter.ActorUserID, filter.ActorAPIKeyID = deref(q.AgentRunID), deref(q.ActorUserID), deref(q.ActorAPIKeyID)
	if q.Status != "" && !slices.Contains(domain.ReceiptStates, q.Status) {
		return ReceiptPage{}, domain.Errorf(domain.CodeInvalidArgument, "status must be pending, committed or failed")
	}
	filter.Status = q.Status
	// Read-your-writes for the feed as for one receipt: an action already
	// answered is listed. The wait is for the feed's head when the request
	// came (at most 10 s); a read model further behind serves what it has.
	if err := f.waitForHead(ctx, projections.ReceiptsName); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return ReceiptPage{}, err
	}
	if q.Limit != nil {
		if *q.Limit < 1 {
			return ReceiptPage{}, domain.Errorf(domain.CodeInvalidArgument, "limit must be at least 1")
		}
		filter.Limit = *q.Limit
	}
	if q.Before != "" {
		t, err := time.Parse(time.RFC3339Nano, q.Before)
		if err != nil {
			return ReceiptPage{}, domain.Errorf(domain.CodeInvalidArgument, "before must be an RFC 3339 date-time, as nextBefore gives it").
				With("field", "before")
		}
		filter.Before = t
	} else if q.BeforeKey != "" {
		return ReceiptPage{}, domain.Errorf(domain.CodeInvalidArgument, "beforeKey needs before")
	}
	return projections.ListReceipts(ctx, f.pool, filter)
}

// receipt reads one receipt by its idempotency key (devices:read).
// receipt_not_found when none under the key belongs to the organisation
// (or is visible to the credential: another device subset, or for an
// OAuth app another person's).
//
// Actions answer from the command side without waiting for the receipts
// read model; this read gives read-your-writes instead: when the
// idempotency record shows an outcome (or a request) the read model does
// not show yet, it waits for the read model to catch up first.
func (f *Fleet) receipt(ctx context.Context, auth domain.Auth, key string) (domain.Receipt, error) {
	if err := auth.Require(domain.ScopeDevicesRead); err != nil {
		return domain.Receipt{}, err
	}
	r, err := projections.GetReceipt(ctx, f.pool, auth.OrgID, key)
	if err != nil && !errors.Is(err, projections.ErrNoRow) {
		return r, err
	}
	if behind, berr := f.receiptBehind(ctx, auth.OrgID, key, r, err == nil); berr != nil {
		return r, berr
	} else if behind {
		if werr := f.waitForHead(ctx, projections.ReceiptsName); werr != nil {
			return r, werr
		}
		r, err = projections.GetReceipt(ctx, f.pool, auth.OrgID, key)
	}
	if errors.Is(err, projections.ErrNoRow) || err == nil && !receiptVisible(auth, r) {
		return domain.Receipt{}, receiptNotFound(key)
	}
	return r, err
}

// receiptBehind reports whether the command side records more of the
// action under key than the read model's row r (found says whether there
// is one) shows.
func (f *Fleet) receiptBehind(ctx context.Context, orgID, key string, r domain.Receipt, found bool) (bool, error) {
	var state string
	err := f.pool.QueryRow(ctx, `SELECT state FROM action_idempotency WHERE org_id = $1 AND idempotency_key = $2`, orgID, key).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	switch {
	case !found:
		return true, nil
	case state == "committed":
		return r.State != domain.ReceiptCommitted, nil
	case state == "failed":
		return r.State != domain.ReceiptFailed, nil
	case state == "unknown":
		return !r.OutcomeUnknown, nil
	}
	return false, nil
}

// waitForHead waits, for at most 10 seconds, until the named read model
// has applied every event committed so far.
func (f *Fleet) waitForHead(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return cqrs.AwaitAll(ctx, f.store, f.readModels, name)
}

func receiptVisible(auth domain.Auth, r domain.Receipt) bool {
	if !auth.CanSeeDevice(r.DeviceID) {
		return false
	}
	if auth.Kind == domain.PrincipalApp {
		return r.Actor.UserID != "" && r.Actor.UserID == auth.UserID
	}
	return true
}

func receiptNotFound(key string) error {
	return domain.Errorf(domain.CodeReceiptNotFound, "no receipt under idempotencyKey %q", key)
}

// ListDevicesHandler handles ListDevices.
type ListDevicesHandler struct{ f *Fleet }

// Handle lists the devices the credential can see (listDevices).
func (h ListDevicesHandler) Handle(ctx context.Context, q ListDevices) (DevicePage, error) {
	return h.f.listDevices(ctx, q.Auth, q.DeviceQuery)
}

// GetDeviceHandler handles GetDevice.
type GetDeviceHandler struct{ f *Fleet }

// Handle reads one device (device).
func (h GetDeviceHandler) Handle(ctx context.Context, q GetDevice) (projections.DeviceView, error) {
	return h.f.device(ctx, q.Auth, q.DeviceID)
}

// GetDrivingHandler handles GetDriving.
type GetDrivingHandler struct{ live *LiveSessions }

// Handle answers who drives a device: the holder of its lease in force,
// and its open live session when it has one.
func (h GetDrivingHandler) Handle(ctx context.Context, q GetDriving) (Driving, error) {
	d, err := h.live.f.driving(ctx, q.Auth, q.DeviceID)
	if err != nil {
		return d, err
	}
	return h.live.WithLiveSession(ctx, q.Auth, d)
}

// ListLeasesHandler handles ListLeases.
type ListLeasesHandler struct{ f *Fleet }

// Handle lists the organisation's leases in force (listLeases).
func (h ListLeasesHandler) Handle(ctx context.Context, q ListLeases) (LeasePage, error) {
	return h.f.listLeases(ctx, q.Auth, q.LeaseQuery)
}

// ListReceiptsHandler handles ListReceipts.
type ListReceiptsHandler struct{ f *Fleet }

// Handle reads the receipt feed (listReceipts).
func (h ListReceiptsHandler) Handle(ctx context.Context, q ListReceipts) (ReceiptPage, error) {
	return h.f.listReceipts(ctx, q.Auth, q.ReceiptQuery)
}

// GetReceiptHandler handles GetReceipt.
type GetReceiptHandler struct{ f *Fleet }

// Handle reads one receipt by its idempotency key (receipt).
func (h GetReceiptHandler) Handle(ctx context.Context, q GetReceipt) (domain.Receipt, error) {
	return h.f.receipt(ctx, q.Auth, q.IdempotencyKey)
}

// GetFrameHandler handles GetFrame.
type GetFrameHandler struct{ f *Fleet }

// Handle reads a stored frame (frame).
func (h GetFrameHandler) Handle(ctx context.Context, q GetFrame) (Frame, error) {
	return h.f.frame(ctx, q.Auth, q.FrameID, q.FrameOptions)
}

// ExportReceiptsHandler handles ExportReceipts.
type ExportReceiptsHandler struct{ f *Fleet }

// Handle answers the organisation's receipt chain (exportReceipts).
func (h ExportReceiptsHandler) Handle(ctx context.Context, q ExportReceipts) (ReceiptExport, error) {
	return h.f.exportReceipts(ctx, q)
}
