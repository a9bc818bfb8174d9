package mcp

import (
	"context"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"phonefleet/commands"
	"phonefleet/commands/apps"
	"phonefleet/domain"
	"phonefleet/http/wire"
)

// The app store tools run the handlers of /v1/app-store and
// /v1/app-library and answer the same shapes: the catalog and what each
// device can install (apps:read), installing a catalog version on devices
// (apps:write), an installation's progress and the devices' inventory
// (apps:read). A credential without the scope does not see the tool
// (spec 5.5); OAuth apps use the console.

type appArgs struct {
	RequestKey     string   `json:"requestKey"`
	Package        string   `json:"package"`
	Version        string   `json:"version"`
	Devices        []string `json:"devices"`
	InstallationID string   `json:"installationId"`
	DeviceID       string   `json:"deviceId"`
}

func appTool(name, title, description, schema string, h hints, scopes ...domain.Scope) *tool {
	t := newTool(name, title, description, schema, h, scopes...)
	t.deny = closedToApps("the console's Apps page")
	return t
}

const sRequestKey = `{"type":"string","pattern":"^[A-Za-z0-9._~:-]{1,255}$","description":"Names the installation; reuse it only to retry it."}`

func (s *Server) appTools() []*tool {
	catalog := appTool("get_app_catalog", "Get the app catalog",
		"Managed apps and versions, and whether each device can install them (why not).",
		object(nil), hints{readOnly: true}, domain.ScopeAppsRead)
	catalog.run = run(s, func(ctx context.Context, app *commands.Application, a domain.Auth, _ appArgs) (*mcpgo.CallToolResult, error) {
		c, err := app.Apps.GetCatalog.Handle(ctx, apps.GetCatalog{Auth: a})
		if err != nil {
			return nil, err
		}
		return jsonResult(wire.NewAppCatalog(c))
	})

	install := appTool("create_app_installation", "Install a catalog app on devices",
		"Install a catalog version on devices; poll get_app_installation for each device's state.",
		object([]string{"requestKey", "package", "version", "devices"},
			prop{"requestKey", sRequestKey},
			prop{"package", `{"type":"string","minLength":1,"maxLength":255}`},
			prop{"version", `{"type":"string","minLength":1,"maxLength":64}`},
			prop{"devices", `{"type":"array","minItems":1,"maxItems":50,"uniqueItems":true,"items":` + sDeviceID + `}`}),
		hints{idempotent: true, openWorld: true}, domain.ScopeAppsWrite, domain.ScopeAppsRead)
	install.run = run(s, func(ctx context.Context, app *commands.Application, a domain.Auth, args appArgs) (*mcpgo.CallToolResult, error) {
		v, err := app.Apps.RequestInstallation.Handle(ctx, apps.RequestInstallation{Auth: a, RequestKey: args.RequestKey,
			Package: args.Package, Version: args.Version, Devices: args.Devices})
		if err != nil {
			return nil, err
		}
		return jsonResult(wire.NewAppRequest(v))
	})

	get := appTool("get_app_installation", "Get an installation",
		"An installation's progress per device, by installationId or requestKey.",
		`{"type":"object","additionalProperties":false,"properties":{`+
			`"installationId":{"type":"string","pattern":"^ins_[0-9a-f]{32}$"},"requestKey":`+sRequestKey+`},`+
			`"oneOf":[{"required":["installationId"]},{"required":["requestKey"]}]}`,
		hints{readOnly: true}, domain.ScopeAppsRead)
	get.run = run(s, func(ctx context.Context, app *commands.Application, a domain.Auth, args appArgs) (*mcpgo.CallToolResult, error) {
		v, err := app.Apps.GetInstallation.Handle(ctx, apps.GetInstallation{Auth: a, InstallationID: args.InstallationID, RequestKey: args.RequestKey})
		if err != nil {
			return nil, err
		}
		return jsonResult(wire.NewAppRequest(v))
	})

	inventory := appTool("get_app_inventory", "Get the devices' apps",
		"Apps on each device at its last read, with versions and whether the store manages them.",
		object(nil, prop{"deviceId", sDeviceID}), hints{readOnly: true}, domain.ScopeAppsRead)
	inventory.run = run(s, func(ctx context.Context, app *commands.Application, a domain.Auth, args appArgs) (*mcpgo.CallToolResult, error) {
		list, err := app.Apps.GetInventory.Handle(ctx, apps.GetInventory{Auth: a, DeviceID: args.DeviceID})
		if err != nil {
			return nil, err
		}
		return jsonResult(wire.NewAppInventory(list))
	})
	return []*tool{catalog, install, get, inventory}
}
