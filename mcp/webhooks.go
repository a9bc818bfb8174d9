package mcp

import (
	"context"
	"encoding/json"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"phonefleet/commands"
	"phonefleet/commands/webhooks"
	"phonefleet/domain"
	"phonefleet/http/wire"
	"phonefleet/projections"
)

// The webhook tools run the handlers and queries of /v1/webhooks (spec
// 4.4) and answer the same shapes. Like those routes they need scope
// devices:read and nothing else; OAuth apps use the REST routes instead.

const sWebhookID = `{"type":"string","pattern":"^whk_[0-9a-f]{32}$","description":"The webhook (whk_…), as list_webhooks names it."}`

// webhookTool defines a webhook tool: scope devices:read, closed to apps.
func webhookTool(name, title, description, schema string, h hints) *tool {
	t := newTool(name, title, description, schema, h, domain.ScopeDevicesRead)
	t.deny = closedToApps("the REST API (/v1/webhooks)")
	return t
}

type webhookArgs struct {
	WebhookID  string   `json:"webhookId"`
	URL        string   `json:"url"`
	Events     []string `json:"events"`
	Enabled    *bool    `json:"enabled"`
	Limit      int      `json:"limit"`
	NextBefore string   `json:"nextBefore"`
}

func (s *Server) webhookTools() []*tool {
	list := webhookTool("list_webhooks", "List webhooks",
		"The organisation's webhook subscriptions.",
		object(nil), hints{readOnly: true})
	list.run = run(s, func(ctx context.Context, app *commands.Application, a domain.Auth, _ webhookArgs) (*mcpgo.CallToolResult, error) {
		views, err := app.Webhooks.ListWebhooks.Handle(ctx, webhooks.ListWebhooks{Auth: a})
		if err != nil {
			return nil, err
		}
		return jsonResult(wire.NewWebhookList(views))
	})

	events, _ := json.Marshal(domain.WebhookEventNames)
	create := webhookTool("create_webhook", "Create a webhook",
		"Subscribe a public https url to events; the secret is shown once.",
		object([]string{"url", "events"},
			prop{"url", `{"type":"string","minLength":1,"maxLength":2000,"description":"The receiver, https://…"}`},
			prop{"events", `{"type":"array","minItems":1,"uniqueItems":true,"items":{"type":"string","enum":` + string(events) + `}}`}),
		hints{openWorld: true})
	create.run = run(s, func(ctx context.Context, app *commands.Application, a domain.Auth, args webhookArgs) (*mcpgo.CallToolResult, error) {
		c, err := app.Webhooks.CreateWebhook.Handle(ctx, webhooks.CreateWebhook{Auth: a, URL: args.URL, Events: args.Events})
		if err != nil {
			return nil, err
		}
		v, err := app.Webhooks.GetWebhook.Handle(ctx, webhooks.GetWebhook{Auth: a, WebhookID: c.WebhookID})
		if err != nil {
			return nil, err
		}
		return jsonResult(wire.NewWebhookWithSecret(v, c.Secret))
	})

	update := webhookTool("update_webhook", "Switch a webhook on or off",
		"Switch a webhook on or off; off drops queued retries.",
		object([]string{"webhookId", "enabled"}, prop{"webhookId", sWebhookID}, prop{"enabled", `{"type":"boolean"}`}),
		hints{destructive: true, idempotent: true})
	update.run = run(s, func(ctx context.Context, app *commands.Application, a domain.Auth, args webhookArgs) (*mcpgo.CallToolResult, error) {
		if _, err := app.Webhooks.SetWebhookEnabled.Handle(ctx, webhooks.SetWebhookEnabled{Auth: a, WebhookID: args.WebhookID, Enabled: *args.Enabled}); err != nil {
			return nil, err
		}
		v, err := app.Webhooks.GetWebhook.Handle(ctx, webhooks.GetWebhook{Auth: a, WebhookID: args.WebhookID})
		if err != nil {
			return nil, err
		}
		return jsonResult(wire.NewWebhook(v))
	})

	rotate := webhookTool("rotate_webhook_secret", "Rotate a webhook's secret",
		"Replace a webhook's signing secret, shown once; the old one stops.",
		object([]string{"webhookId"}, prop{"webhookId", sWebhookID}), hints{destructive: true})
	rotate.run = run(s, func(ctx context.Context, app *commands.Application, a domain.Auth, args webhookArgs) (*mcpgo.CallToolResult, error) {
		secret, err := app.Webhooks.RotateWebhookSecret.Handle(ctx, webhooks.RotateWebhookSecret{Auth: a, WebhookID: args.WebhookID})
		if err != nil {
			return nil, err
		}
		v, err := app.Webhooks.GetWebhook.Handle(ctx, webhooks.GetWebhook{Auth: a, WebhookID: args.WebhookID})
		if err != nil {
			return nil, err
		}
		return jsonResult(wire.NewWebhookWithSecret(v, secret))
	})

	test := webhookTool("test_webhook", "Send a test delivery",
		"Queue one test run.ended delivery on the real delivery path.",
		object([]string{"webhookId"}, prop{"webhookId", sWebhookID}), hints{openWorld: true})
	test.run = run(s, func(ctx context.Context, app *commands.Application, a domain.Auth, args webhookArgs) (*mcpgo.CallToolResult, error) {
		id, err := app.Webhooks.TestWebhook.Handle(ctx, webhooks.TestWebhook{Auth: a, WebhookID: args.WebhookID})
		if err != nil {
			return nil, err
		}
		return jsonResult(wire.NewTestDelivery(id))
	})

	del := webhookTool("delete_webhook", "Delete a webhook",
		"Remove a webhook subscription and its delivery records.",
		object([]string{"webhookId"}, prop{"webhookId", sWebhookID}), hints{destructive: true})
	del.run = run(s, func(ctx context.Context, app *commands.Application, a domain.Auth, args webhookArgs) (*mcpgo.CallToolResult, error) {
		if _, err := app.Webhooks.DeleteWebhook.Handle(ctx, webhooks.DeleteWebhook{Auth: a, WebhookID: args.WebhookID}); err != nil {
			return nil, err
		}
		return jsonResult(map[string]any{"webhookId": args.WebhookID, "deleted": true})
	})

	deliveries := webhookTool("list_webhook_deliveries", "List a webhook's deliveries",
		"A webhook's deliveries, newest first: status, attempts, response.",
		object([]string{"webhookId"}, prop{"webhookId", sWebhookID},
			prop{"limit", `{"type":"integer","minimum":1,"maximum":100,"description":"Page size (default 50)."}`},
			prop{"nextBefore", `{"type":"string","pattern":"^[0-9]+_dlv_[0-9a-f]{32}$","description":"The nextBefore of the previous page."}`}),
		hints{readOnly: true})
	deliveries.run = run(s, func(ctx context.Context, app *commands.Application, a domain.Auth, args webhookArgs) (*mcpgo.CallToolResult, error) {
		limit := args.Limit
		if limit == 0 {
			limit = 50
		}
		var before *projections.DeliveryCursor
		if args.NextBefore != "" {
			c, ok := wire.ParseDeliveryCursor(args.NextBefore)
			if !ok {
				return nil, domain.Errorf(domain.CodeInvalidArgument, "nextBefore must be a value returned as nextBefore")
			}
			before = &c
		}
		page, err := app.Webhooks.ListDeliveries.Handle(ctx, webhooks.ListDeliveries{Auth: a, WebhookID: args.WebhookID, Limit: limit, Before: before})
		if err != nil {
			return nil, err
		}
		return jsonResult(wire.NewDeliveryPage(page))
	})
	return []*tool{list, create, update, rotate, test, del, deliveries}
}
