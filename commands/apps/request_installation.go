package apps

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"phonefleet/domain"
)

// RequestInstallation installs a catalog app's version on devices (POST
// /v1/app-store/installations). RequestKey names the request for the
// organisation: a retry with the same key answers the first request.
type RequestInstallation struct {
	Auth       domain.Auth
	RequestKey string
	Package    string
	Version    string
	Devices    []string
}

// RequestInstallationHandler handles RequestInstallation.
type RequestInstallationHandler struct{ a *Apps }

// Handle records the installation, every device queued, and answers it;
// the app store's worker then installs device by device. It needs
// apps:write and apps:read. A key already used answers its installation
// when the request is the same (Replayed), idempotency_conflict when it
// is not. Refusals: invalid_argument (key, package or version not in the
// catalog, devices), device_unavailable (not_found: a device the caller
// cannot see).
func (h RequestInstallationHandler) Handle(ctx context.Context, cmd RequestInstallation) (RequestView, error) {
	a := h.a
	auth := cmd.Auth
	if err := require(auth, domain.ScopeAppsWrite, domain.ScopeAppsRead); err != nil {
		return RequestView{}, err
	}
	if err := checkRequestKey(cmd.RequestKey); err != nil {
		return RequestView{}, err
	}
	app, v, ok := a.cfg.Catalog.Find(cmd.Package, cmd.Version)
	if !ok {
		return RequestView{}, domain.Errorf(domain.CodeInvalidArgument, "%s %s is not in the app store's catalog (GET /v1/app-store/catalog lists it)",
			cmd.Package, cmd.Version).With("field", "version")
	}
	fp := fingerprint("installation", cmd.Package, cmd.Version, cmd.Devices)
	stream := domain.AppRequestStream(auth.OrgID, cmd.RequestKey)
	if r, _, err := a.repo.Load(ctx, stream); err != nil {
		return RequestView{}, err
	} else if r.Exists() {
		return a.replayed(ctx, auth, r, fp)
	}
	if err := a.checkDevices(ctx, auth, cmd.Devices); err != nil {
		return RequestView{}, err
	}
	now := a.cfg.Now()
	req, c, err := a.repo.Update(ctx, stream, func(r **domain.AppRequest) ([]domain.Event, error) {
		if (*r).Exists() {
			return nil, nil
		}
		return []domain.Event{domain.AppInstallationRequested{InstallationID: domain.NewID(domain.PrefixInstallation),
			RequestKey: cmd.RequestKey, OrgID: auth.OrgID, Package: app.Package, Title: app.Title, Version: v.Version,
			SHA256: v.SHA256, Devices: cmd.Devices, Requester: domain.CreatorOf(auth), Fingerprint: fp, RequestedAt: now}}, nil
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

func keyReused(key string) error {
	return domain.Errorf(domain.CodeIdempotencyConflict, "requestKey %q was used for a different request; choose a new key", key).
		With("field", "requestKey")
}

// fingerprint identifies what a request key was first used for.
func fingerprint(kind string, parts ...any) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n", kind)
	for _, p := range parts {
		switch p := p.(type) {
		case []string:
			fmt.Fprintf(h, "%s\n", strings.Join(p, ","))
		default:
			fmt.Fprintf(h, "%v\n", p)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}
