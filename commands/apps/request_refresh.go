package apps

import (
	"context"
	"slices"

	"phonefleet/commands/cqrs"
	"phonefleet/domain"
	"phonefleet/projections"
)

// RequestRefresh re-reads devices' software (POST
// /v1/app-library/inventory/refreshes) as a tracked request under
// RequestKey. No Devices means every device the caller can see.
type RequestRefresh struct {
	Auth       domain.Auth
	RequestKey string
	Devices    []string
}

// RequestRefreshHandler handles RequestRefresh.
type RequestRefreshHandler struct{ a *Apps }

// Handle records the refresh, every device queued, and answers it; the
// app store's worker reads the devices. It needs apps:write and
// apps:read. A key already used answers its request when it is the same
// (Replayed), idempotency_conflict when not. Refusals: invalid_argument,
// device_unavailable (not_found).
func (h RequestRefreshHandler) Handle(ctx context.Context, cmd RequestRefresh) (RequestView, error) {
	a := h.a
	auth := cmd.Auth
	if err := require(auth, domain.ScopeAppsWrite, domain.ScopeAppsRead); err != nil {
		return RequestView{}, err
	}
	if err := checkRequestKey(cmd.RequestKey); err != nil {
		return RequestView{}, err
	}
	devices := slices.Clone(cmd.Devices)
	if len(devices) == 0 {
		rows, err := a.visibleDevices(ctx, auth)
		if err != nil {
			return RequestView{}, err
		}
		for _, d := range rows {
			devices = append(devices, d.ID)
		}
		if len(devices) > MaxDevicesPerRequest {
			devices = devices[:MaxDevicesPerRequest]
		}
	}
	// The fingerprint is the list as asked: "every device" retried means
	// the same request even when the fleet changed since.
	fp := fingerprint("refresh", cmd.Devices)
	stream := domain.AppRequestStream(auth.OrgID, cmd.RequestKey)
	if r, _, err := a.repo.Load(ctx, stream); err != nil {
		return RequestView{}, err
	} else if r.Exists() {
		return a.replayed(ctx, auth, r, fp)
	}
	if err := a.checkDevices(ctx, auth, devices); err != nil {
		return RequestView{}, err
	}
	now := a.cfg.Now()
	req, c, err := a.repo.Update(ctx, stream, func(r **domain.AppRequest) ([]domain.Event, error) {
		if (*r).Exists() {
			return nil, nil
		}
		return []domain.Event{domain.AppInventoryRefreshRequested{RequestKey: cmd.RequestKey, OrgID: auth.OrgID, Devices: devices,
			Requester: domain.CreatorOf(auth), Fingerprint: fp, RequestedAt: now}}, nil
	})
	if err != nil {
		return RequestView{}, err
	}
	if len(c.Appends) == 0 {
		return a.replayed(ctx, auth, req, fp)
	}
	if err := a.wait(ctx, c); err != nil {
		return RequestView{}, err
	}
	view, _, err := a.request(ctx, auth.OrgID, cmd.RequestKey)
	return view, err
}

// replayed answers a request already recorded under its key: the same
// request's current view, or idempotency_conflict for another request.
func (a *Apps) replayed(ctx context.Context, auth domain.Auth, r *domain.AppRequest, fp string) (RequestView, error) {
	if r.Fingerprint != fp {
		return RequestView{}, keyReused(r.RequestKey)
	}
	if err := cqrs.AwaitAll(ctx, a.cfg.Store, a.cfg.ReadModels, projections.AppsName); err != nil {
		return RequestView{}, err
	}
	view, _, err := a.request(ctx, auth.OrgID, r.RequestKey)
	view.Replayed = true
	return view, err
}
