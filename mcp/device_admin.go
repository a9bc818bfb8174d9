package mcp

import (
	"context"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"phonefleet/commands"
	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/http/wire"
)

// deviceTools are the device tools beyond leasing, observing and acting:
// who drives a device (GET /v1/devices/{deviceId}/driving), putting it to
// sleep (POST …/stop) and renaming it (PATCH /v1/devices/{deviceId}), and
// waiting for its screen (wait_for). They run the routes' queries and
// commands and answer the routes' shapes. Stopping and renaming are closed
// to OAuth apps, as the routes are (spec 5.2: an app may wake a device, not
// stop or rename it).
func (s *Server) deviceTools() []*tool {
	return []*tool{s.getDrivingTool(), s.stopDeviceTool(), s.renameDeviceTool(), s.waitForTool()}
}

// appDevicePage is where an OAuth app is sent to stop or rename a device.
const appDevicePage = "the console's device page"

func (s *Server) getDrivingTool() *tool {
	t := newTool("get_driving", "Who is driving",
		"Who holds a device's lease and until when, if anyone.",
		object([]string{"deviceId"}, prop{"deviceId", sDeviceID}),
		hints{readOnly: true}, domain.ScopeDevicesRead)
	t.run = run(s, func(ctx context.Context, app *commands.Application, a domain.Auth, args deviceArgs) (*mcpgo.CallToolResult, error) {
		d, err := app.Fleet.GetDriving.Handle(ctx, fleet.GetDriving{Auth: a, DeviceID: args.DeviceID})
		if err != nil {
			return nil, deviceNotFound(err, args.DeviceID)
		}
		return jsonResult(wire.NewDriving(d))
	})
	return t
}

func (s *Server) stopDeviceTool() *tool {
	t := newTool("stop_device", "Put a device to sleep",
		"Turn the screen off (leaseId if you hold the lease).",
		object([]string{"deviceId"}, prop{"deviceId", sDeviceID}, prop{"leaseId", sLeaseID}),
		hints{idempotent: true, destructive: true}, domain.ScopeDevicesAct)
	t.deny = closedToApps(appDevicePage)
	t.run = run(s, func(ctx context.Context, app *commands.Application, a domain.Auth, args leaseArgs) (*mcpgo.CallToolResult, error) {
		d, err := app.Fleet.PowerDevice.Handle(ctx, fleet.PowerDevice{Auth: a, DeviceID: args.DeviceID, Wake: false, LeaseID: args.LeaseID})
		if err != nil {
			return nil, deviceNotFound(err, args.DeviceID)
		}
		return jsonResult(wire.NewDevice(d))
	})
	return t
}

type renameArgs struct {
	DeviceID string `json:"deviceId"`
	Name     string `json:"name"`
}

func (s *Server) renameDeviceTool() *tool {
	t := newTool("rename_device", "Rename a device",
		"Set a device's display name for the whole organisation.",
		object([]string{"deviceId", "name"}, prop{"deviceId", sDeviceID},
			prop{"name", `{"type":"string","minLength":1,"maxLength":64,"description":"The new name."}`}),
		hints{idempotent: true}, domain.ScopeDevicesRead)
	t.deny = closedToApps(appDevicePage)
	t.run = run(s, func(ctx context.Context, app *commands.Application, a domain.Auth, args renameArgs) (*mcpgo.CallToolResult, error) {
		d, err := app.Fleet.RenameDevice.Handle(ctx, fleet.RenameDevice{Auth: a, DeviceID: args.DeviceID, Name: args.Name})
		if err != nil {
			return nil, deviceNotFound(err, args.DeviceID)
		}
		return jsonResult(wire.NewDevice(d))
	})
	return t
}
