package mcp

import (
	"context"
	"encoding/json"
	"errors"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"phonefleet/commands"
	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/http/wire"
)

// fleetTools are the device, lease, observation, action, frame and receipt
// tools, in the order they are defined (tools/list sorts by name).
func (s *Server) fleetTools() []*tool {
	out := []*tool{
		s.listDevicesTool(), s.getDeviceTool(),
		s.acquireLeaseTool(), s.renewLeaseTool(), s.releaseLeaseTool(), s.listLeasesTool(),
		s.observeTool(), s.getFrameTool(), s.getReceiptTool(), s.wakeDeviceTool(),
	}
	out = append(out, s.actionTools()...)
	return append(out, s.tapElementTool(), s.batchActionsTool())
}

// run adapts a typed tool body to tool.run: it decodes the arguments into
// A and hands over the application object, whose handlers check scopes
// and tenancy.
func run[A any](s *Server, body func(ctx context.Context, app *commands.Application, a domain.Auth, args A) (*mcpgo.CallToolResult, error)) func(context.Context, domain.Auth, json.RawMessage) (*mcpgo.CallToolResult, error) {
	return func(ctx context.Context, a domain.Auth, raw json.RawMessage) (*mcpgo.CallToolResult, error) {
		var args A
		if err := decode(raw, &args); err != nil {
			return nil, err
		}
		return body(ctx, &s.app, a, args)
	}
}

// deviceNotFound turns the read side's not_found for a device into the
// MCP answer for one: device_unavailable with reason not_found, as the
// command side answers it (spec 7.2).
func deviceNotFound(err error, deviceID string) error {
	var de *domain.Error
	if errors.As(err, &de) && de.Code == domain.CodeNotFound {
		return domain.ErrDeviceNotFound(deviceID)
	}
	return err
}

type listDevicesArgs struct {
	Status  string `json:"status"`
	Backend string `json:"backend"`
	Leased  *bool  `json:"leased"`
	After   string `json:"after"`
	Limit   int    `json:"limit"`
}

func (s *Server) listDevicesTool() *tool {
	t := newTool("list_devices", "List devices",
		"Phones you can use. leased=false: only free ones.",
		object(nil,
			prop{"status", `{"type":"string","enum":["online","asleep"],"description":"Only devices in this state."}`},
			prop{"backend", `{"type":"string","enum":["sim","adb","robot"],"description":"Only devices of this backend kind."}`},
			prop{"leased", `{"type":"boolean","description":"true: only devices leased now; false: only devices free to lease."}`},
			prop{"after", sAfter},
			prop{"limit", sLimit}),
		hints{readOnly: true}, domain.ScopeDevicesRead)
	t.run = run(s, func(ctx context.Context, app *commands.Application, a domain.Auth, args listDevicesArgs) (*mcpgo.CallToolResult, error) {
		page, err := app.Fleet.ListDevices.Handle(ctx, fleet.ListDevices{Auth: a, DeviceQuery: fleet.DeviceQuery{
			Status: args.Status, Backend: args.Backend, Leased: args.Leased, After: args.After, Limit: args.Limit}})
		if err != nil {
			return nil, err
		}
		return jsonResult(wire.NewDevicePage(page))
	})
	return t
}

type deviceArgs struct {
	DeviceID string `json:"deviceId"`
}

func (s *Server) getDeviceTool() *tool {
	t := newTool("get_device", "Get a device",
		"One device: backend, model, screen size, status, lease.",
		object([]string{"deviceId"}, prop{"deviceId", sDeviceID}),
		hints{readOnly: true}, domain.ScopeDevicesRead)
	t.run = run(s, func(ctx context.Context, app *commands.Application, a domain.Auth, args deviceArgs) (*mcpgo.CallToolResult, error) {
		d, err := app.Fleet.GetDevice.Handle(ctx, fleet.GetDevice{Auth: a, DeviceID: args.DeviceID})
		if err != nil {
			return nil, deviceNotFound(err, args.DeviceID)
		}
		return jsonResult(wire.NewDevice(d))
	})
	return t
}

type leaseArgs struct {
	DeviceID       string `json:"deviceId"`
	LeaseID        string `json:"leaseId"`
	TTLSeconds     int    `json:"ttlSeconds"`
	ResetOnRelease bool   `json:"resetOnRelease"`
}

func (s *Server) acquireLeaseTool() *tool {
	t := newTool("acquire_lease", "Acquire a lease",
		"Take exclusive use of a device; actions need its leaseId.",
		object([]string{"deviceId"}, prop{"deviceId", sDeviceID}, prop{"ttlSeconds", sTTL},
			prop{"resetOnRelease", `{"type":"boolean","description":"Reset the phone to its baseline when the lease ends (released or expired); default false."}`}),
		hints{}, domain.ScopeDevicesLease)
	t.run = run(s, func(ctx context.Context, app *commands.Application, a domain.Auth, args leaseArgs) (*mcpgo.CallToolResult, error) {
		l, err := app.Fleet.AcquireLease.Handle(ctx, fleet.AcquireLease{Auth: a, DeviceID: args.DeviceID, TTLSeconds: args.TTLSeconds,
			ResetOnRelease: args.ResetOnRelease})
		if err != nil {
			return nil, err
		}
		return jsonResult(wire.NewLease(l))
	})
	return t
}

