package mcp

import (
	"context"
	"fmt"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"phonefleet/commands"
	"phonefleet/commands/fleet"
	"phonefleet/domain"
)

type waitArgs struct {
	DeviceID   string `json:"deviceId"`
	Until      string `json:"until"`
	Text       string `json:"text"`
	ResourceID string `json:"resourceId"`
	StableMs   int    `json:"stableMs"`
	TimeoutMs  int    `json:"timeoutMs"`
}

// waitForTool runs commands.WaitFor, the handler behind POST
// /v1/devices/{deviceId}/wait, and answers its result as that route does.
func (s *Server) waitForTool() *tool {
	t := newTool("wait_for", "Wait for the screen",
		"Wait until an element (text, resourceId) appears or disappears, or the screen is stable.",
		object([]string{"deviceId"}, prop{"deviceId", sDeviceID},
			prop{"until", `{"type":"string","enum":["appears","disappears","stable"],"description":"What to wait for (default appears)."}`},
			prop{"text", `{"type":"string","minLength":1,"maxLength":200,"description":"An element whose text or description contains this (case-sensitive)."}`},
			prop{"resourceId", `{"type":"string","minLength":1,"maxLength":200,"description":"An element with this resource id, whole or without its package (e.g. save)."}`},
			prop{"stableMs", fmt.Sprintf(`{"type":"integer","minimum":%d,"maximum":%d,"description":"until=stable: how long the screen must stay unchanged (default %d)."}`,
				fleet.MinStableMs, fleet.MaxStableMs, fleet.DefaultStableMs)},
			prop{"timeoutMs", fmt.Sprintf(`{"type":"integer","minimum":1,"maximum":%d,"description":"Give up after this long (default %d)."}`,
				fleet.MaxWaitTimeoutMs, fleet.DefaultWaitTimeoutMs)}),
		hints{readOnly: true}, domain.ScopeDevicesRead)
	t.run = run(s, func(ctx context.Context, app *commands.Application, a domain.Auth, args waitArgs) (*mcpgo.CallToolResult, error) {
		res, err := app.Fleet.WaitFor.Handle(ctx, fleet.WaitFor{Auth: a, DeviceID: args.DeviceID, WaitCondition: fleet.WaitCondition{
			Until: args.Until, Text: args.Text, ResourceID: args.ResourceID, StableMs: args.StableMs, TimeoutMs: args.TimeoutMs}})
		if err != nil {
			return nil, err
		}
		return jsonResult(res)
	})
	return t
}
