package apps

import (
	"context"
	"encoding/json"
	"time"

	"phonefleet/domain"
)

// knownSoftware is what a device last reported, from the read model.
type knownSoftware struct {
	domain.DeviceSoftware
	ReadAt time.Time
}

// software reads what the organisation's devices last reported, with the
// apps on each and which of them the store installed (package to
// version).
func (a *Apps) software(ctx context.Context, orgID string) (map[string]knownSoftware, map[string]map[string]string, error) {
	rows, err := a.pool.Query(ctx, `SELECT device_id, os_version, sdk, abis, storage_free_bytes, can_install, read_at
		FROM public.app_software WHERE org_id = $1`, orgID)
	if err != nil {
		return nil, nil, err
	}
	sw := map[string]knownSoftware{}
	for rows.Next() {
		var id string
		var k knownSoftware
		var abis []byte
		if err := rows.Scan(&id, &k.OSVersion, &k.SDK, &abis, &k.StorageFreeBytes, &k.CanInstall, &k.ReadAt); err != nil {
			rows.Close()
			return nil, nil, err
		}
		if err := json.Unmarshal(abis, &k.ABIs); err != nil {
			rows.Close()
			return nil, nil, err
		}
		k.Apps = []domain.InstalledApp{}
		sw[id] = k
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	rows, err = a.pool.Query(ctx, `SELECT device_id, package, coalesce(version, ''), system FROM public.app_inventory
		WHERE org_id = $1 ORDER BY device_id, system DESC, package`, orgID)
	if err != nil {
		return nil, nil, err
	}
	for rows.Next() {
		var id string
		var app domain.InstalledApp
		if err := rows.Scan(&id, &app.Package, &app.Version, &app.System); err != nil {
			rows.Close()
			return nil, nil, err
		}
		if k, ok := sw[id]; ok {
			k.Apps = append(k.Apps, app)
			sw[id] = k
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	rows, err = a.pool.Query(ctx, `SELECT device_id, package, version FROM public.app_managed WHERE org_id = $1`, orgID)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	managed := map[string]map[string]string{}
	for rows.Next() {
		var id, pkg, version string
		if err := rows.Scan(&id, &pkg, &version); err != nil {
			return nil, nil, err
		}
		if managed[id] == nil {
			managed[id] = map[string]string{}
		}
		managed[id][pkg] = version
	}
	return sw, managed, rows.Err()
}

// Eligibility is whether one device can install one catalog version, and
// why not.
type Eligibility struct {
	DeviceID    string
	Installable bool
	Reason      string
	Message     string
	// InstalledVersion is the version of the app the device has, if any.
	InstalledVersion string
	Installed        bool
}

// eligibility says whether a device (nil software: never read) can
// install v.
func eligibility(deviceID string, sw *knownSoftware, managed map[string]string, pkg string, v domain.CatalogVersion) Eligibility {
	e := Eligibility{DeviceID: deviceID}
	if sw == nil {
		e.Reason, e.Message = domain.ReasonSoftwareNotRead, "the device's software has not been read yet; refresh the inventory (POST /v1/app-library/inventory/refreshes)"
		return e
	}
	for _, app := range sw.Apps {
		if app.Package == pkg {
			e.Installed, e.InstalledVersion = true, app.Version
			if mv, ok := managed[pkg]; ok && e.InstalledVersion == "" {
				e.InstalledVersion = mv
			}
		}
	}
	e.Reason, e.Message, e.Installable = v.Ineligible(sw.DeviceSoftware, 0)
	return e
}

// Catalog is the app store's catalog as one caller sees it: each version
// with, for every device the caller can see, whether it can install it.
type Catalog struct {
	Apps []CatalogAppView
}

// CatalogAppView is one catalog app.
type CatalogAppView struct {
	Package  string
	Title    string
	Versions []CatalogVersionView
}

// CatalogVersionView is one version and its devices.
type CatalogVersionView struct {
	Version string
	SHA256  string
	MinSDK  int
	ABIs    []string
	Devices []Eligibility
}

// GetCatalog reads the catalog (GET /v1/app-store/catalog).
type GetCatalog struct{ Auth domain.Auth }

// GetCatalogHandler handles GetCatalog.
type GetCatalogHandler struct{ a *Apps }

// Handle needs apps:read.
func (h GetCatalogHandler) Handle(ctx context.Context, q GetCatalog) (Catalog, error) {
	if err := require(q.Auth, domain.ScopeAppsRead); err != nil {
		return Catalog{}, err
	}
	devices, err := h.a.visibleDevices(ctx, q.Auth)
	if err != nil {
		return Catalog{}, err
	}
	sw, managed, err := h.a.software(ctx, q.Auth.OrgID)
	if err != nil {
		return Catalog{}, err
	}
	out := Catalog{Apps: []CatalogAppView{}}
	for _, app := range h.a.cfg.Catalog.Apps {
		av := CatalogAppView{Package: app.Package, Title: app.Title}
		for _, v := range app.Versions {
			vv := CatalogVersionView{Version: v.Version, SHA256: v.SHA256, MinSDK: v.MinSDK, ABIs: v.ABIs, Devices: []Eligibility{}}
			if vv.ABIs == nil {
				vv.ABIs = []string{}
			}
			for _, d := range devices {
				var s *knownSoftware
				if k, ok := sw[d.ID]; ok {
					s = &k
				}
				vv.Devices = append(vv.Devices, eligibility(d.ID, s, managed[d.ID], app.Package, v))
			}
			av.Versions = append(av.Versions, vv)
		}
		out.Apps = append(out.Apps, av)
	}
	return out, nil
}

// DeviceCapabilities is what one device can install (GET
// /v1/app-library/device-capabilities): nil Software until it was read.
type DeviceCapabilities struct {
	DeviceID string
	Name     string
	Backend  string
	Software *domain.DeviceSoftware
	ReadAt   *time.Time
	// Installable lists the catalog versions the device can install.
	Installable []InstallableVersion
}

// InstallableVersion names one catalog version.
type InstallableVersion struct {
	Package string
	Version string
}

// GetCapabilities reads the devices' capabilities.
type GetCapabilities struct{ Auth domain.Auth }

// GetCapabilitiesHandler handles GetCapabilities.
type GetCapabilitiesHandler struct{ a *Apps }

// Handle needs apps:read.
func (h GetCapabilitiesHandler) Handle(ctx context.Context, q GetCapabilities) ([]DeviceCapabilities, error) {
	if err := require(q.Auth, domain.ScopeAppsRead); err != nil {
		return nil, err
	}
	devices, err := h.a.visibleDevices(ctx, q.Auth)
	if err != nil {
		return nil, err
	}
	sw, _, err := h.a.software(ctx, q.Auth.OrgID)
	if err != nil {
		return nil, err
	}
	out := []DeviceCapabilities{}
	for _, d := range devices {
		c := DeviceCapabilities{DeviceID: d.ID, Name: d.Name, Backend: d.Backend, Installable: []InstallableVersion{}}
		if k, ok := sw[d.ID]; ok {
			s := k.DeviceSoftware
			s.Apps = nil
			c.Software, c.ReadAt = &s, &k.ReadAt
			for _, app := range h.a.cfg.Catalog.Apps {
				for _, v := range app.Versions {
					if _, _, ok := v.Ineligible(k.DeviceSoftware, 0); ok {
						c.Installable = append(c.Installable, InstallableVersion{app.Package, v.Version})
					}
				}
			}
		}
		out = append(out, c)
	}
	return out, nil
}

// DeviceInventory is the apps on one device (GET
// /v1/app-library/inventory); Apps is nil until the device was read.
type DeviceInventory struct {
	DeviceID string
	Name     string
	ReadAt   *time.Time
	Apps     []InventoryApp
}

// InventoryApp is one app on a device; Managed when the app store
// installed it (ManagedVersion the catalog version it installed).
type InventoryApp struct {
	Package        string
	Version        string
	System         bool
	Managed        bool
	ManagedVersion string
}

// GetInventory reads the devices' apps; DeviceID narrows it to one.
type GetInventory struct {
	Auth     domain.Auth
	DeviceID string
}

// GetInventoryHandler handles GetInventory.
type GetInventoryHandler struct{ a *Apps }

// Handle needs apps:read. A DeviceID the caller cannot see answers
// device_unavailable (not_found), like a missing one.
func (h GetInventoryHandler) Handle(ctx context.Context, q GetInventory) ([]DeviceInventory, error) {
	if err := require(q.Auth, domain.ScopeAppsRead); err != nil {
		return nil, err
	}
	if q.DeviceID != "" {
		if _, err := h.a.cfg.Devices.Visible(ctx, q.Auth, q.DeviceID); err != nil {
			return nil, err
		}
	}
	devices, err := h.a.visibleDevices(ctx, q.Auth)
	if err != nil {
		return nil, err
	}
	sw, managed, err := h.a.software(ctx, q.Auth.OrgID)
	if err != nil {
		return nil, err
	}
	out := []DeviceInventory{}
	for _, d := range devices {
		if q.DeviceID != "" && d.ID != q.DeviceID {
			continue
		}
		inv := DeviceInventory{DeviceID: d.ID, Name: d.Name}
		if k, ok := sw[d.ID]; ok {
			inv.ReadAt = &k.ReadAt
			inv.Apps = []InventoryApp{}
			for _, app := range k.Apps {
				mv, isManaged := managed[d.ID][app.Package]
				version := app.Version
				if version == "" {
					version = mv
				}
				inv.Apps = append(inv.Apps, InventoryApp{Package: app.Package, Version: version, System: app.System,
					Managed: isManaged, ManagedVersion: mv})
			}
		}
		out = append(out, inv)
	}
	return out, nil
}
