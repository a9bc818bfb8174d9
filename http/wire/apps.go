package wire

import (
	"time"

	"phonefleet/commands/apps"
	"phonefleet/domain"
)

// The shapes of the app store (/v1/app-store) and the app library
// (/v1/app-library); REST and the app tools answer them.

// AppCatalog is the catalog as a caller sees it.
type AppCatalog struct {
	Apps []AppCatalogApp `json:"apps"`
}

// AppCatalogApp is one managed app.
type AppCatalogApp struct {
	Package  string              `json:"package"`
	Title    string              `json:"title"`
	Versions []AppCatalogVersion `json:"versions"`
}

// AppCatalogVersion is one version, with whether each of the caller's
// devices can install it and why not.
type AppCatalogVersion struct {
	Version string           `json:"version"`
	SHA256  string           `json:"sha256"`
	MinSDK  int              `json:"minSdk"`
	ABIs    []string         `json:"abis"`
	Devices []AppEligibility `json:"devices"`
}

// AppEligibility says whether one device can install a version.
type AppEligibility struct {
	DeviceID         string  `json:"deviceId"`
	Installable      bool    `json:"installable"`
	Reason           *string `json:"reason"`
	Message          *string `json:"message"`
	Installed        bool    `json:"installed"`
	InstalledVersion *string `json:"installedVersion"`
}

// NewAppCatalog converts the catalog.
func NewAppCatalog(c apps.Catalog) AppCatalog {
	return AppCatalog{Apps: each(c.Apps, func(a apps.CatalogAppView) AppCatalogApp {
		return AppCatalogApp{Package: a.Package, Title: a.Title, Versions: each(a.Versions, func(v apps.CatalogVersionView) AppCatalogVersion {
			return AppCatalogVersion{Version: v.Version, SHA256: v.SHA256, MinSDK: v.MinSDK, ABIs: each(v.ABIs, same),
				Devices: each(v.Devices, func(e apps.Eligibility) AppEligibility {
					return AppEligibility{DeviceID: e.DeviceID, Installable: e.Installable, Reason: optString(e.Reason),
						Message: optString(e.Message), Installed: e.Installed, InstalledVersion: optString(e.InstalledVersion)}
				})}
		})}
	})}
}

// AppRequest is a tracked request: an installation (installationId,
// package, title, version set) or an inventory refresh (kind
// inventory_refresh, those null).
type AppRequest struct {
	Kind           string              `json:"kind"`
	InstallationID *string             `json:"installationId"`
	RequestKey     string              `json:"requestKey"`
	Package        *string             `json:"package"`
	Title          *string             `json:"title"`
	Version        *string             `json:"version"`
	State          string              `json:"state"`
	RequestedBy    domain.ReceiptActor `json:"requestedBy"`
	RequestedAt    string              `json:"requestedAt"`
	UpdatedAt      string              `json:"updatedAt"`
	Devices        []AppDeviceProgress `json:"devices"`
}

// AppDeviceProgress is one device's part of a request.
type AppDeviceProgress struct {
	DeviceID string  `json:"deviceId"`
	State    string  `json:"state"`
	Code     *string `json:"code"`
	Reason   *string `json:"reason"`
	Message  *string `json:"message"`
	// ReceiptIdempotencyKey names the install action's receipt (GET
	// /v1/receipts/{idempotencyKey}).
	ReceiptIdempotencyKey *string `json:"receiptIdempotencyKey"`
	UpdatedAt             string  `json:"updatedAt"`
}

// NewAppRequest converts a tracked request.
func NewAppRequest(v apps.RequestView) AppRequest {
	return AppRequest{Kind: v.Kind, InstallationID: optString(v.InstallationID), RequestKey: v.RequestKey,
		Package: optString(v.Package), Title: optString(v.Title), Version: optString(v.Version), State: v.State,
		RequestedBy: v.RequestedBy.ForReceipt(), RequestedAt: appTime(v.RequestedAt), UpdatedAt: appTime(v.UpdatedAt),
		Devices: each(v.Devices, func(d apps.DeviceProgress) AppDeviceProgress {
			return AppDeviceProgress{DeviceID: d.DeviceID, State: d.State, Code: optString(d.Code), Reason: optString(d.Reason),
				Message: optString(d.Message), ReceiptIdempotencyKey: optString(d.IdempotencyKey), UpdatedAt: appTime(d.UpdatedAt)}
		})}
}

