package mcp

import (
	"context"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"phonefleet/commands"
	"phonefleet/commands/fleet"
	"phonefleet/domain"
)

// The receipt tools beyond get_receipt: the organisation's receipt feed
// (GET /v1/receipts) and a person's review (POST
// /v1/receipts/{idempotencyKey}/reviewed), on the same queries and
// commands, answering the same shapes. Neither is open to OAuth apps (spec
// 5.2: an app reads one receipt by its idempotency key, never the feed),
// and a review is a person's act: an API key does not see the tool either.

type listReceiptsArgs struct {
	DeviceID      string  `json:"deviceId"`
	AgentRunID    *string `json:"agentRunId"`
	Status        string  `json:"status"`
	ActorUserID   *string `json:"actorUserId"`
	ActorAPIKeyID *string `json:"actorApiKeyId"`
	Limit         *int    `json:"limit"`
	Before        string  `json:"before"`
	BeforeKey     string  `json:"beforeKey"`
}

// receiptPage is the receipt page of spec 2.5, as GET /v1/receipts answers
// it.
type receiptPage struct {
	Receipts      []domain.Receipt `json:"receipts"`
	NextBefore    string           `json:"nextBefore,omitempty"`
	NextBeforeKey string           `json:"nextBeforeKey,omitempty"`
}

// cursorTime writes a page cursor with microsecond precision (spec 4.3:
// rounding it skips rows), as the REST route does.
func cursorTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z07:00") }

type reviewArgs struct {
	IdempotencyKey string `json:"idempotencyKey"`
	Note           string `json:"note"`
}

const sReceiptKey = `{"type":"string","maxLength":255,"pattern":"^[ -~]+$","description":"The idempotencyKey the action was sent with."}`

func (s *Server) receiptTools() []*tool {
	list := newTool("list_receipts", "List receipts",
		"Receipts of actions, newest first, filtered by device, run, status or actor.",
		object(nil,
			prop{"deviceId", sDeviceID},
			prop{"agentRunId", `{"type":"string","minLength":1,"maxLength":255,"description":"Only receipts of this run (exact match)."}`},
			prop{"status", `{"type":"string","enum":["pending","committed","failed"],"description":"Only receipts in this state."}`},
			prop{"actorUserId", `{"type":"string","minLength":1,"maxLength":255,"description":"Only actions by this person."}`},
			prop{"actorApiKeyId", `{"type":"string","minLength":1,"maxLength":255,"description":"Only actions by this API key."}`},
			prop{"limit", sLimit},
			prop{"before", `{"type":"string","maxLength":64,"description":"The nextBefore of the previous page, unchanged."}`},
			prop{"beforeKey", `{"type":"string","maxLength":255,"description":"The nextBeforeKey of the previous page."}`}),
		hints{readOnly: true}, domain.ScopeDevicesRead)
	list.deny = closedToApps("the console's receipts page (an app reads one receipt by its idempotency key: get_receipt)")
	list.run = run(s, func(ctx context.Context, app *commands.Application, a domain.Auth, args listReceiptsArgs) (*mcpgo.CallToolResult, error) {
		page, err := app.Fleet.ListReceipts.Handle(ctx, fleet.ListReceipts{Auth: a, ReceiptQuery: fleet.ReceiptQuery{
			DeviceID: args.DeviceID, AgentRunID: args.AgentRunID, Status: args.Status, ActorUserID: args.ActorUserID,
			ActorAPIKeyID: args.ActorAPIKeyID, Limit: args.Limit, Before: args.Before, BeforeKey: args.BeforeKey}})
		if err != nil {
			return nil, err
		}
		out := receiptPage{Receipts: page.Receipts}
		if out.Receipts == nil {
			out.Receipts = []domain.Receipt{}
		}
		if !page.NextBefore.IsZero() {
			out.NextBefore, out.NextBeforeKey = cursorTime(page.NextBefore), page.NextBeforeKey
		}
		return jsonResult(out)
	})

	review := newTool("review_receipt", "Review a receipt",
		"Record your review of an action's receipt, with an optional note. Signed-in people only.",
		object([]string{"idempotencyKey"}, prop{"idempotencyKey", sReceiptKey},
			prop{"note", `{"type":"string","maxLength":2000,"description":"An optional remark kept with the review."}`}),
		hints{}, domain.ScopeDevicesRead)
	review.deny = sessionOnly("reviews of receipts")
	review.run = run(s, func(ctx context.Context, app *commands.Application, a domain.Auth, args reviewArgs) (*mcpgo.CallToolResult, error) {
		r, err := app.Fleet.ReviewReceipt.Handle(ctx, fleet.ReviewReceipt{Auth: a, IdempotencyKey: args.IdempotencyKey, Note: args.Note})
		if err != nil {
			return nil, err
		}
		return jsonResult(r)
	})
	return []*tool{list, review}
}
