package apps

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"phonefleet/domain"
)

// RequestView is a tracked request as its readers see it: an installation
// (with its catalog app and version) or an inventory refresh, with each
// device's progress.
type RequestView struct {
	Kind           string
	InstallationID string
	RequestKey     string
	Package        string
	Title          string
	Version        string
	// State is in_progress while a device is still queued or being worked
	// on, finished once every device has ended.
	State       string
	RequestedBy domain.Actor
	RequestedAt time.Time
	UpdatedAt   time.Time
	Devices     []DeviceProgress
	// Replayed is true when the answer is that of an earlier request with
	// the same key.
	Replayed bool
}

// DeviceProgress is one device's part of a request.
type DeviceProgress struct {
	DeviceID string
	// State is queued, installing, installed (an installation), reading,
	// read (a refresh) or failed.
	State string
	// Code, Reason and Message say why a device failed, in the device's
	// (or the check's) words.
	Code, Reason, Message string
	// ActionID and IdempotencyKey name the install's action and receipt.
	ActionID, IdempotencyKey string
	UpdatedAt                time.Time
}

// Request states.
const (
	RequestInProgress = "in_progress"
	RequestFinished   = "finished"
)

const requestColumns = `r.kind, coalesce(r.installation_id, ''), r.request_key, coalesce(r.package, ''), coalesce(r.title, ''),
	coalesce(r.version, ''), r.requester_kind, r.requester_id, r.requested_at, r.updated_at,
	(SELECT coalesce(jsonb_agg(jsonb_build_object('deviceId', d.device_id, 'state', d.state, 'code', coalesce(d.code, ''),
		'reason', coalesce(d.reason, ''), 'message', coalesce(d.message, ''), 'actionId', coalesce(d.action_id, ''),
		'idempotencyKey', coalesce(d.idempotency_key, ''), 'updatedAt', d.updated_at) ORDER BY d.position), '[]')
	 FROM public.app_request_devices d WHERE d.org_id = r.org_id AND d.request_key = r.request_key)`

func scanRequest(row pgx.Row) (RequestView, error) {
	var v RequestView
	var devices []byte
	if err := row.Scan(&v.Kind, &v.InstallationID, &v.RequestKey, &v.Package, &v.Title, &v.Version, &v.RequestedBy.Kind,
		&v.RequestedBy.ID, &v.RequestedAt, &v.UpdatedAt, &devices); err != nil {
		return v, err
	}
	var ds []struct {
		DeviceID, State, Code, Reason, Message, ActionID, IdempotencyKey string
		UpdatedAt                                                        time.Time
	}
	if err := json.Unmarshal(devices, &ds); err != nil {
		return v, err
	}
	v.State = RequestFinished
	for _, d := range ds {
		v.Devices = append(v.Devices, DeviceProgress(d))
		switch d.State {
		case domain.AppDeviceInstalled, domain.AppDeviceRead, domain.AppDeviceFailed:
		default:
			v.State = RequestInProgress
		}
	}
	return v, nil
}

// request reads the organisation's request under key.
func (a *Apps) request(ctx context.Context, orgID, key string) (RequestView, bool, error) {
	v, err := scanRequest(a.pool.QueryRow(ctx, `SELECT `+requestColumns+` FROM public.app_requests r
		WHERE r.org_id = $1 AND r.request_key = $2`, orgID, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return v, false, nil
	}
	return v, err == nil, err
}

func notFound(what string) error {
	return domain.Errorf(domain.CodeNotFound, "no %s under that id", what)
}

// GetInstallation reads an installation by id (GET
// /v1/app-store/installations/{installationId}) or, with RequestKey, by
// the key it was requested with (…/by-request/{requestKey}).
type GetInstallation struct {
	Auth           domain.Auth
	InstallationID string
	RequestKey     string
}

// GetInstallationHandler handles GetInstallation.
type GetInstallationHandler struct{ a *Apps }

// Handle needs apps:read; another organisation's installation, or a
// refresh's key, answers not_found like a missing one.
func (h GetInstallationHandler) Handle(ctx context.Context, q GetInstallation) (RequestView, error) {
	if err := require(q.Auth, domain.ScopeAppsRead); err != nil {
		return RequestView{}, err
	}
	var v RequestView
	var err error
	if q.RequestKey != "" {
		var found bool
		v, found, err = h.a.request(ctx, q.Auth.OrgID, q.RequestKey)
		if err == nil && (!found || v.Kind != domain.AppRequestInstallation) {
			err = notFound("installation")
		}
		return v, err
	}
	v, err = scanRequest(h.a.pool.QueryRow(ctx, `SELECT `+requestColumns+` FROM public.app_requests r
		WHERE r.org_id = $1 AND r.installation_id = $2`, q.Auth.OrgID, q.InstallationID))
	if errors.Is(err, pgx.ErrNoRows) {
		return v, notFound("installation")
	}
	return v, err
}

// ListInstallations pages the organisation's installations, newest first
// (GET /v1/app-store/installations).
type ListInstallations struct {
	Auth domain.Auth
	// Before is the cursor: installations older than this installation id.
	Before string
	Limit  int
}

// InstallationPage is one page; NextBefore is empty on the last.
type InstallationPage struct {
	Installations []RequestView
	NextBefore    string
}

// ListInstallationsHandler handles ListInstallations.
type ListInstallationsHandler struct{ a *Apps }

// Handle needs apps:read.
func (h ListInstallationsHandler) Handle(ctx context.Context, q ListInstallations) (InstallationPage, error) {
	if err := require(q.Auth, domain.ScopeAppsRead); err != nil {
		return InstallationPage{}, err
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 50
	}
	rows, err := h.a.pool.Query(ctx, `SELECT `+requestColumns+` FROM public.app_requests r
		WHERE r.org_id = $1 AND r.kind = $2 AND ($3 = '' OR r.installation_id < $3)
		ORDER BY r.installation_id DESC LIMIT $4`, q.Auth.OrgID, domain.AppRequestInstallation, q.Before, limit+1)
	if err != nil {
		return InstallationPage{}, err
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (RequestView, error) { return scanRequest(r) })
	if err != nil {
		return InstallationPage{}, err
	}
	page := InstallationPage{Installations: out}
	if len(out) > limit {
		page.Installations = out[:limit]
		page.NextBefore = out[limit-1].InstallationID
	}
	return page, nil
}

// GetRequest reads a tracked request of the app library by its key (GET
// /v1/app-library/requests/{requestKey}): an inventory refresh, or an
// installation.
type GetRequest struct {
	Auth       domain.Auth
	RequestKey string
}

// GetRequestHandler handles GetRequest.
type GetRequestHandler struct{ a *Apps }

// Handle needs apps:read; another organisation's key answers not_found.
func (h GetRequestHandler) Handle(ctx context.Context, q GetRequest) (RequestView, error) {
	if err := require(q.Auth, domain.ScopeAppsRead); err != nil {
		return RequestView{}, err
	}
	v, found, err := h.a.request(ctx, q.Auth.OrgID, q.RequestKey)
	if err == nil && !found {
		err = notFound("request")
	}
	return v, err
}