// AppInstallationPage is one page of installations, newest first.
type AppInstallationPage struct {
	Installations []AppRequest `json:"installations"`
	NextBefore    *string      `json:"nextBefore,omitempty"`
}

// NewAppInstallationPage converts a page.
func NewAppInstallationPage(p apps.InstallationPage) AppInstallationPage {
	return AppInstallationPage{Installations: each(p.Installations, NewAppRequest), NextBefore: optString(p.NextBefore)}
}

// AppDeviceCapabilities is what one device runs and can install.
type AppDeviceCapabilities struct {
	DeviceID         string               `json:"deviceId"`
	Name             string               `json:"name"`
	Backend          string               `json:"backend"`
	Read             bool                 `json:"read"`
	ReadAt           *string              `json:"readAt"`
	OSVersion        *string              `json:"osVersion"`
	SDK              *int                 `json:"sdk"`
	ABIs             []string             `json:"abis"`
	StorageFreeBytes *int64               `json:"storageFreeBytes"`
	CanInstall       bool                 `json:"canInstall"`
	Installable      []AppInstallableItem `json:"installable"`
}

// AppInstallableItem names a catalog version a device can install.
type AppInstallableItem struct {
	Package string `json:"package"`
	Version string `json:"version"`
}

// AppCapabilitiesList is the devices' capabilities.
type AppCapabilitiesList struct {
	Devices []AppDeviceCapabilities `json:"devices"`
}

// NewAppCapabilities converts the devices' capabilities.
func NewAppCapabilities(list []apps.DeviceCapabilities) AppCapabilitiesList {
	return AppCapabilitiesList{Devices: each(list, func(c apps.DeviceCapabilities) AppDeviceCapabilities {
		w := AppDeviceCapabilities{DeviceID: c.DeviceID, Name: c.Name, Backend: c.Backend, ABIs: []string{},
			Installable: each(c.Installable, func(i apps.InstallableVersion) AppInstallableItem { return AppInstallableItem(i) })}
		if c.Software != nil {
			w.Read, w.ReadAt = true, optTime(c.ReadAt)
			w.OSVersion, w.SDK = &c.Software.OSVersion, &c.Software.SDK
			w.ABIs = each(c.Software.ABIs, same)
			w.StorageFreeBytes, w.CanInstall = c.Software.StorageFreeBytes, c.Software.CanInstall
		}
		return w
	})}
}

// AppInventory is the apps on the caller's devices.
type AppInventory struct {
	Devices []AppDeviceInventory `json:"devices"`
}

// AppDeviceInventory is the apps on one device; apps is null until the
// device's software was read.
type AppDeviceInventory struct {
	DeviceID string             `json:"deviceId"`
	Name     string             `json:"name"`
	ReadAt   *string            `json:"readAt"`
	Apps     []AppInventoryItem `json:"apps"`
}

// AppInventoryItem is one app on a device.
type AppInventoryItem struct {
	Package        string  `json:"package"`
	Version        *string `json:"version"`
	System         bool    `json:"system"`
	Managed        bool    `json:"managed"`
	ManagedVersion *string `json:"managedVersion"`
}

// NewAppInventory converts the inventory.
func NewAppInventory(list []apps.DeviceInventory) AppInventory {
	return AppInventory{Devices: each(list, func(d apps.DeviceInventory) AppDeviceInventory {
		w := AppDeviceInventory{DeviceID: d.DeviceID, Name: d.Name, ReadAt: optTime(d.ReadAt)}
		if d.Apps != nil {
			w.Apps = each(d.Apps, func(a apps.InventoryApp) AppInventoryItem {
				return AppInventoryItem{Package: a.Package, Version: optString(a.Version), System: a.System, Managed: a.Managed,
					ManagedVersion: optString(a.ManagedVersion)}
			})
		}
		return w
	})}
}

func same(s string) string { return s }

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func optTime(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := appTime(*t)
	return &s
}

func appTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