func (s *Server) renewLeaseTool() *tool {
	t := newTool("renew_lease", "Renew a lease",
		"Extend your lease to ttlSeconds from now.",
		object([]string{"deviceId", "leaseId"}, prop{"deviceId", sDeviceID}, prop{"leaseId", sLeaseID}, prop{"ttlSeconds", sTTL}),
		hints{idempotent: true}, domain.ScopeDevicesLease)
	t.run = run(s, func(ctx context.Context, app *commands.Application, a domain.Auth, args leaseArgs) (*mcpgo.CallToolResult, error) {
		l, err := app.Fleet.RenewLease.Handle(ctx, fleet.RenewLease{Auth: a, DeviceID: args.DeviceID, LeaseID: args.LeaseID, TTLSeconds: args.TTLSeconds})
		if err != nil {
			return nil, err
		}
		return jsonResult(wire.NewLease(l))
	})
	return t
}

func (s *Server) releaseLeaseTool() *tool {
	t := newTool("release_lease", "Release a lease",
		"Give the device back; the leaseId stops working.",
		object([]string{"deviceId", "leaseId"}, prop{"deviceId", sDeviceID}, prop{"leaseId", sLeaseID}),
		hints{}, domain.ScopeDevicesLease)
	t.run = run(s, func(ctx context.Context, app *commands.Application, a domain.Auth, args leaseArgs) (*mcpgo.CallToolResult, error) {
		if _, err := app.Fleet.ReleaseLease.Handle(ctx, fleet.ReleaseLease{Auth: a, DeviceID: args.DeviceID, LeaseID: args.LeaseID}); err != nil {
			return nil, err
		}
		return jsonResult(map[string]any{"deviceId": args.DeviceID, "leaseId": args.LeaseID, "released": true})
	})
	return t
}

type listLeasesArgs struct {
	DeviceID string `json:"deviceId"`
	After    string `json:"after"`
	Limit    int    `json:"limit"`
}

func (s *Server) listLeasesTool() *tool {
	t := newTool("list_leases", "List leases",
		"Leases in force, e.g. to find a leaseId you hold.",
		object(nil, prop{"deviceId", sDeviceID},
			prop{"after", sAfter},
			prop{"limit", sLimit}),
		hints{readOnly: true}, domain.ScopeDevicesRead)
	t.run = run(s, func(ctx context.Context, app *commands.Application, a domain.Auth, args listLeasesArgs) (*mcpgo.CallToolResult, error) {
		page, err := app.Fleet.ListLeases.Handle(ctx, fleet.ListLeases{Auth: a, LeaseQuery: fleet.LeaseQuery{DeviceID: args.DeviceID, After: args.After, Limit: args.Limit}})
		if err != nil {
			return nil, err
		}
		return jsonResult(wire.NewLeasePage(page))
	})
	return t
}

type receiptArgs struct {
	IdempotencyKey string `json:"idempotencyKey"`
}

func (s *Server) getReceiptTool() *tool {
	t := newTool("get_receipt", "Get a receipt",
		"An action's receipt by idempotencyKey: state, result, frames.",
		object([]string{"idempotencyKey"}, prop{"idempotencyKey", `{"type":"string","maxLength":255,"pattern":"^[ -~]+$","description":"The idempotencyKey the action was sent with."}`}),
		hints{readOnly: true}, domain.ScopeDevicesRead)
	t.run = run(s, func(ctx context.Context, app *commands.Application, a domain.Auth, args receiptArgs) (*mcpgo.CallToolResult, error) {
		r, err := app.Fleet.GetReceipt.Handle(ctx, fleet.GetReceipt{Auth: a, IdempotencyKey: args.IdempotencyKey})
		if err != nil {
			return nil, err
		}
		return jsonResult(r)
	})
	return t
}

func (s *Server) wakeDeviceTool() *tool {
	t := newTool("wake_device", "Wake a device",
		"Turn the screen on (leaseId if you hold the lease).",
		object([]string{"deviceId"}, prop{"deviceId", sDeviceID}, prop{"leaseId", sLeaseID}),
		hints{idempotent: true}, domain.ScopeDevicesAct)
	t.run = run(s, func(ctx context.Context, app *commands.Application, a domain.Auth, args leaseArgs) (*mcpgo.CallToolResult, error) {
		d, err := app.Fleet.PowerDevice.Handle(ctx, fleet.PowerDevice{Auth: a, DeviceID: args.DeviceID, Wake: true, LeaseID: args.LeaseID})
		if err != nil {
			return nil, deviceNotFound(err, args.DeviceID)
		}
		return jsonResult(wire.NewDevice(d))
	})
	return t
}
